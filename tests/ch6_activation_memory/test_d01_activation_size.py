"""Ch6-01 Activation Memory 의 크기: each test asserts a claim the page makes."""
import itertools
import time

import pytest
import torch

from snippets import results
from snippets.ch6_activation_memory import d01_activation_size as page
from snippets.common import activation_memory as am
from snippets.common.saved_tensors import SavedTensorCounter
from snippets.common.gpt_block import block_params, make_block
from tests.conftest import cell_budget


def test_term_by_term_only_masks_and_layernorm_stats_differ():
    """Experiment 1: every group of Theorem 6.1.3 is measured exactly; masks are 2 B on CPU; LN stats are extra."""
    s, b, h, a = 128, 2, 64, 4
    table, m = page.term_table(s, b, h, a)
    assert m["hook_bytes"] == m["graph_bytes"]
    for group, p1, p2, got in table:
        if group == "LayerNorm mean/rstd":
            assert p1 == p2 == 0 and got == 2 * 2 * s * b * 2
        elif "mask" in group:
            assert got == p2 == 2 * p1  # the CPU noise tensor is bf16: twice the paper's 1-byte mask
        else:
            assert got == p1 == p2
    assert sum(r[1] for r in table) == am.no_parallel(s, b, h, a)


@pytest.mark.parametrize("cfg", page.CONFIGS)
def test_sweep_residual_is_zero(cfg):
    """Experiment 2: measured = sbh(36 + 6as/h) + LN statistics, for several (s, b, h, a), by both routes."""
    (r,) = page.sweep([cfg])
    assert r["hook"] == r["graph"] == r["m2"] + r["stats"]
    assert r["paper"] == pytest.approx(am.layer_bytes(*cfg, mask_bytes=1))
    assert r["hook"] > r["paper"]


def test_float32_block_doubles_everything_but_nothing_else():
    """Independent check of the counter: in fp32 activations and the CPU masks are 4 B, stats fp32."""
    s, b, h, a = 32, 2, 32, 4
    m = page.measure(s, b, h, a, dtype=torch.float32)
    assert m["hook_bytes"] == m["graph_bytes"] == am.layer_bytes(s, b, h, a, act_bytes=4, mask_bytes=4) + 2 * 2 * s * b * 4


def test_dropout_free_block_removes_exactly_the_mask_terms():
    """With p = 0 dropout is the identity: the mask terms (2sbh + as²b) go, and the ·V input *is* the
    softmax output (one storage), so one more as²b goes (all × 2 B)."""
    s, b, h, a = 64, 1, 64, 8
    with_drop = page.measure(s, b, h, a)["hook_bytes"]
    no_drop = page.measure(s, b, h, a, p_drop=0.0)["hook_bytes"]
    assert with_drop - no_drop == 2 * (2 * s * b * h + a * s * s * b) + 2 * a * s * s * b


def test_closed_forms_match_term_sums():
    """Theorem 6.1.3 and 6.1.4: Table 2's printed forms equal the sum of the classified terms."""
    for s, b, h, a, t in itertools.product([128, 2048], [1, 3], [768, 12288], [12, 96], [1, 2, 8]):
        assert am.layer_bytes(s, b, h, a) == pytest.approx(am.no_parallel(s, b, h, a))
        assert am.closed_form(s, b, h, a, mask_bytes=2) == pytest.approx(s * b * h * (36 + 6 * a * s / h))
        assert am.layer_bytes(s, b, h, a, t=t) == pytest.approx(am.tensor_parallel(s, b, h, a, t))
        assert am.layer_bytes(s, b, h, a, t=t, sp=True) == pytest.approx(am.tensor_sequence_parallel(s, b, h, a, t))
        assert am.layer_bytes(s, b, h, a, t=t, recompute="selective") == pytest.approx(
            am.tensor_parallel_selective(s, b, h, a, t))
        assert am.layer_bytes(s, b, h, a, t=t, sp=True, recompute="selective") == pytest.approx(
            am.tensor_sequence_parallel_selective(s, b, h, a, t))
        assert am.layer_bytes(s, b, h, a, recompute="full") == am.full_recompute(s, b, h)
    with pytest.raises(ValueError):
        am.layer_bytes(1, 1, 1, 1, recompute="some")


def test_s2_share_grows_and_matches_measurement():
    """Experiment 3: the measured share of the three score tensors = (4+m)as²b / (total + LN stats)."""
    rows = page.s2_share_table()
    shares = [r["measured"] for r in rows]
    assert shares == sorted(shares)
    h, a, b = 64, 4, 1
    for r in rows:
        s = r["s"]
        want = 6 * a * s * s * b / (am.closed_form(s, b, h, a, mask_bytes=2) + 8 * s * b)
        assert r["measured"] == pytest.approx(want, rel=1e-12)
        assert r["measured"] < r["formula_m2"]
    assert am.s2_share(2048, 1, 12288, 96) == pytest.approx(80 / 114)


def _gpt3_on_meta_live():
    """The same trace the program runs, done here independently (meta device, nothing allocated)."""
    g = am.GPT3
    block = make_block(g["h"], g["a"], device="meta")
    x = torch.randn(g["s"], 1, g["h"], dtype=torch.bfloat16, device="meta", requires_grad=True)
    with SavedTensorCounter(block) as c:
        block(x)
    return c.total_bytes


@pytest.mark.parametrize("run", results.load("checkpoint_bench", kind="cpu"), ids=lambda r: r.path.name)
def test_gpt3_layer_on_meta_and_corollary(run):
    """Experiment 4 / Corollary 6.1.5: meta measurement explained exactly; 275 GB; b ≈ 47; weights 350 GB."""
    r = page.gpt3_summary(run)
    assert r["measured_layer"] == r["m2_layer"] + r["stats"] == _gpt3_on_meta_live()
    assert r["paper_model"] == 275_414_777_856
    assert r["paper_model"] < r["weights_bf16"] == 350e9
    assert round(r["b_for_13TB"], 1) == 47.2
    # the bf16 weight bytes of a GPT-3 block, read from a block built on the meta device (no memory)
    gpt3_blk = make_block(12288, 96, device="meta")
    assert r["block_weights"] == sum(p.numel() * p.element_size() for p in gpt3_blk.parameters())
    # the meta block really has the parameter count block_params says
    blk = make_block(64, 4, device="meta")
    assert sum(p.numel() for p in blk.parameters()) == block_params(64)


def test_exercise_2_ratio_is_5_4():
    s, h, a, t = 2048, 12288, 96, 8
    ratio = am.tensor_parallel(s, 1, h, a, t) / am.tensor_sequence_parallel_selective(s, 1, h, a, t)
    assert ratio == pytest.approx(23 / 4.25) and round(ratio, 1) == 5.4


def test_memtracker_agrees_on_saved_bytes():
    """Independent route: PyTorch's MemTracker (module-level activation accounting) sees the same total."""
    pytest.importorskip("torch.distributed._tools.mem_tracker")
    from torch.distributed._tools.mem_tracker import MemTracker

    s, b, h, a = 64, 2, 32, 4
    counted = page.measure(s, b, h, a)["hook_bytes"]  # also caches the causal bias outside the tracker
    blk = make_block(h, a)
    x = torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True)
    mt = MemTracker()
    mt.track_external(blk, x)
    with mt:
        y = blk(x)
        snap = mt.get_tracker_snapshot("current")
    act = sum(v for dev in snap.values() for k, v in dev.items() if getattr(k, "value", k) == "Activation")
    # MemTracker's "Activation" = tensors created in the forward and still alive: the saved ones and the output y,
    # but not the input x (it was created outside; our count has it as LayerNorm 1's input)
    assert act == counted - x.untyped_storage().nbytes() + y.untyped_storage().nbytes()


def test_cells_fit_the_budget():
    page.measure(16, 2, 32, 4)  # warm-up (the page's first cell pays it once)
    run = results.load("checkpoint_bench", kind="cpu")[0]
    for f in (page.sweep, page.s2_share_table, lambda: page.gpt3_summary(run), lambda: page.term_table(128, 2, 64, 4)):
        t0 = time.perf_counter()
        f()
        assert time.perf_counter() - t0 < cell_budget()


def test_gpu_tab_models_the_stack_with_cuda_widths(tmp_path, monkeypatch):
    """Experiment 4 per hardware: the last line of each tab compares that file's stack bytes per layer with
    Theorem 6.1.3 at the device's widths: bf16 noise (δ = 2) and bf16 statistics on CPU, bool masks (δ = 1) and
    fp32 statistics on CUDA. Both models are recomputed here from the files' params."""
    from tests.page_cells import results_dir, run_cell, tab

    res = results_dir(tmp_path, ["checkpoint_bench"])
    html = run_cell("ch6-activation-memory/01-activation-size.md", "ch6-01-exp4-gpt3", res, monkeypatch)
    gpu_file = results.read(next((res / "checkpoint_bench").glob("gpu-*.json")))
    p = gpu_file.params
    s, b, h, a = p["s"], p["b"], p["h"], p["a"]
    cuda = am.closed_form(s, b, h, a, mask_bytes=1) + 4 * s * b * 4
    cpu = am.closed_form(s, b, h, a, mask_bytes=2) + 4 * s * b * 2
    gpu_tab, cpu_tab = tab(html, "GPU"), tab(html, "CPU")
    assert f"(δ = 1) + LN 통계 = {cuda:,.0f} B" in gpu_tab and f"(δ = 2) + LN 통계 = {cpu:,.0f} B" in cpu_tab
    assert "torch.cuda.memory_allocated" in gpu_tab and "MemTracker" in cpu_tab
    none = next(m for m in gpu_file.measurements["modes"] if m["mode"] == "none")
    assert f"{none['act_after_forward'] / p['layers'] - cuda:+,.0f} B" in gpu_tab

"""Ch6-03 Selective Activation Recomputation: each test asserts a claim the page makes."""
import pytest
import torch

from snippets import results
from snippets.ch6_activation_memory import d03_selective_recompute as page
from snippets.common import activation_memory as am
from snippets.common.gpt_block import make_block, one_thread


@pytest.mark.parametrize("cfg", [(64, 2, 64, 4), (128, 2, 64, 4), (256, 1, 64, 8)])
def test_core_saves_exactly_the_score_terms(cfg):
    """Experiment 1 / Theorem 6.3.3: the core's own saved bytes (QKV excluded) = (4 + m)as²b, m = 2 on CPU."""
    s, b, h, a = cfg
    core, layer = page.core_bytes(s, b, h, a)
    assert core == 6 * a * s * s * b
    assert layer == am.closed_form(s, b, h, a, mask_bytes=2) + 8 * s * b
    assert core / layer < (6 * a * s / h) / (36 + 6 * a * s / h)


def _cpu():
    return results.load("checkpoint_bench", kind="cpu")


@pytest.mark.parametrize("r", _cpu(), ids=lambda r: r.path.name)
def test_measured_bytes_and_flops_match_the_model(r):
    """Experiments 2 and 3: after-forward bytes and matmul FLOPs of none / selective / ln / per-block equal the model."""
    rows, A, core = page.measured_modes(r)
    assert {m["mode"] for m in rows} == {"none", "selective", "ln", f"segments={r.params['layers']}"}
    for m in rows:
        assert m["act_after_forward"] == m["model_bytes"], m["mode"]
        assert m["flops"]["fwd_bwd"] == m["model_flops"], m["mode"]
    by = {m["mode"]: m for m in rows}
    p = r.params
    # LayerNorm recompute saves only the statistics: less than 1 % of the layer here, selective saves the score terms
    ln_saving = 1 - by["ln"]["act_after_forward"] / by["none"]["act_after_forward"]
    sel_saving = 1 - by["selective"]["act_after_forward"] / by["none"]["act_after_forward"]
    assert ln_saving < 0.01 < sel_saving
    # early stop: selective reruns QKᵀ (baddbmm) but not ·V (bmm)
    assert by["selective"]["flops"]["by_op"]["aten.baddbmm"] == 2 * by["none"]["flops"]["by_op"]["aten.baddbmm"]
    assert by["selective"]["flops"]["by_op"]["aten.bmm"] == by["none"]["flops"]["by_op"]["aten.bmm"]
    assert by["ln"]["flops"]["fwd_bwd"] == by["none"]["flops"]["fwd_bwd"]
    fwd = sum(page.layer_matmul_flops(p["s"], p["b"], p["h"]).values()) * p["layers"]
    assert by["none"]["flops"]["fwd"] == fwd
    extra = by["selective"]["flops"]["fwd_bwd"] / by["none"]["flops"]["fwd_bwd"] - 1
    assert extra == pytest.approx(page.recompute_overhead(p["s"], p["h"], "qk"))
    assert all(m["grads_equal_to_none"] in (None, True) for m in rows)


def test_flop_model_matches_flop_counter_live():
    """Theorem 6.3.4's per-op counts against torch.utils.flop_counter on a fresh block (no checkpoint)."""
    from torch.utils.flop_counter import FlopCounterMode

    s, b, h, a = 32, 2, 64, 4
    blk = make_block(h, a)
    x = torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True)
    with one_thread(), FlopCounterMode(display=False) as fc:
        blk(x).float().sum().backward()
    f = page.layer_matmul_flops(s, b, h)
    assert fc.get_total_flops() == 3 * sum(f.values())
    counts = fc.get_flop_counts()["Global"]
    assert counts[torch.ops.aten.baddbmm] == f["QK^T"]  # forward only: its backward runs as bmm


def test_gpt3_numbers_of_the_paper():
    """Experiment 4 / errata row 28: −70 % activations, +2.7 % FLOPs (paper's accounting), 1.6 % for 530B, 5.4×."""
    g = page.gpt3_tradeoff(t=8)
    assert round(g["saving_no_tp"], 2) == 0.70 and g["saving_tp_sp"] == pytest.approx(g["saving_no_tp"])
    # Theorem 6.3.3: without SP the unsharded 10sbh stays in the denominator, so TP alone saves less
    gg = am.GPT3
    x = 5 * gg["a"] * gg["s"] / (gg["h"] * 8)
    assert g["saving_tp"] == pytest.approx(x / (10 + 24 / 8 + x)) and g["saving_tp"] < g["saving_no_tp"] - 0.2
    assert round(g["paper"], 3) == 0.027 and round(g["paper_530b"], 3) == 0.016
    assert g["core"] == pytest.approx(1 / 111) and g["core"] < 0.01 and g["qk"] == pytest.approx(g["core"] / 2)
    assert g["full"] == pytest.approx(1 / 3)
    assert round(g["tp_over_sp_sel"], 1) == 5.4


def test_exercise_1_limit_and_exercise_2_ratio():
    h = 4096
    prev = 0
    for s in (2048, 8192, 32768, 10 ** 7):
        o = page.recompute_overhead(s, h, "core")
        assert prev < o < 1 / 3
        prev = o
    g = am.GPT3
    ratio = am.tensor_sequence_parallel(g["s"], 1, g["h"], g["a"], 8) / am.tensor_sequence_parallel_selective(g["s"], 1, g["h"], g["a"], 8)
    assert ratio == pytest.approx(114 / 34)


def test_megatron_selective_default_is_core_attention_in_our_block():
    """Definition 6.3.1: our block checkpoints exactly core_attention when recompute='core'."""
    blk = make_block(32, 4)
    blk.recompute = "core"
    import torch.utils.checkpoint as cp

    called = []
    orig = cp.checkpoint

    def spy(fn, *args, **kw):
        called.append(getattr(fn, "__name__", str(fn)))
        return orig(fn, *args, **kw)

    import snippets.common.gpt_block as gb

    gb.checkpoint, saved = spy, gb.checkpoint
    try:
        with one_thread():
            blk(torch.randn(8, 1, 32, dtype=torch.bfloat16, requires_grad=True))
    finally:
        gb.checkpoint = saved
    assert called == ["core_attention"]


def test_gpu_tab_models_selective_with_cuda_widths(tmp_path, monkeypatch):
    """Experiment 2 per hardware: in the GPU tab, selective's model is L·(A − (4 + δ)as²b) with δ = 1 and fp32
    LayerNorm statistics (recomputed here from the GPU file's params); the CPU tab uses δ = 2."""
    from snippets.common import activation_memory as am
    from tests.page_cells import results_dir, run_cell, tab

    res = results_dir(tmp_path, ["checkpoint_bench"])
    p = results.read(next((res / "checkpoint_bench").glob("gpu-*.json"))).params
    s, b, h, a, L = p["s"], p["b"], p["h"], p["a"], p["layers"]
    A = am.closed_form(s, b, h, a, mask_bytes=1) + 4 * s * b * 4
    sel_cuda = L * (A - 5 * a * s * s * b)
    A2 = am.closed_form(s, b, h, a, mask_bytes=2) + 4 * s * b * 2
    sel_cpu = L * (A2 - 6 * a * s * s * b)
    html = run_cell("ch6-activation-memory/03-selective-recompute.md", "ch6-03-exp2-memory", res, monkeypatch)
    assert f"{sel_cuda:,.0f}" in tab(html, "GPU") and f"{sel_cpu:,.0f}" in tab(html, "CPU")
    assert f"{sel_cuda:,.0f}" not in tab(html, "CPU")

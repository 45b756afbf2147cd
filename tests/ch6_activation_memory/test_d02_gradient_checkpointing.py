"""Ch6-02 Gradient Checkpointing: each test asserts a claim the page makes."""
import math

import numpy as np
import pytest
import torch

from snippets import results
from snippets.ch6_activation_memory import d02_gradient_checkpointing as page
from snippets.common import activation_memory as am
from snippets.common.gpt_block import forward_stack, make_stack, one_thread


def _cpu():
    return results.load("checkpoint_bench", kind="cpu")


@pytest.mark.parametrize("r", _cpu(), ids=lambda r: r.path.name)
def test_after_forward_is_exactly_k_c_and_peak_is_model_plus_constant(r):
    """Experiment 1: bytes kept after forward = k·c (L·A without checkpointing), measured by MemTracker;
    the backward peak exceeds k·c + ⌈L/k⌉·A by the same few c in every checkpointed mode; k = 1 ≈ none."""
    rows, A, c = page.measured_rows(r)
    for m in rows:
        assert m["act_after_forward"] == m["model_after"], m["mode"]
        assert m["act_peak_backward"] >= m["model_peak"]
    extra = {m["act_peak_backward"] - m["model_peak"] for m in rows if m["segments"] > 0}
    assert len(extra) == 1 and 0 < extra.pop() < 8 * c
    peaks = {m["segments"]: m["act_peak_backward"] for m in rows}
    assert abs(peaks[1] - peaks[0]) < c
    L = r.params["layers"]
    assert peaks[L] < peaks[round(math.sqrt(L))] < peaks[0]  # per-block beats √L here (L ≤ A/c)
    assert L <= A / c


@pytest.mark.parametrize("r", _cpu(), ids=lambda r: r.path.name)
def test_every_block_runs_twice_and_gradients_are_bitwise_equal(r):
    """Experiment 2 / Theorem 6.2.3: one extra forward, exactly; checkpointing is exact (RNG restored)."""
    L = r.params["layers"]
    for m in r.measurements["modes"]:
        if m["selective"]:
            assert m["block_forward_calls"] == [1] * L  # only the core attention reruns (Ch6-03)
        else:
            assert m["block_forward_calls"] == [1 if m["segments"] == 0 else 2] * L
        assert m["grads_equal_to_none"] in (None, True)


def test_recompute_count_and_bitwise_gradients_live():
    """The same two facts on a fresh tiny stack, independently of the results file."""
    L = 5
    ref = None
    with one_thread():
        for k in (0, 5, 2, 1):
            blocks = make_stack(L, 32, 4)
            calls = [0] * L
            for i, blk in enumerate(blocks):
                blk.register_forward_pre_hook(lambda m, args, i=i: calls.__setitem__(i, calls[i] + 1))
            x = torch.randn(8, 1, 32, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0)).requires_grad_()
            torch.manual_seed(7)
            forward_stack(blocks, x, k).float().sum().backward()
            grads = [p.grad for p in blocks.parameters()] + [x.grad]
            ref = ref or grads
            assert all(torch.equal(a, b) for a, b in zip(grads, ref))
            assert calls == [1 if k == 0 else 2] * L


def test_sqrt_optimum_and_amgm():
    """Theorem 6.2.3: the integer optimum of k·c + ⌈L/k⌉·A is near √(LA/c) and never below 2√(LAc)."""
    for L, A, c in [(100, 1.0, 1.0), (1024, 3.0, 1.0), (400, 10.0, 2.0), (10_000, 1.0, 1.0)]:
        k, peak, k_cont, bound = page.best_segments(L, A, c)
        assert peak >= bound - 1e-9
        assert abs(k - k_cont) <= 0.5 * k_cont + 1
        assert peak <= (math.sqrt(L) + 1) * (A + c) + 1e-9  # O(√L) at k = ⌈√L⌉


def test_gpt3_sweep_per_block_is_integer_optimal_up_to_about_2A_over_c():
    """Experiment 3 / Corollary 6.2.4 / Exercise 2."""
    rows, A, c = page.gpt3_sweep()
    assert A / c == 57
    by_L = {r["L"]: r for r in rows}
    for L in (16, 96):
        assert by_L[L]["k_best"] == L and by_L[L]["sqrt"] > 3 * by_L[L]["per_block"]
    assert by_L[1024]["k_best"] < 1024 and by_L[1024]["best"] < by_L[1024]["per_block"]
    last = max(L for L in range(1, 400) if page.best_segments(L, A, c)[0] == L)
    assert abs(last - 2 * A / c) <= 2
    # Exercise 2's text: block-level ties with n_ckpt = ceil(L/2) at L = 114, 115 and loses from 116 on
    assert last == 113
    for L, tie in ((114, True), (115, True), (116, False)):
        assert (page.best_segments(L, A, c)[1] == L * c + A) is tie
    # the simulator agrees with a brute-force loop
    L = 96
    brute = min(k * c + math.ceil(L / k) * A for k in range(1, L + 1))
    assert brute == page.best_segments(L, A, c)[1]


def test_time_ratio_formula():
    """Corollary 6.2.5: β = 2 gives 4/3."""
    assert page.time_ratio(1.0, 2.0) == pytest.approx(4 / 3)
    assert np.isclose(page.time_ratio(3.0, 3.0), 1.5)


@pytest.mark.parametrize("r", _cpu(), ids=lambda r: r.path.name)
def test_measured_time_against_one_extra_forward(r):
    """Experiment 4 against the committed checkpoint_bench file: every checkpointed mode reran each block once
    (2L block forwards, counted by the program), took longer than 'none', and its measured ratio lies within
    0.3 of the (2F+B)/(F+B) predicted from the 'none' mode's own F and B; modes with the same recompute count
    agree with one another within 5 % (the page: differences among them are the measuring environment)."""
    modes = {m["mode"]: m for m in r.measurements["modes"]}
    none = modes["none"]
    L = r.params["layers"]
    F = none["fwd_ms_median"]
    pred = (none["fwd_bwd_ms_median"] + F) / none["fwd_bwd_ms_median"]  # one more forward on top of F + B
    ratios = []
    for m in r.measurements["modes"]:
        if m["selective"] or m["segments"] == 0:
            continue
        assert sum(m["block_forward_calls"]) == 2 * L, m["mode"]
        ratio = m["fwd_bwd_ms_median"] / none["fwd_bwd_ms_median"]
        assert 1 < ratio and abs(ratio - pred) < 0.3, (m["mode"], ratio, pred)
        ratios.append(ratio)
    assert len(ratios) >= 2 and max(ratios) / min(ratios) < 1.05
    rows, _, _ = page.timing_rows(r)
    assert [m["mode"] for m in rows][0] == "none" and all(m["pred"] == pytest.approx(pred) for m in rows[1:])


def test_exercise_1_per_block_beats_k10():
    g = am.GPT3
    A, c = am.no_parallel(g["s"], 1, g["h"], g["a"]), am.full_recompute(g["s"], 1, g["h"])
    _, peaks = page.segment_memory(96, A, c, np.array([0, 96, 10]))
    assert peaks[1] < peaks[2] < peaks[0]


@pytest.mark.dist
def test_tiny_preset_runs(run_tiny):
    """The program runs for real (one process, CPU) and its tiny preset satisfies the same model."""
    data, _ = run_tiny("checkpoint_bench", nproc=1)
    modes = data["measurements"]["modes"]
    p = data["params"]
    A, c = page.layer_sizes(p, gpu=False)
    for m in modes:
        if not m["selective"]:
            after, _ = page.segment_memory(p["layers"], A, c, m["segments"])
            assert m["act_after_forward"] == after
        assert m["grads_equal_to_none"] in (None, True)


def test_gpu_tabs_use_cuda_widths_and_the_gpu_gemm_peak(tmp_path, monkeypatch):
    """Experiments 1 and 4 per hardware. Experiment 1's GPU tab models the stack with A at CUDA's widths (δ = 1,
    fp32 statistics), recomputed here. Experiment 4: with a gemm_bench file on the same GPU, the GPU tab sets the
    useful TFLOP/s against that file's peak (recomputed here); the CPU tab, which has no such file, does not."""
    from tests.page_cells import results_dir, run_cell, synthetic_gemm, tab

    md = "ch6-activation-memory/02-gradient-checkpointing.md"
    res = results_dir(tmp_path, ["checkpoint_bench"])
    f = next((res / "checkpoint_bench").glob("gpu-*.json"))
    gpu_file = results.read(f)
    p = gpu_file.params
    s, b, h, a, L = p["s"], p["b"], p["h"], p["a"], p["layers"]
    # Korthikanti et al. eq. 1 with 1-byte masks, sbh(34 + 5as/h), plus 4 fp32 LayerNorm statistics per token
    A_cuda = s * b * h * (34 + 5 * a * s / h) + 4 * s * b * 4
    mem = run_cell(md, "ch6-02-exp1-memory", res, monkeypatch)
    assert f"A = {A_cuda:,.0f} B" in tab(mem, "GPU") and f"A = {A_cuda:,.0f} B" not in tab(mem, "CPU")
    assert f"{L * A_cuda:,.0f}" in tab(mem, "GPU")  # mode none: L·A

    no_gemm = tab(run_cell(md, "ch6-02-exp4-time", res, monkeypatch), "GPU")
    assert "gemm_bench` 결과가 없어" in no_gemm or "gemm_bench</code> 결과가 없어" in no_gemm
    assert "GEMM peak" not in tab(run_cell(md, "ch6-02-exp4-time", res, monkeypatch), "CPU")
    synthetic_gemm(res, f, peak_tflops=0.5, sweep=[])
    html = run_cell(md, "ch6-02-exp4-time", res, monkeypatch)
    none = next(m for m in gpu_file.measurements["modes"] if m["mode"] == "none")
    useful = none["flops"]["fwd_bwd"] / (none["fwd_bwd_ms_median"] * 1e-3) / 1e12
    assert f"{useful:.3g} ({useful / 0.5:.0%})" in tab(html, "GPU")
    assert "GEMM peak 대비" not in tab(html, "CPU") and "bf16 GEMM peak: 0.5 TFLOP/s" in tab(html, "GPU")


def test_a_cpu_or_float32_gemm_file_is_never_the_peak(tmp_path, monkeypatch):
    """scripts/runs.py runs gemm_bench on CPU too, in float32. With such a file beside the CPU checkpoint_bench
    file, the CPU tab must not divide the bf16 stack's TFLOP/s by it; a GPU gemm_bench file measured in float32
    must not be used either."""
    import json

    from tests.page_cells import results_dir, run_cell, synthetic_gemm, tab

    md = "ch6-activation-memory/02-gradient-checkpointing.md"
    res = results_dir(tmp_path, ["checkpoint_bench"])
    cpu = next((res / "checkpoint_bench").glob("cpu-*.json"))
    g = synthetic_gemm(res, cpu, peak_tflops=0.08, sweep=[])
    d = json.loads(g.read_text())
    d["params"]["dtype"] = d["measurements"]["peak"]["dtype"] = "float32"
    g.write_text(json.dumps(d))
    html = run_cell(md, "ch6-02-exp4-time", res, monkeypatch)
    assert "GEMM peak" not in tab(html, "CPU") and "%)" not in tab(html, "CPU")
    gpu = next((res / "checkpoint_bench").glob("gpu-*.json"))
    g = synthetic_gemm(res, gpu, peak_tflops=0.5, sweep=[])
    d = json.loads(g.read_text())
    d["params"]["dtype"] = d["measurements"]["peak"]["dtype"] = "float32"
    g.write_text(json.dumps(d))
    body = tab(run_cell(md, "ch6-02-exp4-time", res, monkeypatch), "GPU")
    assert "bf16 `gemm_bench` 결과가 없어" in body or "bf16 <code>gemm_bench</code> 결과가 없어" in body

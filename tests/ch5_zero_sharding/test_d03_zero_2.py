"""Ch5-03 ZeRO-2 — Gradient Sharding 추가: each test asserts a claim the page makes."""
import os

import pytest

from snippets import results
from snippets.ch5_zero_sharding import d02_zero_1 as zero1
from snippets.ch5_zero_sharding import d03_zero_2 as page
from snippets.common import zero_memory as zm
from tests.page_cells import results_dir, run_cell, tab

MD = "ch5-zero-sharding/03-zero-2.md"


def cpu():
    return results.load("zero_bench", kind="cpu")


def test_70b_16_numbers_and_saving_formula():
    """Corollary 5.3.3 (ERRATA 13): 201.25 GB, 131.25 GB less than ZeRO-1 = 2ψ(N−1)/N."""
    rows = {(r["psi"], r["N"]): r for r in page.predict_rows()}
    r = rows[(70e9, 16)]
    assert r["stage1_GB"] == pytest.approx(332.5) and r["stage2_GB"] == pytest.approx(201.25)
    assert r["grads_GB"] == pytest.approx(8.75) and r["optimizer_GB"] == pytest.approx(52.5)
    assert r["saved_GB"] == pytest.approx(131.25) == r["saved_formula_GB"]
    for r in rows.values():
        assert r["saved_GB"] == pytest.approx(r["saved_formula_GB"])
        assert r["ratio_vs_dp"] < 8
    assert rows[(70e9, 1024)]["ratio_vs_dp"] > 7.9


def test_exercise1_numbers_from_measured_stage2_bytes():
    """Exercise 1, from the committed DeepSpeed stage-2 bytes (zero_bench, N = 1, 2, 4) rather than the formula: fit
    bytes per parameter as a + b/N, scale to 70B at N = 16 (the right answer, the shared formula), then count the gradient
    partition with torch's float32 element size instead of the measured 16-bit one: 17.5 GB, a total of 210 GB and
    122.5 GB below ZeRO-1. The other reading of 17.5 (2ψ/N at N = 8) does not give 52.5 or 210."""
    import torch

    rows = zero1.memory_rows(2, cpu())
    a = {r["params"] / r["psi"] for r in rows}                         # replicated bytes per parameter
    b = {(r["grads_rest"] + r["optimizer"]) * r["N"] / r["psi"] for r in rows if r["N"] > 1}
    g = {r["grads_rest"] * r["N"] / r["psi"] for r in rows if r["N"] > 1}
    assert len(a) == len(b) == len(g) == 1
    (a,), (b,), (g,) = a, b, g
    psi, n = 70e9, 16
    right = (a * psi + b * psi / n) / zm.GB
    assert right == pytest.approx(zm.zero_memory_bytes(psi, n, 2) / zm.GB)
    fp32 = torch.empty((), dtype=torch.float32).element_size() / torch.empty((), dtype=torch.bfloat16).element_size()
    grads32 = g * fp32 * psi / n / zm.GB
    claimed = right + (g * fp32 - g) * psi / n / zm.GB
    zero1_total = (a * psi + g * psi + (b - g) * psi / n) / zm.GB  # ZeRO-1 keeps full 16-bit gradients
    assert grads32 == pytest.approx(17.5) and claimed == pytest.approx(210)
    assert zero1_total - claimed == pytest.approx(122.5)
    assert right == pytest.approx(201.25) and zero1_total - right == pytest.approx(131.25)  # the page's right answer
    alt = zm.zero_memory_breakdown(psi, 8, 2)
    assert alt["grads"] / zm.GB == pytest.approx(17.5) and alt["optimizer"] / zm.GB != pytest.approx(52.5)
    assert sum(alt.values()) / zm.GB != pytest.approx(210)


def test_measured_stage2_bytes_exact():
    """Experiment 2: params 2ψ, gradient partition 2ψ/N, optimizer Kψ/N — every rank, N = 1, 2, 4."""
    rows = zero1.memory_rows(2, cpu())
    assert len(rows) == 7
    for r in rows:
        assert r["params"] == r["params_pred"] == 2 * r["psi"]
        assert r["optimizer"] == r["optimizer_pred"] == 12 * r["psi"] // r["N"]
        assert r["grads_rest"] == r["grads_rest_pred"] == r["grads_formula"] == 2 * r["psi"] // r["N"]


def test_gradient_peak_within_bounds_and_stage2_below_stage1():
    """Experiment 3 / Lemma 5.3.4: stage-2 peak within [2ψ/N, 2ψ/N + bucket + one parameter]; stage 1 ≥ 2ψ."""
    rows = page.peak_rows(cpu())
    for r in rows:
        assert r["low"] <= r["peak"] <= r["high"]
    for n in (2, 4):
        s1 = max(r["peak"] for r in rows if r["N"] == n and r["stage"] == 1)
        s2 = max(r["peak"] for r in rows if r["N"] == n and r["stage"] == 2)
        assert s2 < s1


def test_trace_decomposition_n2():
    """Experiment 3: at N = 2 the stage-2 peak is partition + one bucket + one bias gradient, exactly."""
    run = next(r for r in cpu() if r.hardware["world_size"] == 2)
    rec = zero1.record(run, 2)
    h = run.params["dim"]
    for r in rec["per_rank_bytes_all"]:
        assert r["grads"] == 2 * rec["psi"] // 2 + 2 * (h * h + h) + 2 * h
        assert r["grad_trace"][-1][1] == "end of backward" and r["grad_trace"][-1][2] == rec["psi"]
    assert "<svg" in page.trace_figure(cpu(), 2, 0)
    split = page.peak_split(cpu())
    assert len(split) == 2 and "같음" in split[0]  # N = 2 decomposition matches; N = 4 line present


def test_n4_excess_equals_bias_plus_boundary_piece():
    """Experiment 3 (N = 4): peak − partition − bucket = one bias + the part of layer 1's weight past rank 0's boundary."""
    run = next(r for r in cpu() if r.hardware["world_size"] == 4)
    rec, h = zero1.record(run, 2), run.params["dim"]
    bucket = 2 * (h * h + h)
    extra = max(r["grads"] - rec["psi"] // 2 - bucket for r in rec["per_rank_bytes_all"])
    assert extra == 2 * h + 2 * (rec["psi"] // 4 - (h * h + h))
    assert extra < 2 * h * h


def test_stage2_collectives_equal_stage1():
    """Experiment 4: same calls and bytes as ZeRO-1; 1.5× by default, 1.0× on the reduce path."""
    for a, b in zip(zero1.comm_rows(1, cpu()), zero1.comm_rows(2, cpu())):
        assert (a["N"], a["variant"], a["data"], a["control"]) == (b["N"], b["variant"], b["data"], b["control"])
        if b["N"] > 1:
            assert b["ratio"] == pytest.approx(1.5 if b["variant"].startswith("default") else 1.0)
    for run in cpu():
        n = run.hardware["world_size"]
        rec = zero1.record(run, 2)
        assert rec["comm_by_phase"]["backward"]["all_reduce"]["calls"] == run.params["layers"]


@pytest.mark.dist
def test_tiny_preset_stage2(run_tiny):
    """A real DeepSpeed ZeRO-2 launch (tiny preset, 2 processes): partition bytes and bounds hold."""
    data, took = run_tiny("zero_bench", nproc=2, extra=["--stages", "2"], timeout=300)
    (rec,) = data["measurements"]
    psi, n, h = rec["psi"], 2, data["params"]["dim"]
    assert rec["stage"] == 2 and rec["world_size"] == n
    for r in rec["per_rank_bytes_all"]:
        assert r["params"] == 2 * psi and r["optimizer"] == 12 * psi // n
        assert r["grads_end_of_backward"] == 2 * psi // n
        lo, hi = page.grad_peak_bounds(psi, n, h * h + h, h * h, 2)
        assert lo <= r["grads"] <= hi
    assert rec["comm_by_phase"]["backward"]["all_reduce"]["bytes"] == 2 * psi
    if os.getloadavg()[0] <= (os.cpu_count() or 1):
        assert took < 30


def test_one_gpu_tab_names_the_missing_world_sizes(tmp_path, monkeypatch):
    """A reader with one GPU commits only the N = 1 file: the bounds cell and the trace figure must not assume
    N = 2 or 4 there, and must say which N are missing; the CPU tab keeps its N = 2 decomposition."""
    res = results_dir(tmp_path, ["zero_bench"], keep={"zero_bench": lambda name: "1x1" in name})
    html = run_cell(MD, "ch5-03-exp3-bounds", res, monkeypatch)
    gpu, cpu_tab = tab(html, "GPU"), tab(html, "CPU")
    assert "N = 2, 4 측정이 없습니다" in gpu and "peak 분해" not in gpu
    assert "peak 분해" in cpu_tab and "측정이 없습니다" not in cpu_tab
    one = results.read(res / "zero_bench" / "gpu-nccl-1x1-nvidia-h200.json")
    lo, hi = page.grad_peak_bounds(zero1.record(one, 2)["psi"], 1, one.params["dim"] ** 2 + one.params["dim"],
                                   one.params["dim"] ** 2, 2)
    assert f"{hi:,}" in gpu  # the bound is computed from the GPU file's own model
    assert "<svg" in tab(run_cell(MD, "ch5-03-exp3-figure", res, monkeypatch), "GPU")

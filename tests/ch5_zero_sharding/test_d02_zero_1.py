"""Ch5-02 ZeRO-1 — Optimizer State Sharding: each test asserts a claim the page makes."""
import os
import re
from pathlib import Path

import pytest

from snippets import results
from snippets.ch5_zero_sharding import d02_zero_1 as page
from snippets.common import zero_memory as zm
from tests.page_cells import edit, results_dir, run_cell, tab

ROOT = Path(__file__).resolve().parents[2]
MD = "ch5-zero-sharding/02-zero-1.md"


def cpu():
    """The committed CPU files: the claims below are the ones the page reads in its CPU tab."""
    return results.load("zero_bench", kind="cpu")


def test_theorem_sharded_adam_is_bitwise_dp_adam():
    """Theorem 5.2.4 / experiment 1: ZeRO-1's update equals DP's, and each rank keeps 1/N of the state."""
    for psi, n in [(1000, 4), (1001, 3), (64, 1)]:
        out = page.zero1_vs_dp(psi=psi, n=n)
        assert out["bitwise_equal"] and out["max_abs_diff"] == 0.0
        assert out["state_elems_dp"] == 2 * psi
        assert sum(out["state_elems_per_rank"]) == 2 * psi
        assert max(out["state_elems_per_rank"]) == 2 * -(-psi // n)


def test_prediction_table_70b_and_limits():
    """Experiment 2: 332.5 GB at 70B/16, breakdown 140 + 140 + 52.5, ratio → 4 as N grows."""
    rows = {(r["psi"], r["N"]): r for r in page.predict_rows()}
    r = rows[(70e9, 16)]
    assert r["stage0_GB"] == pytest.approx(1120) and r["stage1_GB"] == pytest.approx(332.5)
    assert (r["params_GB"], r["grads_GB"], r["optimizer_GB"]) == pytest.approx((140, 140, 52.5))
    assert r["saved_GB"] == pytest.approx(787.5)
    assert rows[(7e9, 8)]["stage1_GB"] == pytest.approx(38.5)
    ratios = [rows[(70e9, n)]["ratio"] for n in (16, 1024)]
    assert ratios[0] < ratios[1] < 4 == rows[(70e9, 16)]["limit_ratio"]


def test_measured_bytes_match_formula_exactly():
    """Experiment 3: DeepSpeed's own tensors hold 2ψ·e params and Kψ/N optimizer bytes, padding 0."""
    rows = page.memory_rows(1, cpu())
    assert {r["N"] for r in rows} == {1, 2, 4}
    assert len(rows) == 1 + 2 + 4
    for r in rows:
        assert r["params"] == r["params_pred"] == zm.PARAM_BYTES * r["psi"]
        assert r["optimizer"] == r["optimizer_pred"] == zm.K_ADAM * r["psi"] / r["N"]
        assert r["padding"] == r["padding_pred"] == page.flat_padding(r["psi"], r["N"]) == 0
        assert r["grads_rest"] == r["grads_rest_pred"] == zm.GRAD_BYTES * r["psi"] / r["N"]
        assert r["grads_peak"] >= r["grads_formula"] == zm.GRAD_BYTES * r["psi"]  # full grads live in backward
        assert r["grads_peak"] <= r["grads_formula"] + r["grads_rest_pred"]  # excess ≤ the 2ψ'/N partition buffer
        assert r["step_counters"] == 4  # one fp32 `step` scalar for the one flat fp32 partition


def test_collective_bytes_against_2psi():
    """Experiment 4: default = all_reduce + all_gather, 1.5× the paper's 2ψ; reduce path = 1.0×."""
    rows = page.comm_rows(1, cpu())
    for r in rows:
        assert r["S_total"] == (2 if r["N"] > 1 else 1) * r["psi_e"]
        assert r["control"] == {"all_reduce": {"calls": 2, "bytes": 5}}
        if r["N"] == 1:
            assert r["ring_sent"] == 0
            continue
        if r["variant"].startswith("default"):
            assert set(r["data"]) == {"all_reduce", "all_gather_into_tensor"}
            assert r["ratio"] == pytest.approx(1.5)
        else:
            assert set(r["data"]) == {"reduce", "all_gather_into_tensor"}
            assert r["ratio"] == pytest.approx(1.0)
        assert r["data"]["all_gather_into_tensor"] == {"calls": 1, "bytes": r["psi_e"]}


def test_deepspeed_default_is_multi_rank_allreduce():
    """The page says DeepSpeed 0.19.8 defaults use_multi_rank_bucket_allreduce to True (config.py)."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    cfg = Path(spec.origin).parent / "runtime" / "zero" / "config.py"
    assert re.search(r"use_multi_rank_bucket_allreduce: bool = True", cfg.read_text())
    src = (Path(spec.origin).parent / "runtime" / "zero" / "stage_1_and_2.py").read_text()
    assert "self.nccl_start_alignment_factor = 2" in src


# Definition 5.2.3's padding rule is tested by a real N = 3 run that pads (ZeRO-1 and ZeRO-3):
# tests/ch5_zero_sharding/test_d04_zero_3.py::test_padding_rule_real_n3_run.


@pytest.mark.dist
def test_tiny_preset_stage1(run_tiny):
    """A real DeepSpeed ZeRO-1 launch (tiny preset, 2 processes): the same equalities hold."""
    data, took = run_tiny("zero_bench", nproc=2, extra=["--stages", "1"], timeout=300)
    (rec,) = data["measurements"]
    psi, n = rec["psi"], 2
    assert rec["stage"] == 1 and rec["world_size"] == n and data["hardware"]["backend"] == "gloo"
    assert psi == 2 * (64 * 64 + 64)
    for r in rec["per_rank_bytes_all"]:
        assert r["params"] == 2 * psi and r["optimizer"] == 12 * psi // n
        assert r["grads_end_of_backward"] == 2 * psi // n and r["grads"] >= 2 * psi
    assert rec["comm_by_phase"]["backward"]["all_reduce"]["bytes"] == 2 * psi
    assert rec["comm"]["all_gather_into_tensor"] == {"calls": 1, "bytes": 2 * psi}
    if os.getloadavg()[0] <= (os.cpu_count() or 1):  # the 30 s budget assumes an idle machine
        assert took < 30


def test_gpu_tab_checks_the_gpu_files_own_bytes(tmp_path, monkeypatch):
    """Experiment 3 per hardware: with a GPU file beside the CPU ones the cell shows a GPU tab whose verdict is
    computed from that file. One byte count of the N = 2 GPU fixture is moved off the rule: the GPU tab must say
    False, the CPU tab still True, and the GPU tab shows that file's number and its provenance."""
    res = results_dir(tmp_path, ["zero_bench"])
    f = res / "zero_bench" / "gpu-nccl-1x2-nvidia-h200.json"

    def off_by_two(d):
        rec = next(m for m in d["measurements"] if m["stage"] == 1)
        rec["per_rank_bytes_all"][0]["params"] += 2
    edit(f, off_by_two)
    html = run_cell(MD, "ch5-02-exp3-measured", res, monkeypatch)
    gpu, cpu_tab = tab(html, "GPU"), tab(html, "CPU")
    moved = next(m for m in results.read(f).measurements if m["stage"] == 1)["per_rank_bytes_all"][0]["params"]
    assert f"{moved:,}" in gpu and f"{moved:,}" not in cpu_tab
    assert "byte 단위로 같은가: <strong>False</strong>" in gpu and "byte 단위로 같은가: <strong>True</strong>" in cpu_tab
    assert "gpu-nccl-1x2-nvidia-h200.json" in gpu and "gpu-nccl" not in cpu_tab
    assert "+cu" in gpu.split("<table")[0]  # the model line names the CUDA build of torch the GPU file ran


def test_gpu_tab_comm_ratios_from_the_gpu_file(tmp_path, monkeypatch):
    """Experiment 4 per hardware: the ratio printed in the GPU tab is ring bytes / 2(N−1)/N·eψ of the GPU file,
    recomputed here from its JSON after doubling one all_gather's recorded size."""
    res = results_dir(tmp_path, ["zero_bench"])
    f = res / "zero_bench" / "gpu-nccl-1x2-nvidia-h200.json"

    def bigger(d):
        rec = next(m for m in d["measurements"] if m["stage"] == 1)
        rec["comm_by_phase"]["step"]["all_gather_into_tensor"]["bytes"] *= 2
    edit(f, bigger)
    rec = next(m for m in results.read(f).measurements if m["stage"] == 1)
    psi, n = rec["psi"], 2
    ph = rec["comm_by_phase"]
    sent = 2 * (n - 1) / n * ph["backward"]["all_reduce"]["bytes"] + (n - 1) / n * ph["step"]["all_gather_into_tensor"]["bytes"]
    want = sent / (2 * (n - 1) / n * 2 * psi)
    gpu = tab(run_cell(MD, "ch5-02-exp4-comm", res, monkeypatch), "GPU")
    assert f"{want:.2f}" == "2.00" and "→ 1.50, 2.00" in gpu  # N = 4 keeps 1.50; N = 2 now 2.00

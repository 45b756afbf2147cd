"""Ch7-04 Elastic Training: each test asserts a claim the page makes, against an independent computation."""
import math

import numpy as np
import pytest

from snippets import results
from snippets.ch7_3d_parallelism import d04_elastic_training as page


def _r():
    return results.load("elastic_resume", kind="cpu")


@pytest.mark.parametrize("r", _r(), ids=lambda r: r.path.name)
def test_kill_restart_resume_is_bitwise(r):
    """Experiment 1: one restart happened, the store sharing was off, and the stitched trajectory equals the
    uninterrupted one bit for bit (recomputed here from the two attempts' logs)."""
    m, p = r.measurements, r.params
    assert m["attempts"] == 2 and m["restart_count"] == 1 and m["share_store_disabled"]
    stitched = [v for s, v in m["attempt0"] if s < m["resumed_from_step"]] + [v for _, v in m["attempt1"]]
    assert stitched == m["resumed"] == m["uninterrupted"] and m["bitwise_equal"]
    assert len(m["uninterrupted"]) == p["steps"]
    # attempt 0 stopped right before the kill step: it never logged step k
    assert [s for s, _ in m["attempt0"]] == list(range(p["kill_step"]))


@pytest.mark.parametrize("r", _r(), ids=lambda r: r.path.name)
def test_what_is_lost(r):
    """Experiment 2 / Theorem 7.4.3: attempt 1's own log starts at c⌊k/c⌋, and the steps attempt 0 logged from there
    on (the lost ones) are c⌊k/c⌋..k−1 and were recomputed with identical values."""
    m, p = r.measurements, r.params
    k, c = p["kill_step"], p["every"]
    a0, a1 = dict(map(tuple, m["attempt0"])), dict(map(tuple, m["attempt1"]))
    assert min(a1) == c * (k // c) == m["resumed_from_step"]
    assert sorted(s for s in a0 if s >= min(a1)) == list(range(c * (k // c), k)) == m["lost_steps"]
    assert all(a0[s] == a1[s] for s in m["lost_steps"])


def test_exact_model_optimum_and_daly():
    """Theorem 7.4.5: the bisection optimum equals a grid search over the exact waste (rel 1e-4); Daly 2006's formula
    is within 0.1 % of it at the page's Δ (the first-order interval is not: 6 % short at Δ = 600 s); the Monte-Carlo
    simulation agrees with the exact waste within 2 % (relative) at every interval of the table."""
    M, R = page.mtbf_from_interruptions(54, 419), 600.0
    for delta in (5.0, 60.0, 600.0):
        grid = np.linspace(1.0, M, 400001)
        best = grid[np.argmin(page.exact_waste(grid, delta, M, R))]
        opt = page.exact_optimum(delta, M)
        assert opt == pytest.approx(best, rel=1e-4)
        assert page.daly_interval(delta, M) == pytest.approx(opt, rel=1e-3)
        for tau in (opt, opt / 4, 4 * opt, page.first_order_interval(delta, M)):
            assert page.simulate_waste(tau, delta, M, R) == pytest.approx(float(page.exact_waste(tau, delta, M, R)), rel=0.02)
    assert page.first_order_interval(600.0, M) < 0.95 * page.exact_optimum(600.0, M)


def test_first_order_interval_minimises_the_first_order_waste():
    """Theorem 7.4.4: √(2ΔM) − Δ minimises the first-order waste (grid search) with minimum √(2Δ/M) + R/M."""
    M, R = 3 * 3600.0, 300.0
    for delta in (5.0, 60.0, 600.0):
        grid = np.linspace(1, 6 * M, 400001)
        w = page.waste_fraction(grid, delta, M, R)
        assert grid[np.argmin(w)] == pytest.approx(page.first_order_interval(delta, M), rel=1e-3)
        assert w.min() == pytest.approx(math.sqrt(2 * delta / M) + R / M, rel=1e-6)


def test_waste_versus_scale_and_storage_bandwidth():
    """Experiment 6: with Δ ∝ 1/n (bandwidth growing with n) the exact minimum waste is the same at every n; with a
    fixed fabric it grows by 1.7–2.0× per 4× nodes (√4 = 2 to first order). Optima checked by grid search here."""
    M1 = 1000 * 3600.0
    grow = page.min_waste_vs_scale((256, 1024, 4096), M1, (256, 60.0), shared_fabric=False)
    fixed = page.min_waste_vs_scale((256, 1024, 4096), M1, (256, 60.0), shared_fabric=True)
    assert grow[0]["waste"] == pytest.approx(grow[1]["waste"], rel=1e-9) == pytest.approx(grow[2]["waste"], rel=1e-9)
    for a, b in zip(fixed, fixed[1:]):
        assert 1.7 < b["waste"] / a["waste"] < 2.0
    for x in grow + fixed:
        grid = np.linspace(1.0, x["mtbf"], 200001)
        assert x["waste"] == pytest.approx(float(page.exact_waste(grid, x["delta"], x["mtbf"]).min()), rel=1e-6)


def test_membership_changes_do_not_consume_max_restarts():
    """Experiment 5, on the installed agent loop: three membership restarts leave --max-restarts=1 untouched and the
    one failure uses it; two failures with one restart allowed end the job as FAILED."""
    mr = page.membership_restarts(["HEALTHY", "HEALTHY", "HEALTHY", "FAILED", "SUCCEEDED"], [1, 1, 1], max_restarts=1)
    assert mr == {"state": "SUCCEEDED", "restarts_left_after_each_restart": [1, 1, 1, 0], "remaining_restarts": 0}
    two = page.membership_restarts(["FAILED", "FAILED"], [], max_restarts=1)
    assert two["state"] == "FAILED" and two["restarts_left_after_each_restart"] == [0]


def test_gpu_tab_of_the_trajectory_reads_the_gpu_file(tmp_path, monkeypatch):
    """Experiments 1–2 per hardware: the GPU tab names its backend and GPUs and reads its own file's resumed step."""
    from tests.page_cells import edit, results_dir, run_cell, tab

    md = "ch7-3d-parallelism/04-elastic-training.md"
    res = results_dir(tmp_path, ["elastic_resume"])
    f = next((res / "elastic_resume").glob("gpu-*.json"))
    edit(f, lambda d: d["measurements"].update(resumed_from_step=99))
    traj = run_cell(md, "ch7-04-exp1-traj", res, monkeypatch)
    assert "GPUs, nccl" in tab(traj, "GPU") and "processes, gloo" in tab(traj, "CPU")
    lost = run_cell(md, "ch7-04-exp2-lost", res, monkeypatch)
    assert "(측정 99)" in tab(lost, "GPU") and "(측정 99)" not in tab(lost, "CPU")

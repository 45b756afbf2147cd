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
    """Experiment 2 / Theorem 7.4.3: resume at c⌊k/c⌋, lose k mod c steps, which attempt 1 recomputes identically."""
    m, p = r.measurements, r.params
    k, c = p["kill_step"], p["every"]
    assert m["resumed_from_step"] == c * (k // c)
    assert m["lost_steps"] == list(range(c * (k // c), k)) and len(m["lost_steps"]) == k % c
    a0, a1 = dict(map(tuple, m["attempt0"])), dict(map(tuple, m["attempt1"]))
    assert all(a0[s] == a1[s] for s in m["lost_steps"])


def test_young_daly_minimise_the_waste():
    """Theorem 7.4.4: Daly's τ* minimises the first-order waste (grid search), Young's is the δ ≪ τ limit, and the
    minimum is √(2δ/M) + R/M; the simulation agrees with the formula near τ* and also has its minimum there."""
    M, R = 3 * 3600.0, 300.0
    for delta in (5.0, 60.0, 600.0):
        grid = np.linspace(1, 6 * M, 400001)
        w = page.waste_fraction(grid, delta, M, R)
        assert grid[np.argmin(w)] == pytest.approx(page.daly_interval(delta, M), rel=1e-3)
        assert w.min() == pytest.approx(math.sqrt(2 * delta / M) + R / M, rel=1e-6)
        tau = page.daly_interval(delta, M)
        sim = [page.simulate_waste(t, delta, M, R) for t in (tau / 4, tau, 4 * tau)]
        assert sim[1] < min(sim[0], sim[2])
        # first order in (τ + δ)/M: close when the cycle is short against M, looser as it grows (page, experiment 4)
        rel = 0.1 if (tau + delta) / M < 0.15 else 0.2
        assert sim[1] == pytest.approx(float(page.waste_fraction(tau, delta, M, R)), rel=rel)
    assert page.daly_interval(1.0, 1e6) / page.young_interval(1.0, 1e6) == pytest.approx(1, rel=1e-3)


def test_llama3_mtbf():
    """Experiment 4's M: 54 days / 419 unexpected interruptions ≈ 3.09 hours."""
    assert page.mtbf_from_interruptions(54, 419) / 3600 == pytest.approx(54 * 24 / 419)


def test_sharded_delta_keeps_waste_constant():
    """Exercise 2: with M = M1/n and δ ∝ 1/n the minimum waste does not change with n; with δ fixed it grows as √n."""
    M1 = 1000 * 3600.0
    w = [float(page.waste_fraction(page.daly_interval(60 * 256 / n, M1 / n), 60 * 256 / n, M1 / n)) for n in (256, 1024, 4096)]
    assert w[0] == pytest.approx(w[1]) == pytest.approx(w[2])
    fixed = [math.sqrt(2 * 60 / (M1 / n)) for n in (256, 1024)]
    assert fixed[1] / fixed[0] == pytest.approx(2)


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

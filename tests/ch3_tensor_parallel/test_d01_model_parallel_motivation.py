"""Ch3-01 model-parallel motivation: each test asserts a claim the page makes."""
import itertools

import numpy as np
import pytest

from snippets.ch3_tensor_parallel import d01_model_parallel_motivation as page
from tests.ch3_tensor_parallel import as_world, cpu_runs, gpu_fixture, platform


def test_dp_memory_is_16psi_whatever_n():
    """Theorem 3.1.3: 16ψ per rank for every N; 70B is 1120 GB and does not fit 80 GB."""
    for r in page.dp_memory_rows():
        assert r["per_rank_bytes"] == pytest.approx((2 + 2 + 12) * r["psi"])  # counted by hand, not by zero_memory
        assert r["per_rank_same_for_N1"]
        assert r["fits"] == (16 * r["psi"] <= 80e9)
        assert (r["min_devices"] - 1) * 80e9 < 16 * r["psi"] <= r["min_devices"] * 80e9
    r70 = next(r for r in page.dp_memory_rows() if r["name"] == "70B")
    assert r70["per_rank_bytes"] == pytest.approx(1120e9) and not r70["fits"] and r70["min_devices"] == 14


def _busy_count(intervals, t):
    return sum(s <= t < e for iv in intervals for s, e, _ in iv)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8, 16, 64])
def test_equal_stages_idle_is_p_minus_1_over_p(p):
    """Theorem 3.1.4: equal stages, c = 0 → idle (p−1)/p everywhere, step = one device's time."""
    sim = page.naive_schedule(np.ones(p), 2 * np.ones(p))
    assert np.allclose(sim["idle_fraction"], (p - 1) / p)
    assert sim["step"] == pytest.approx(3 * p)


def test_at_most_one_stage_busy_random_stages():
    """Theorem 3.1.4: with arbitrary stage times and c, no two stages ever compute at once, and
    T = Σ(f+b) + 2(p−1)c. Checked by sampling time points against the intervals (independent of the formula)."""
    rng = np.random.default_rng(0)
    for p in (2, 3, 5, 9):
        f, b, c = rng.uniform(0.1, 2, p), rng.uniform(0.1, 4, p), float(rng.uniform(0, 1))
        sim = page.naive_schedule(f, b, c)
        assert sim["step"] == pytest.approx(f.sum() + b.sum() + 2 * (p - 1) * c)
        for t in np.linspace(0, sim["step"], 2001):
            assert _busy_count(sim["intervals"], t) <= 1
        ends = sorted(e for iv in sim["intervals"] for _, e, _ in iv)
        assert ends[-1] == pytest.approx(sim["step"])


def test_boundary_bytes_formula():
    """Theorem 3.1.5: one boundary = b·s·h·e bytes; per step 2(p−1) of them; no ψ in it."""
    torch = pytest.importorskip("torch")
    for b, s, h in itertools.product((1, 2), (16, 2048), (64, 12288)):
        act = torch.empty(b, s, h, dtype=torch.bfloat16)
        assert page.boundary_bytes(b, s, h, 2) == act.numel() * act.element_size()
    assert page.naive_step_p2p_bytes(8, 1, 2048, 12288) == 14 * 2048 * 12288 * 2


def test_measured_bytes_match_formula():
    """Experiment 4: each rank sends once and receives once exactly one activation (rows·width·4)."""
    for run in page.naive_runs():
        for x in page.measured_naive(run)["ranks"]:
            assert x["sends"] == 1 and x["sent"] == x["recv"] == x["formula"]


def test_measured_split_equals_single_process_and_stages_do_not_overlap():
    """Experiment 3: gradients equal the one-process reference; the two ranks' busy times add up to at
    most the step time (they never compute at the same time)."""
    runs = page.naive_runs()
    assert runs, "no committed tp_bench result with the naive split"
    timed = 0
    for run in runs:
        m = page.measured_naive(run)
        for x in m["ranks"]:
            assert x["grad_diff"] <= 1e-6
        if "timelines" in m:
            timed += 1
            assert m["busy_sum_over_step"] <= 1.0
            for tl in m["timelines"]:
                kinds = [k for k, _, _ in tl]
                assert kinds == ["F", "B"]
    assert timed >= 1


def test_timeline_figure_draws_every_interval():
    """The figure draws one bar per (stage, pass): 2p bars for the simulation."""
    svg = page.timeline_figure(page.naive_schedule(np.ones(3), 2 * np.ones(3)))
    assert svg.count("<path") >= 6 and "stage 2" in svg


def test_figures_fit_the_cell_budget():
    """GUIDE: a build-time cell runs in under 1 s (CPU time of this thread, scaled by the machine's speed)."""
    import time

    from tests.conftest import cell_budget

    run = page.naive_runs()[0]
    t0 = time.thread_time()
    svg = page.timeline_figure(page.naive_schedule(np.ones(2), 2 * np.ones(2)), page.measured_naive(run)["timelines"])
    assert "<svg" in svg and time.thread_time() - t0 < cell_budget()


def test_gpu_tab_reads_the_gpu_file():
    """Experiments 3-4's GPU tab: its bytes are the GPU file's counted send/recv, its timeline panel names the GPU,
    and the busy/step ratio is recomputed from the file's per-rank medians."""
    run = gpu_fixture("tp_bench")
    plat = platform(run)
    assert page.naive_run(plat) is run
    ranks = run.data["measurements"]["naive_split"]
    text = page.bytes_tab(plat)
    for n in ranks:
        assert f"| {n['comm']['send']['calls']} | {n['comm']['send']['bytes']} | {n['comm']['recv']['bytes']} |" in text
    m = page.measured_naive(run)
    assert m["busy_sum_over_step"] == pytest.approx(sum(n["busy_s_median"] for n in ranks) /
                                                    max(n["step_s_median"] for n in ranks))
    svg = page.timeline_figure(page.naive_schedule(np.ones(2), 2 * np.ones(2)), m["timelines"], "GPU (NVIDIA H200), NCCL")
    assert "측정 (GPU (NVIDIA H200), NCCL)" in svg


def test_a_hardware_without_the_naive_split_keeps_its_tab_and_says_so():
    """A GPU platform measured at t = 4 (or 8) only has no naive split: tab_runs keeps its files so its tab exists,
    and the tab says N = 2 is missing instead of failing."""
    four = gpu_fixture("tp_bench", 4)
    plat = platform(four)
    assert page.naive_run(plat) is None
    assert "N = 2 측정이 없습니다" in page.no_naive(plat) and "N = 2 측정이 없습니다" in page.bytes_tab(plat)
    eight = platform(as_world(four, 8))
    assert "world size 8 GPUs" in page.bytes_tab(eight)



def test_tab_runs_keeps_a_tab_for_every_hardware(monkeypatch):
    """tab_runs over CPU 2·4 + an H200 node at 2 and 4 GPUs + another GPU at 8 only: the H200 tab shows only its
    naive-split file (t = 2), the 8-GPU hardware keeps its one file (so its tab exists and says N = 2 is missing),
    and no hardware is dropped."""
    from snippets import results
    from tests.ch3_tensor_parallel import relabelled

    cpu = cpu_runs(results.experiment("tp_bench"))
    h2, h4 = gpu_fixture("tp_bench"), gpu_fixture("tp_bench", 4)
    other8 = relabelled(as_world(h4, 8), "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(results, "experiment", lambda prog: cpu + [h2, h4, other8])
    got = page.tab_runs()
    want_cpu = [r for r in cpu if r.hardware["world_size"] == 2]  # the CPU naive split runs at 2 processes
    assert sorted(map(str, (r.path for r in got))) == sorted(map(str, [r.path for r in want_cpu] + [h2.path, other8.path]))
    assert len(results.platforms(got)) == 3

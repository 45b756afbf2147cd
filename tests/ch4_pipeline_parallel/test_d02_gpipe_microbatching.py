"""Ch4-02 GPipe: each test asserts a claim the page makes against an independent computation."""
import numpy as np
import pytest

from snippets.ch4_pipeline_parallel import d02_gpipe_microbatching as page
from snippets.common import pipeline_sim as ps


def test_theorem_423_start_times_and_bubbles():
    """Experiment 1: every simulated start time equals the closed form; both bubbles equal both formulas."""
    for p in (1, 2, 3, 4, 8):
        for m in (1, 2, 5, 8, 32):
            for tf, tb in [(1.0, 2.0), (0.7, 1.1)]:
                assert page.closed_form_check(p, m, tf, tb) == pytest.approx(0, abs=1e-9)
            tl = ps.simulate("gpipe", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
            assert tl.makespan == pytest.approx((m + p - 1) * 3)
    for row in page.grid_rows():
        assert row[2] == row[3] and row[4] == row[5]


def test_lemma_424_bound_is_tight_for_uniform_times():
    for p, m in [(2, 8), (4, 4), (8, 3)]:
        tl = ps.simulate("gpipe", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
        assert page.path_lower_bound(ps.timeline_rows(tl)) == pytest.approx(tl.makespan)
        one = ps.simulate("1f1b", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
        assert page.path_lower_bound(ps.timeline_rows(one)) == pytest.approx(one.makespan)


def test_lemma_424_holds_for_random_durations():
    """The bound holds whatever the durations: random per-stage costs in the simulator."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        p, m = int(rng.integers(2, 6)), int(rng.integers(1, 9))
        tl = ps.simulate("gpipe", p, m, stage_cost=rng.uniform(0.2, 2.0, p), t_comm=float(rng.uniform(0, 0.3)))
        assert page.path_lower_bound(ps.timeline_rows(tl)) <= tl.makespan + 1e-9


def _run():
    return page.bench()


def test_measured_runs_follow_the_gpipe_order_and_the_bound():
    """Experiment 2: what ran is Definition 4.2.1's order; makespan ≥ the path bound; loss and grads match."""
    run = _run()
    sweep = [e["m"] for e in page.entries(run, "gpipe", "sleep")]
    assert sweep == sorted(set(run.params["m_sweep"]) | {run.params["m_all"]})
    for v in ("sleep", "real"):
        for e in page.entries(run, "gpipe", v):
            rows = ps.measured_rows(e)
            for r, acts in enumerate(rows):
                want = [(o, i) for o, i, _ in ps.rank_order("gpipe", r, len(rows), e["m"])]
                assert [(a["op"], a["mb"]) for a in acts] == want
            b = ps.measured_bubbles(rows)
            assert page.path_lower_bound(rows) <= b["makespan"] + 1e-4
            assert e["grad_max_err"] < 1e-6 and e["loss"] == pytest.approx(e["ref_loss"], rel=1e-6)


def test_measured_bubble_falls_with_m_and_is_read_against_its_own_formula():
    run = _run()
    es = page.entries(run, "gpipe", "sleep")
    b = {e["m"]: ps.measured_bubbles(ps.measured_rows(e)) for e in es}
    assert b[max(b)]["fraction"] < b[1]["fraction"] / 2  # the page's "측정은 m 이 커질수록 줄어든다" at the ends
    p = run.params["p"]
    for m, x in b.items():  # a measured bubble is at least half its formula (sleeps only lengthen ops; comm adds)
        assert x["fraction"] >= 0.5 * ps.gpipe_bubble_fraction(p, m)
    rows = page.sweep_rows(run)
    assert [r[0] for r in rows] == sorted(b)


def test_theorem_425b_live_microbatches_equal_m():
    """Experiment 3: counted from saved tensors, every rank holds exactly m micro-batches; rank 0's bytes are m×."""
    run = _run()
    for v in ("sleep", "real"):
        for e in page.entries(run, "gpipe", v):
            assert e["peak_live_microbatches"] == [e["m"]] * 2
            assert list(ps.simulate("gpipe", 2, e["m"]).inflight()) == [e["m"]] * 2
            assert e["peak_saved_bytes"][0] == e["m"] * e["per_mb_saved_bytes"][0]
            assert e["peak_saved_bytes"][1] == pytest.approx(1.25 * e["m"] * e["per_mb_saved_bytes"][1])


def test_corollary_426_rule_of_thumb():
    for row in page.rule_of_thumb_rows():
        p = row[0]
        assert float(row[2].rstrip("%")) < 20 and float(row[4].rstrip("%")) < 25
        assert row[6] == 5 * (p - 1) + 1  # smallest m with (p−1)/m < 1/5


def test_problem_1_numbers():
    assert round(100 * float(ps.gpipe_bubble_fraction(8, 32)), 1) == 17.9
    assert round(100 * float(ps.gpipe_bubble_fraction(8, 64)), 1) == 9.9
    assert round(100 * float(ps.gpipe_bubble_relative(8, 32)), 1) == 21.9
    assert round(100 * float(ps.gpipe_bubble_relative(8, 64)), 1) == 10.9


def test_problem_2_best_m():
    p, batch, a, c = 8, 256, 1.0, 0.1
    ms = np.arange(1, 257)
    t = page.step_time(p, ms, batch, a, c)
    assert abs(ms[t.argmin()] - page.best_m(p, batch, a, c)) < 1  # the real minimiser is next to the integer one
    divisors = np.array([d for d in range(1, 257) if 256 % d == 0])
    assert divisors[page.step_time(p, divisors, batch, a, c).argmin()] == 16
    # the closed form matches the simulator (stage time a + c·B/m split as forward:backward = 1:2)
    for m in (4, 16):
        per = a + c * batch / m
        tl = ps.simulate("gpipe", p, m, t_f=per / 3, t_b=2 * per / 3, t_w=0.0)
        assert tl.makespan == pytest.approx(float(page.step_time(p, m, batch, a, c)))


def test_problem_3_remat_efficiency_bound():
    p, m, tf, tb = 4, 16, 1.0, 2.0
    remat = ps.simulate("gpipe", p, m, t_f=tf, t_b=tf + tb, t_w=0.0)
    assert m * (tf + tb) / (m * (2 * tf + tb)) == pytest.approx(0.75)
    assert m * (tf + tb) / remat.makespan < 0.75


def test_experiment_4_same_order_different_lengths():
    run = _run()
    rows = page.spread_rows(run, 8)
    assert [r[0] for r in rows] == ["sleep", "real"]
    assert all(float(r[2]) >= 1.0 and float(r[4]) >= 1.0 for r in rows)
    svg = page.gantt_panels(run, 8)
    assert svg.count("rank 1") == 3


def test_figure_cells_fit_the_cell_budget():
    import time

    from tests.conftest import cell_budget

    run = _run()
    for f in (lambda: page.gantt_panels(run, 8), lambda: page.sweep_figure(run)):
        t0 = time.thread_time()
        f()
        assert time.thread_time() - t0 < cell_budget()

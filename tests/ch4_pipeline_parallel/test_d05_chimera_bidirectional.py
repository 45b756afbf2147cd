"""Ch4-05 Chimera / zero bubble: each test asserts a claim the page makes against an independent computation."""
import time

import numpy as np
import pytest

from snippets.ch4_pipeline_parallel import d05_chimera_bidirectional as page
from snippets.common import pipeline_sim as ps
from tests.conftest import cell_budget


def test_theorem_454_zb_h1_bound_achieved_and_formula():
    for p in range(2, 9):
        for m in (p, 2 * p, 4 * p, 8 * p):
            for tf, tb, tw in [(1, 1, 1), (1, 1.5, 0.5), (1, 2, 1)]:
                z = ps.simulate("zb_h1", p, m, t_f=tf, t_b=tb, t_w=tw)
                assert z.makespan == pytest.approx(page.zb_h1_path_bound(p, m, tf, tb, tw))
                assert z.bubble_relative() == pytest.approx(float(ps.zb_h1_bubble_relative(p, m, tf, tb, tw)))
                assert list(z.inflight("B")) == [min(p - r, m) for r in range(p)]
            assert ps.simulate("zb_h1", p, m).bubble_relative() == pytest.approx(
                ps.simulate("1f1b", p, m).bubble_relative() / 3)


def test_zb_h1_order_is_torchs_rule_for_one_chunk():
    """Definition 4.5.1 = torch's _get_1f1b_rank_ops with enable_zero_bubble and num_1f1b_microbatches = rank."""
    from torch.distributed.pipelining.schedules import _Action, _get_1f1b_rank_ops

    for p, m in [(2, 8), (4, 8), (4, 12)]:
        for r in range(p):
            w = min(p - 1 - r, m)
            ops = _get_1f1b_rank_ops(1, p, w, m - w, w, r, lambda s: r, lambda s: r, num_1f1b_microbatches=r,
                                     enable_zero_bubble=True)
            kind = {"FORWARD": "F", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W"}
            theirs = [(kind[a.computation_type.name], a.microbatch_index) for a in ops if isinstance(a, _Action)]
            assert theirs == [(o, i) for o, i, _ in ps.rank_order("zb_h1", r, p, m)]


def test_problem_2_gain_is_two_p_minus_one_tw():
    p, m = 8, 32
    for tw in (1.0, 0.5, 0.1, 0.0):
        z = ps.simulate("zb_h1", p, m, t_f=1.0, t_b=1.0, t_w=tw)
        o = ps.simulate("1f1b", p, m, t_f=1.0, t_b=1.0, t_w=tw)
        assert o.makespan - z.makespan == pytest.approx(2 * (p - 1) * tw)


def test_zbv_half_of_zb_h1_memory_and_comm():
    for row in page.zbv_rows():
        p = row[0]
        assert float(row[2]) == pytest.approx(float(row[3]) / 2, abs=1e-4)
        assert row[5] == " ".join([str(2 * p)] * p) and float(row[7]) == p
        assert row[6] == " ".join([str(p)] * p)  # ZB-H1 counted until W: every rank p (page, experiment 1)
        assert row[8] == 2 * (p - 1) == 2 * row[9]


def test_measured_zero_bubble_runs():
    run = page.bench()
    m = run.params["m_all"]
    for v in ("sleep", "real"):
        for sched in ("interleaved_zb", "zbv", "dualpipev"):
            e = page.entry(run, sched, v, m)
            assert e["grad_max_err"] < 1e-6 and e["loss"] == pytest.approx(e["ref_loss"], rel=1e-6)
        zbv = page.entry(run, "zbv", v, m)
        assert zbv["stages_per_rank"] == [[0, 3], [1, 2]]
        rows = ps.measured_rows(zbv)
        for r, acts in enumerate(rows):  # what ran is the simulator's (and torch's table's) ZBV order
            want = [(o, i, ps.stage_of("zbv", r, c, 2, 2)) for o, i, c in ps.rank_order("zbv", r, 2, m)]
            assert [(a["op"], a["mb"], a["stage"]) for a in acts] == want
    rows = {r[1]: r for r in page.measured_rows(run) if r[0] == "sleep"}
    assert rows["ScheduleZBVZeroBubble"][6] == f"I {4 * m}, W {4 * m}"
    dp = dict(x.split() for x in rows["ScheduleDualPipeV"][6].split(", "))
    assert int(dp["B"]) > int(dp["I"]) > 0  # DualPipeV splits only some backwards
    # stage 0 has no input gradient: its input-grad calls are (near) empty and the weight-grad call does the work
    split = {r[0]: (float(r[1]), float(r[2])) for r in page.first_stage_split(run)}
    assert split[0][0] < 0.2 * split[0][1]
    assert split[1][0] > 0.3 * split[1][1]


def test_theorem_455_and_experiment_4_chimera():
    for p, m in [(2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (6, 12)]:
        for bwd in (1.0, 2.0):
            c = ps.simulate("chimera", p, m, t_f=1.0, t_b=bwd, t_w=0.0)
            assert len(c.start) == 2 * m * p  # every micro-batch passes F and B on every stage
            inf = c.inflight()
            assert inf.max() <= p + 1  # Theorem 4.5.5
            assert list(inf) == list(inf[::-1])  # balanced: rank r and p-1-r hold the same
            if m == p:  # between p/2 + 1 and p (the page's remark)
                assert inf.min() == p // 2 + 1 and inf.max() == p
    # T_B = T_F: on the page's finite grid the list schedule meets the quoted formula exactly when p divides m,
    # and stays above it otherwise (what the page says)
    for p in (2, 4, 6, 8, 16):
        for m in range(2, 33, 2):
            c = ps.simulate("chimera", p, m, t_f=1.0, t_b=1.0, t_w=0.0)
            if m % p == 0:
                assert c.makespan == pytest.approx(2 * m + p - 2)
                assert c.bubble_fraction() == pytest.approx((p - 2) / (2 * m + p - 2))
            else:
                assert c.makespan > 2 * m + p - 2
    rows = page.chimera_rows()
    for r in rows:
        bwd, p, m = float(r[0]), r[1], r[2]
        assert float(r[3]) < float(r[5]) or p == 2 and float(r[3]) == 0.0 < float(r[5])  # below 1F1B
        if p == 2:
            assert r[3] == "0.000"  # p = 2: no bubble
        elif bwd == 1.0:
            assert r[3] == r[4]  # the formula's value
        else:
            assert float(r[3]) > float(r[4])  # backward = 2 T_F: above the formula (the page says so)


def test_problem_1_numbers():
    assert ps.simulate("zb_h1", 8, 32).bubble_relative() == pytest.approx(7 / 96)
    assert ps.simulate("1f1b", 8, 32).bubble_relative() == pytest.approx(7 / 32)


def test_figures_fit_the_cell_budget():
    run = page.bench()
    for f in (page.zb_gantt, lambda: page.measured_gantt(run), page.chimera_gantt):
        t0 = time.thread_time()
        f()
        assert time.thread_time() - t0 < cell_budget()

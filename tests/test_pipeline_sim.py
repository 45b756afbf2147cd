"""The shared pipeline simulator (snippets/common/pipeline_sim.py) against closed forms and torch's own tables."""
from __future__ import annotations

import time

import numpy as np
import pytest

from snippets.common import pipeline_sim as ps
from tests.conftest import slowdown

GRID = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 4, 8, 16, 32) if m >= 1]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_bubble_both_definitions(schedule):
    for p, m in GRID:
        for tf, tb in [(1.0, 1.0), (1.0, 2.0), (0.3, 0.7)]:
            tl = ps.simulate(schedule, p, m, t_f=tf, t_b=tb / 2, t_w=tb / 2)
            assert tl.makespan == pytest.approx((m + p - 1) * (tf + tb))
            assert tl.bubble_fraction() == pytest.approx(ps.gpipe_bubble_fraction(p, m))
            assert tl.bubble_relative() == pytest.approx(ps.gpipe_bubble_relative(p, m))
            assert ps.rel_to_frac(tl.bubble_relative()) == pytest.approx(tl.bubble_fraction())


def test_naive_bubble():
    for p in range(1, 65, 7):
        tl = ps.simulate("naive", p, 8)
        assert tl.bubble_fraction() == pytest.approx(ps.naive_bubble_fraction(p))
        assert tl.bubble_relative() == pytest.approx(p - 1)


def test_interleaved_bubble_and_memory():
    for p in (2, 3, 4, 8):
        for v in (1, 2, 3, 4):
            for m in (p, 2 * p, 4 * p):
                tl = ps.simulate("interleaved", p, m, v)
                assert tl.bubble_relative() == pytest.approx(ps.interleaved_bubble_relative(p, m, v))
                peak = tl.inflight()
                assert list(peak) == list(ps.interleaved_peak_chunks(p, m, v, np.arange(p)))
                # rank 0 memory in units of A: chunks of A/v -> pA(1 + (p−1)/(pv)) when m·v is not the cap
                if 2 * (p - 1) + (v - 1) * p + 1 <= m * v:
                    assert peak[0] / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_zb_h1_bubble_and_memory():
    for p, m in [(2, 8), (4, 8), (4, 16), (8, 32), (8, 64)]:
        for tf, tb, tw in [(1, 1, 1), (1, 1.2, 0.8), (1, 2, 1)]:
            tl = ps.simulate("zb_h1", p, m, t_f=tf, t_b=tb, t_w=tw)
            assert tl.bubble_relative() == pytest.approx(ps.zb_h1_bubble_relative(p, m, tf, tb, tw))
        one = ps.simulate("1f1b", p, m)
        assert list(tl.inflight("B")) == list(one.inflight()) == list(ps.one_f_one_b_peak_inflight(p, m, np.arange(p)))


def test_inflight_gpipe_vs_1f1b():
    for p, m in [(2, 8), (4, 4), (4, 16), (8, 3)]:
        assert list(ps.simulate("gpipe", p, m).inflight()) == [m] * p
        assert list(ps.simulate("1f1b", p, m).inflight()) == [min(p - r, m) for r in range(p)]


def test_comm_latency_adds_two_hops_per_stage():
    p, m, c = 4, 6, 0.25
    tl = ps.simulate("gpipe", p, m, t_f=1, t_b=1, t_w=1, t_comm=c)
    assert tl.makespan == pytest.approx((m + p - 1) * 3 + 2 * (p - 1) * c)


def test_orders_match_torch_tables():
    """Interleaved 1F1B, LoopedBFS and ZBV: the per-rank order equals torch's pipeline_order
    (for single-stage schedules torch's table is not what runs; those are checked against measured runs)."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    names = {"interleaved": ("Interleaved1F1B", 2), "looped_bfs": ("LoopedBFS", 2), "zbv": ("ZBVZeroBubble", 2)}
    for sched, (tname, v) in names.items():
        for p, m in [(2, 8), (4, 8), (3, 6), (4, 12)]:
            ops = get_schedule_ops(tname, p, m, num_stages_per_rank=v)
            for r in range(p):
                kind = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W"}
                theirs = [(kind[a.computation_type.name], a.microbatch_index, a.stage_index) for a in ops[r] if a]
                mine = [(o, i, ps.stage_of(sched, r, c, p, v)) for o, i, c in ps.rank_order(sched, r, p, m, v)]
                assert mine == theirs, (sched, p, m, r)


def test_deadlock_is_detected(monkeypatch):
    real = ps.rank_order

    def bad(schedule, rank, p, m, v=1):
        o = real(schedule, rank, p, m, v)
        return o[::-1] if rank == 0 else o  # rank 0 starts with a backward that waits for itself

    monkeypatch.setattr(ps, "rank_order", bad)
    with pytest.raises(ValueError, match="deadlock"):
        ps.simulate("gpipe", 2, 2)


@pytest.mark.parametrize("schedule", ps.SCHEDULES)
def test_64_stages_under_a_second(schedule):
    m = 256
    t0 = time.perf_counter()
    tl = ps.simulate(schedule, 64, m, 2)
    took = time.perf_counter() - t0
    assert took < 1.0 * slowdown(), f"{schedule}: {took:.2f} s"
    assert len(tl.start) == 64 * (tl.v * m * (3 if schedule in ps.SPLIT_BACKWARD else 2)) or schedule == "naive"


def test_chimera_64_stages_under_a_second():
    """The bidirectional list schedule (Ch4-05) at 64 stages, m = 64: orders and timeline in under a second."""
    ps._CHIMERA.clear()
    t0 = time.perf_counter()
    tl = ps.simulate("chimera", 64, 64, t_f=1.0, t_b=1.0, t_w=0.0)
    took = time.perf_counter() - t0
    assert took < 1.0 * slowdown(), f"chimera: {took:.2f} s"
    assert len(tl.start) == 2 * 64 * 64 and tl.makespan == 2 * 64 + 64 - 2


def test_interleaved_zb_order_is_torchs_table():
    """order_interleaved_zb (Ch4-05) equals torch's ScheduleInterleavedZeroBubble pipeline_order, Nones dropped."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    kind = {"FORWARD": "F", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W"}
    for p, m in [(2, 4), (2, 8), (3, 6), (4, 8), (4, 12), (4, 16)]:
        ops = get_schedule_ops("InterleavedZeroBubble", p, m, num_stages_per_rank=2)
        for r in range(p):
            theirs = [(kind[a.computation_type.name], a.microbatch_index, a.stage_index) for a in ops[r] if a]
            assert [(o, i, c * p + r) for o, i, c in ps.order_interleaved_zb(r, p, m, 2)] == theirs, (p, m, r)


def test_peak_live_is_the_timeline_inflight():
    """peak_live (order only) equals Timeline.inflight (from simulated start times) for the schedules both know."""
    for p, m in [(2, 8), (4, 8), (4, 16), (8, 32)]:
        for sched, until in [("gpipe", "B"), ("1f1b", "B"), ("interleaved", "B"), ("looped_bfs", "B"), ("zb_h1", "W"),
                             ("zbv", "W")]:
            orders, v, _ = ps.orders_of(sched, p, m)
            assert [ps.peak_live(o) for o in orders] == list(ps.simulate(sched, p, m, v).inflight(until)), (sched, p, m)


def test_several_steps_of_64_stages_under_a_second():
    for sched, p in (("zb_h2", 64), ("zbv", 32), ("dualpipev", 32), ("interleaved_zb", 32)):  # 64 stages each
        ps._ZB_H2.clear()
        t0 = time.perf_counter()
        out = ps.simulate_steps(sched, p, 64, steps=2, sync=False)
        assert time.perf_counter() - t0 < 1.0 * slowdown(), sched
        assert out["bubble_steady"] >= -1e-12

"""숨는 조건 (docs/thresholds.md): each threshold recomputed by another route than the one the page calls."""
from __future__ import annotations

import pytest
from snippets import thresholds as th
from snippets.ch4_pipeline_parallel import d01_naive_pipeline_bubble as pp
from snippets.ch5_zero_sharding import d06_zero_offload_infinity as off
from snippets.common import alphabeta as ab
from snippets.common import tp_cost

F, PSI = th.ASSUMED_FLOPS, 1e9


@pytest.mark.parametrize("link,bw", [("NVLink", th.NVLINK), ("InfiniBand", th.IB)])
def test_dp_and_zero3_thresholds_by_phase(link, bw):
    n, e = th.N, 2
    # DP: a ring AllReduce of the bf16 gradients (α = 0) against the backward's 4ψτ FLOPs
    t_ar = ab.ring_allreduce_time(n, e * PSI, 0.0, 1 / bw)
    dp = t_ar * F / (4 * PSI)
    # ZeRO-3, forward alone: an AllGather of the bf16 parameters against 2ψτ FLOPs
    z3_fwd = (e * PSI * (n - 1) / n / bw) * F / (2 * PSI)
    got = th.dp_zero3()[link]
    assert got["dp"] == pytest.approx(dp) and got["zero3"] == pytest.approx(z3_fwd)
    assert got["dp"] == pytest.approx(got["zero3"])  # the page's reading: the same threshold


def test_offload_threshold_is_where_the_step_stops_growing():
    """Ch5-06's step model: above τ* the overlapped step equals the GPU step; found by bisection on step_times."""
    lo, hi = 1.0, 1e7
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        s = off.step_times(PSI, mid, n=th.OFFLOAD_N)
        lo, hi = (mid, hi) if s["overlap"] > s["gpu"] * (1 + 1e-12) else (lo, mid)
    assert th.offload() == pytest.approx(hi, rel=1e-6)


def test_tp_and_pp_ratios_do_not_depend_on_tokens():
    sh = th.SHAPE
    for bw in (th.NVLINK, th.IB):
        ratios = []
        for b in (1, 4):
            sc = tp_cost.tp_scaling(sh["t"], b, sh["s"], sh["h"], F, 0.0, 1 / bw)
            ratios.append(float(sc["comm_s"] / sc["compute_s"]))
        assert ratios[0] == pytest.approx(ratios[1]) == pytest.approx(th.tp_ratio(bw))
        pps = [pp.p2p_vs_compute(b, sh["s"], sh["h"], 2, sh["layers_per_stage"], 0.0, bw, F)["ratio"] for b in (1, 8)]
        assert pps[0] == pytest.approx(pps[1]) == pytest.approx(th.pp_ratio(bw))
    # the page's readings: TP hides in a node and not across nodes; the boundary send is small everywhere
    assert th.tp_ratio(th.NVLINK) < 1 < th.tp_ratio(th.IB)
    assert th.pp_ratio(th.IB) < 0.05


def test_figure_draws_every_line_and_readings_hold():
    """The figure names every line (DP and ZeRO-3 separately, so the reader can see them coincide), and the page's
    readings hold for the numbers: DP = ZeRO-3 per link, the cross-node factor is the bandwidth ratio."""
    svg = th.figure()
    for name in ("DP, NVLink", "ZeRO-3, NVLink", "DP, InfiniBand", "ZeRO-3, InfiniBand", "TP t = 8, NVLink", "PP 경계"):
        assert name in svg, name
    d = th.dp_zero3()
    assert d["InfiniBand"]["zero3"] / d["NVLink"]["zero3"] == pytest.approx(th.NVLINK / th.IB)

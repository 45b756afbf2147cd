"""Ch3-05 TP communication cost: each test asserts a claim the page makes."""
import numpy as np
import pytest

from snippets.ch3_tensor_parallel import d05_tp_communication_cost as page
from snippets.common import tp_cost


def test_counts_per_layer_and_step():
    """Theorem 3.5.3: 4 per layer (selective too), 6 with full recomputation; 4·L·m per step."""
    assert tp_cost.tp_allreduces_per_layer("none") == tp_cost.tp_allreduces_per_layer("selective") == 4
    assert tp_cost.tp_allreduces_per_layer("full") == 6
    for L, m in [(1, 1), (96, 8), (80, 16)]:
        assert tp_cost.tp_allreduces_per_step(L, m) == 4 * L * m
        assert tp_cost.tp_allreduces_per_step(L, m, "full") == 6 * L * m
    with pytest.raises(ValueError):
        tp_cost.tp_allreduces_per_layer("sometimes")


def test_measured_counts_match_formula():
    """Experiment 1: DTensor block = 4 all_reduces; full recompute without early stop = 6; torch's
    default early stop = 5 (the last g is not recomputed); every all_reduce carries b·s·h·4 bytes."""
    runs = page.tp_runs()
    assert sorted(r.hardware["world_size"] for r in runs) == [2, 4]
    for run in runs:
        m = page.measured_counts(run)
        total = {k: len(v["forward"]) + len(v["backward"]) for k, v in m.items()}
        assert total["block"] == tp_cost.tp_allreduces_per_layer("none")
        assert total["block_recompute_full"] == tp_cost.tp_allreduces_per_layer("full")
        assert total["block_recompute"] == tp_cost.tp_allreduces_per_layer("full") - 1
        for case in ("block", "block_recompute", "block_recompute_full"):
            c = m[case]
            assert len(c["forward"]) == 2
            assert {nb for _, nb in c["forward"] + c["backward"]} == {c["b"] * c["s"] * c["h"] * 4}
            assert max(c["diff"].values()) <= 1e-4


def test_early_stop_is_torchs_default():
    """The page's explanation of the 5: non-reentrant checkpoint stops early by default."""
    pytest.importorskip("torch")
    from torch.utils import checkpoint

    assert checkpoint._enable_checkpoint_early_stop in (True, None)
    assert hasattr(checkpoint, "set_checkpoint_early_stop")


def test_bytes_and_time_formulas_against_alphabeta():
    """Experiment 2: S = bshe; one layer's time = 4 ring all-reduces (Ch1's formula), 6 with full recompute."""
    from snippets.common.alphabeta import ring_allreduce_time

    assert tp_cost.tp_allreduce_bytes(1, 2048, 12288) == 2 * 2048 * 12288
    for r in page.layer_time_rows(8, 1, 2048, 12288):
        one = float(ring_allreduce_time(8, r["S"], page.ALPHA_ASSUMED, 1 / (r["GBps"] * 1e9)))
        assert r["one_allreduce_s"] == pytest.approx(one)
        assert r["layer_s"] == pytest.approx(4 * one) and r["layer_full_recompute_s"] == pytest.approx(6 * one)
    rows = {r["link"].split(" (")[0]: r for r in page.layer_time_rows(8, 1, 2048, 12288)}
    ratio = rows["InfiniBand NDR"]["layer_s"] / rows["NVLink4"]["layer_s"]
    assert 1 < ratio < 9  # below the bandwidth ratio: the α term is the same on both links
    no_alpha = [float(tp_cost.tp_comm_time_per_layer(8, 1, 2048, 12288, 0.0, 1 / (g * 1e9))) for g in (50.0, 450.0)]
    assert no_alpha[0] / no_alpha[1] == pytest.approx(9)


def test_link_rates_are_per_direction():
    """ERRATA 8: A100 300, H100 450 GB/s per direction (600/900 bidirectional); HDR 25, NDR 50 GB/s."""
    got = {k.split(" (")[0]: v for k, v in page.links().items()}
    assert got == {"NVLink3": 300.0, "NVLink4": 450.0, "InfiniBand HDR": 25.0, "InfiniBand NDR": 50.0}


def test_cpu_fit_is_positive_and_from_committed_results():
    f = page.cpu_fit(2)
    assert f["alpha"] > 0 and f["beta"] > 0 and f["run"].hardware["kind"] == "cpu"


@pytest.mark.parametrize("t", [2, 3, 8, 16, 64])
def test_rho_closed_form_equals_separate_times(t):
    """Theorem 3.5.4: ρ(t) = 16(t−1)Rβ/(72h+12s) equals T_comm/T_comp from tp_scaling (α = 0) for any b."""
    R, gbps, s, h = 989e12, 450.0, 2048, 12288
    rho = float(page.comm_to_compute_ratio(t, s, h, R, gbps))
    for b in (1, 4, 32):
        sc = tp_cost.tp_scaling(np.array([t]), b, s, h, R, 0.0, 1 / (gbps * 1e9))
        assert float(sc["comm_s"][0] / sc["compute_s"][0]) == pytest.approx(rho)


def test_scaling_limit_shape():
    """Theorem 3.5.4: compute ∝ 1/t, per-rank bytes increase toward 4bsh; the comm fraction increases with t,
    and an InfiniBand TP group has ρ larger by the bandwidth ratio."""
    ts = np.array([2, 4, 8, 16, 32, 64])
    sc = tp_cost.tp_scaling(ts, 1, 2048, 12288, 989e12, 5e-6, 1 / 450e9)
    assert np.allclose(sc["compute_s"] * ts, sc["compute_s"][0] * 2)
    assert np.all(np.diff(sc["comm_fraction"]) > 0)
    sent = tp_cost.tp_bytes_sent_per_rank_per_layer(ts, 1, 2048, 12288)
    assert np.all(np.diff(sent) > 0) and np.all(sent < 4 * 4 * 2048 * 12288)  # 4 all-reduces, each → 2S, S = 2bsh
    r_nv = page.comm_to_compute_ratio(8, 2048, 12288, 989e12, 450)
    r_ib = page.comm_to_compute_ratio(8, 2048, 12288, 989e12, 50)
    assert float(r_ib / r_nv) == pytest.approx(9)
    assert float(page.comm_to_compute_ratio(16, 2048, 12288, 989e12, 50)) > 1 > float(r_nv)


def test_flops_formula_matches_narayanan():
    """layer_flops = 72bsh² + 12bs²h = ¾ of Narayanan et al.'s 96bsh²(1 + s/6h) (which includes a recompute forward)."""
    b, s, h = 2, 2048, 12288
    assert tp_cost.layer_flops(b, s, h) == pytest.approx(0.75 * 96 * b * s * h * h * (1 + s / (6 * h)))


def test_sequence_parallel_same_volume():
    """Theorem 3.5.5 / Experiment 4: SP = 2 AG + 2 RS per pass, each of the AR's S; ring bytes per rank equal TP's;
    the LayerNorm gradients are left Partial."""
    sp = tp_cost.tp_collectives_per_layer(sequence_parallel=True)
    assert sp["forward"] == sp["backward"] == {"all_gather": 2, "reduce_scatter": 2}
    for run in page.tp_runs():
        m = page.measured_counts(run)
        tp, spc = m["block"], m["block_sp"]
        t = tp["t"]
        S = tp["b"] * tp["s"] * tp["h"] * 4
        assert (spc["b"], spc["s"], spc["h"]) == (tp["b"], tp["s"], tp["h"])
        for p in ("forward", "backward"):
            ops = sorted(op for op, _ in spc[p])
            assert ops == ["all_gather_into_tensor"] * 2 + ["reduce_scatter_tensor"] * 2
            assert {nb for _, nb in spc[p]} == {S}
        assert page.ring_bytes_per_rank(spc["forward"] + spc["backward"], t) == pytest.approx(
            page.ring_bytes_per_rank(tp["forward"] + tp["backward"], t))
        assert max(spc["diff"].values()) <= 1e-4
        assert {v for k, v in spc["grad_placements"].items() if k.startswith("ln")} == {"(Partial(sum),)"}


def test_ring_allgather_is_half_an_allreduce():
    from snippets.common.alphabeta import ring_allreduce_time

    for t in (2, 8, 64):
        assert 2 * tp_cost.ring_allgather_time(t, 1e6, 1e-6, 1e-9) == pytest.approx(float(ring_allreduce_time(t, 1e6, 1e-6, 1e-9)))


def test_figure_and_tables_fit_the_cell_budget():
    """GUIDE: a build-time cell runs in under 1 s (CPU time of this thread, scaled by the machine's speed)."""
    import time

    from tests.conftest import cell_budget

    t0 = time.thread_time()
    svg = page.scaling_figure()
    assert "<svg" in svg and time.thread_time() - t0 < cell_budget()
    t0 = time.thread_time()
    page.layer_time_rows(8, 1, 2048, 12288)
    page.cpu_fit(2)
    page.measured_counts(page.tp_runs()[0])
    assert time.thread_time() - t0 < cell_budget()


def test_bandwidth_term_limit_is_16bsh_beta():
    """Theorem 3.5.4 and the figure's caption: per layer and micro-batch the bandwidth term grows with t
    toward 4 all-reduces × 2S = 16·b·s·h·β (16-bit), i.e. 4bsh bytes per all-reduce; it never falls."""
    b, s, h, beta = 1, 2048, 12288, 1 / 450e9
    ts = np.array([2, 4, 8, 64, 4096], float)
    per_layer = tp_cost.tp_comm_time_per_layer(ts, b, s, h, 0.0, beta)
    assert np.all(np.diff(per_layer) > 0)
    assert per_layer[-1] == pytest.approx(16 * b * s * h * beta, rel=1e-3)
    sent = tp_cost.tp_bytes_sent_per_rank_per_layer(ts, b, s, h)
    assert sent[-1] == pytest.approx(16 * b * s * h, rel=1e-3)

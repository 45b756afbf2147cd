"""Ch7-01 3D Parallelism: each test asserts a claim the page makes, against an independent computation."""
import itertools
import math

import pytest

from snippets import results
from snippets.ch7_3d_parallelism import d01_3d_parallelism as page
from snippets.common import planner_3d as pl

M, C, B = pl.LLAMA70B, pl.H100_64, pl.BATCH_4M


def test_factorisations_are_every_ordered_triple():
    """The planner enumerates every (d, t, p) with d·t·p = N: brute force over all triples."""
    for n in (1, 8, 12, 64):
        brute = {(d, t, p) for d, t, p in itertools.product(range(1, n + 1), repeat=3) if d * t * p == n}
        assert set(pl.factorisations(n)) == brute and len(pl.factorisations(n)) == len(brute)


def test_axis_links_match_rank_coordinates():
    """Definition 7.1.1: an axis is intra-node iff all ranks of each of its groups share a node (rank // g)."""
    g = 8
    for d, t, p in pl.factorisations(64):
        coords = {(rd, rp, rt): rt + t * (rp + p * rd) for rd in range(d) for rp in range(p) for rt in range(t)}
        def intra(axis):
            groups = {}
            for (rd, rp, rt), r in coords.items():
                key = {"tp": (rd, rp), "pp": (rd, rt), "dp": (rp, rt)}[axis]
                groups.setdefault(key, set()).add(r // g)
            return all(len(nodes) == 1 for nodes in groups.values())
        ev = pl.evaluate(M, C, B, d, t, p)
        assert {a: ev["links"][a] == "intra" for a in ("tp", "pp", "dp")} == {a: intra(a) for a in ("tp", "pp", "dp")}


def test_evaluate_against_hand_written_alpha_beta():
    """Definition 7.1.2 recomputed from scratch (ring α-β, Korthikanti 34sbh/t, ZeRO-1) for the syllabus layout."""
    d, t, p = 2, 8, 4
    L, h, s, a, b = M.layers, M.hidden, M.seq, M.heads, 1
    m = B.global_batch // (d * b)
    ev = pl.evaluate(M, C, B, d, t, p)
    S = 2 * b * s * h
    ring = lambda n, size, al, be: 2 * (n - 1) * al + 2 * (n - 1) / n * size * be  # noqa: E731
    tp = 4 * ring(t, S, C.alpha_intra, 1 / C.intra_bw) * (L / p) * m
    pp = 2 * m * (C.alpha_inter + S / t / C.inter_bw)
    dp = ring(d, 2 * M.psi / (t * p), C.alpha_inter, 1 / C.inter_bw)
    assert ev["comm_s"] == pytest.approx({"tp": tp, "pp": pp, "dp": dp}, rel=1e-12)
    act = 34 * s * b * h / t * (L / p) * min(p, m)
    states = 4 * M.psi / (t * p) + 12 * M.psi / (t * p) / d
    assert ev["mem"]["total"] == pytest.approx(act + states, rel=1e-12)
    comp = (72 * b * s * h * h + 12 * b * s * s * h) * (L / p) * m / (t * C.flops * C.mfu)
    assert ev["step_s"] == pytest.approx((comp + tp + pp) * (1 + (p - 1) / m) + dp, rel=1e-12)


def test_traffic_theorem_and_corollary():
    """Theorem 7.1.3 in closed form; Corollary 7.1.4 exact when ψ = 12Lh²; the page's ordering TP ≫ PP, DP."""
    d, t, p = 2, 8, 4
    L, h, s = M.layers, M.hidden, M.seq
    m, e = B.global_batch // d, 2
    v = page.bytes_per_step(M, B, d, t, p)
    assert v["tp"] == pytest.approx(8 * (t - 1) / t * s * h * e * L / p * m)
    assert v["pp"] == pytest.approx(2 * m * s * h * e / t)
    assert v["dp"] == pytest.approx(2 * (d - 1) / d * e * M.psi / (t * p))
    ideal = pl.Model(L, h, M.heads, s, M.vocab, 12 * L * h * h)
    vi = page.bytes_per_step(ideal, B, d, t, p)
    assert vi["tp"] / vi["dp"] == pytest.approx(page.tp_over_dp(t, d, B.global_batch * s, h))
    assert v["tp"] / v["pp"] == pytest.approx(4 * (t - 1) * L / p)
    assert v["tp"] > 100 * max(v["pp"], v["dp"])
    # "PP and DP take under a second even over the NIC; TP takes seconds even over NVLink" (experiment 1)
    assert max(v["pp"], v["dp"]) / C.inter_bw < 1 < v["tp"] / C.intra_bw
    # "over the NIC, TP takes longer than the step's compute" (experiment 1)
    assert v["tp"] / C.inter_bw > pl.evaluate(M, C, B, d, t, p)["compute_s"]
    # ZeRO-3 adds one all-gather of the parameters: (d−1)/d · eψ/(tp)
    v3 = page.bytes_per_step(M, B, d, t, p, zero_stage=3)
    assert v3["dp"] - v["dp"] == pytest.approx((d - 1) / d * e * M.psi / (t * p))


def test_planner_ranking_claims():
    """Experiment 2: ranking sorted, fits consistent; every feasible row keeps TP intra; the best has t < 8 and
    the syllabus layout 2·8·4 fits but is not first; t = 16 (TP over the NIC) is several times slower."""
    rows = pl.plan(M, C, B)
    feasible = [r for r in rows if r["fits"]]
    assert rows[:len(feasible)] == feasible
    assert [r["step_s"] for r in feasible] == sorted(r["step_s"] for r in feasible)
    assert all(r["fits"] == (r["mem"]["total"] <= C.mem_bytes) for r in rows)
    assert all(r["links"]["tp"] == "intra" for r in rows)
    syl = page.find(rows, 2, 8, 4)
    assert syl["fits"] and rows.index(syl) > 0 and rows[0]["t"] < 8
    # "same compute (t·p equal), the gap comes from TP; PP time and bubble are smaller for 2·8·4"
    best = rows[0]
    assert best["t"] * best["p"] == 32 and syl["compute_s"] == pytest.approx(best["compute_s"])
    assert syl["comm_s"]["tp"] - best["comm_s"]["tp"] > syl["step_s"] - best["step_s"] > 0
    assert syl["comm_s"]["pp"] < best["comm_s"]["pp"] and syl["bubble"] < best["bubble"]
    t16 = min((r for r in pl.plan(M, C, B, max_t=16) if r["t"] == 16), key=lambda r: r["step_s"])
    assert t16["links"]["tp"] == "inter" and t16["step_s"] > 2 * rows[0]["step_s"]
    # every valid layout is there: t | a, p | L, d | B, t <= g
    want = {(d, t, p) for d, t, p in pl.factorisations(64) if M.heads % t == 0 and M.layers % p == 0
            and B.global_batch % d == 0 and t <= 8}
    assert {(r["d"], r["t"], r["p"]) for r in rows} == want


def test_small_batch_moves_the_choice():
    """Exercise 2: with B = 64 the winner has a smaller p and a larger t than with B = 1024."""
    big, small = pl.plan(M, C, B)[0], pl.plan(M, C, pl.Batch(64, 1))[0]
    assert small["p"] < big["p"] and small["t"] > big["t"]
    assert page.find(pl.plan(M, C, pl.Batch(64, 1)), 2, 2, 16)["bubble"] == pytest.approx(15 / 32)


def test_llama3_405b_exercise():
    """Exercise 1: t = 4 does not fit 80 GB, t = 8 does (ZeRO-3 states + 34sbh/t activations, first 1F1B stage)."""
    psi, L, h, s = 405e9, 126, 16384, 8192
    for t, fits in ((4, False), (8, True)):
        total = 16 * psi / (t * 16) / 64 + 34 * s * h / t * math.ceil(L / 16) * 16
        assert (total <= 80e9) is fits


def _mesh():
    return results.load("mesh_3d", kind="cpu")


@pytest.mark.parametrize("r", _mesh(), ids=lambda r: r.path.name)
def test_mesh_run_matches_theorem_and_one_process(r):
    """Experiment 3/4: loss equal to one process (float32 rounding), collective counts and bytes as Theorem 7.1.5
    predicts, on every rank and every step."""
    m = r.measurements
    assert m["d"] == 2 and m["t"] == 2 and r.hardware["world_size"] == 4
    assert m["max_abs_loss_diff"] < 1e-6 and m["max_abs_param_diff"] < 1e-6
    assert len(m["losses"]) == r.params["steps"]
    for row in page.mesh_rows(r):
        assert row["measured"] == row["predicted"], row
        assert row["same_every_step"]
    # the independent count of the model's parameters (from the run) agrees with the prediction's
    assert page.mesh_prediction(r.params, 2, 2)["total_params"] == m["total_params"]
    # the row-parallel bias is the only tensor TP replicates
    assert {n for n, pls in m["placements"].items() if pls[1] == "R"} == {f"{i}.down.bias" for i in range(r.params["L"])}


def test_tp_over_dp_magnitudes_in_prose():
    """Corollary 7.1.4's prose: hundreds to thousands when d ≈ t (70B, t = 8, d = 2: over a thousand); tens for
    Llama 3 405B (t = 8, d = 64, 16M tokens/step, h = 16384); V_TP/V_PP = 4(t−1)L/p in the hundreds for both."""
    assert 1000 < page.tp_over_dp(8, 2, 1024 * 4096, 8192) < 2000
    assert 10 < page.tp_over_dp(8, 64, 16 * 2**20, 16384) < 100
    assert 100 < 4 * 7 * 80 / 4 < 1000 and 100 < 4 * 7 * 126 / 16 < 1000
    # the page's helper is the corollary, checked against the theorem's two volumes (ψ = 12Lh²)
    L, h, s, b, m, d, t, p = 80, 8192, 4096, 1, 512, 2, 8, 4
    v_tp = 8 * (t - 1) / t * b * s * h * 2 * L / p * m
    v_dp = 2 * (d - 1) / d * 2 * 12 * L * h * h / (t * p)
    assert v_tp / v_dp == pytest.approx(page.tp_over_dp(t, d, d * m * b * s, h))

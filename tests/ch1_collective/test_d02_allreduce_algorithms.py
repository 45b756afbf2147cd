"""Ch1-02 AllReduce 의 구현 비교: each test asserts a claim the page makes."""
import time

import numpy as np
import pytest

from snippets.ch1_collective import d02_allreduce_algorithms as page
from snippets.common import alphabeta as ab


def test_exact_formulas_confirmed_by_simulators_up_to_1024():
    """Theorems 1.2.4–1.2.8 / the cost table: steps and critical-path bytes == the α-β formula."""
    t0 = time.perf_counter()
    rows = page.exact_sweep()
    assert time.perf_counter() - t0 < 3.0  # < 1 s on an idle machine; the cell budget
    assert max(r["N"] for r in rows) == 1024
    assert {r["name"] for r in rows} == set(page.FORMULAS) - {"double binary tree"}
    for r in rows:
        assert r["correct"], r
        assert r["steps"] == r["f_steps"], r
        assert r["path_bytes"] == r["f_bytes"], r
        if r["N"] >= 4:
            assert r["sent_max"] == pytest.approx(page.SENT_MAX[r["name"]](r["N"]) * r["S"]), r
            assert r["recv_max"] == r["sent_max"]


@pytest.mark.parametrize("n", [4, 64, 1024])
def test_seed_errata_recursive_costs(n):
    """ERRATA 4: recursive doubling is log N·α + S log N·β; Rabenseifner 2 log N·α + 2(N−1)/N·Sβ."""
    s = 4 * n
    k = int(np.log2(n))
    rd = page.check("recursive doubling", n, count=n)
    assert rd["sent_max"] == k * s
    r = page.check("Rabenseifner", n, count=n)
    assert r["steps"] == 2 * k and r["sent_max"] == 2 * (n - 1) * s // n
    # the shared cost functions against the simulators: α counts their steps, β their busiest rank's bytes
    assert ab.recursive_doubling_time(n, s, 1.0, 0.0) == rd["steps"]
    assert ab.recursive_doubling_time(n, s, 0.0, 1.0) == rd["sent_max"]
    assert ab.rabenseifner_time(n, s, 1.0, 0.0) == r["steps"]
    assert ab.rabenseifner_time(n, s, 0.0, 1.0) == pytest.approx(r["sent_max"])


def test_double_binary_tree_bytes_and_model_is_a_lower_envelope():
    """ERRATA 5 / Theorem 1.2.9: max sent = max received = 2S, mean 2(N−1)/N·S; steps ≥ 4M; the
    shared model 2⌈log₂N⌉α + 2Sβ never exceeds the simulated schedule's time."""
    rows = page.dbt_sweep()
    assert max(r["N"] for r in rows) == 1024
    for r in rows:
        n, s, m = r["N"], r["S"], r["M"]
        assert r["correct"]
        assert r["sent_max"] == r["recv_max"] == 2 * s
        assert r["sent_mean"] == pytest.approx(2 * (n - 1) / n * s)
        assert r["steps"] >= 4 * m and r["steps"] >= 2 * int(ab.log2_ceil(n))
        for alpha, beta in [(1.0, 0.0), (0.0, 1.0), (5e-6, 1 / 12.5e9)]:
            sim_t = r["steps"] * alpha + r["path_bytes"] * beta
            assert ab.double_binary_tree_time(n, s, alpha, beta) <= sim_t + 1e-12


def test_dbt_other_n_stays_within_2s():
    """Experiment 3: NCCL's shift/mirror trees keep max ≤ 2S and the total 2(N−1)S for any N."""
    for r in page.dbt_other_n(tuple(range(2, 41)) + (100, 1000)):
        assert r["correct"]
        assert r["sent_max"] <= 2.0 and r["recv_max"] <= 2.0
        assert r["total"] == 2 * (r["N"] - 1)


def test_dbt_without_pipelining_is_the_binary_tree_step_count():
    """Experiment 3: M = 1 takes 4 log₂N − 2 steps, like the unpipelined binary tree."""
    for r in page.dbt_sweep(segments=(1,)):
        assert r["steps"] == float(ab.binary_tree_time(r["N"], 0.0, 1.0, 0.0))


def test_dbt_pipelining_approaches_model_but_stays_above():
    rows = page.dbt_time_vs_segments(64, 2 ** 26, [1, 2, 4, 8, 16, 32], page.ALPHA_EXAMPLE, page.BETA_EXAMPLE)
    times = [r["time"] for r in rows]
    assert all(a > b for a, b in zip(times, times[1:]))  # more segments, faster (in this range)
    assert all(r["time"] > max(r["floor"], r["model"]) for r in rows)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 100, 255, 256, 1000])
def test_nccl_trees_shape(n):
    """Each tree: one root, ≤ 2 children, depth ≤ ⌈log₂N⌉; for even N ≥ 4 the inner nodes of one
    tree are leaves of the other (except the roots' single-child link)."""
    t0, t1 = page.nccl_double_tree(n)
    for t in (t0, t1):
        assert (t < 0).sum() == 1
        assert np.bincount(t[t >= 0], minlength=n).max() <= 2
        assert page.tree_depth(t) <= int(ab.log2_ceil(n))
    if n % 2 == 0 and n >= 4:
        inner0 = np.bincount(t0[t0 >= 0], minlength=n) == 2
        inner1 = np.bincount(t1[t1 >= 0], minlength=n) == 2
        assert not np.any(inner0 & inner1)


def test_binary_tree_upper_bound_for_other_n():
    for n in list(range(2, 70)) + [100, 1000]:
        sim = page.binary_tree_allreduce(page.inputs(n, 8))
        assert sim.correct(page.inputs(n, 8))
        assert sim.steps <= float(ab.binary_tree_time(n, 0.0, 1.0, 0.0))
        if page.is_pow2(n):
            assert sim.steps == float(ab.binary_tree_time(n, 0.0, 1.0, 0.0))


def test_fold_for_non_powers_of_two():
    """Theorem 1.2.13: two extra steps; the folded odd rank sends S more."""
    for r in page.fold_sweep():
        n, p, s = r["N"], r["p"], r["S"]
        k = int(np.log2(p))
        assert r["correct"]
        if r["name"] == "recursive doubling":
            assert r["steps"] == k + 2 and r["sent_max"] == (k + 1) * s
            assert r["steps"] == r["f_steps_ceil"] + 1  # ⌈log₂N⌉ in alphabeta undercounts by one
        else:
            assert r["steps"] == 2 * k + 2 == r["f_steps_ceil"]  # 2⌈log₂N⌉ steps, but more bytes
            assert r["sent_max"] == 2 * (p - 1) * s // p + s
            # MPICH's comment: (2⌊lg p⌋+2)α + (2(p−1)/p + 2)nβ
            assert r["path_bytes"] == 2 * (p - 1) * s // p + 2 * s
        if r["name"] == "recursive doubling":
            assert r["path_bytes"] == (k + 2) * s


def test_seed_three_metrics():
    """ERRATA 5: the seed's numbers are three different metrics of the simulators."""
    n = 64
    met = page.seed_metrics(n)
    claims = page.seed_claims(n, 1.0)
    assert met["ring"]["sent_max"] == pytest.approx(claims["ring"])
    assert met["naive (reduce+bcast)"]["root_sent_plus_recv"] == pytest.approx(claims["naive (reduce+bcast)"])
    assert met["binomial tree"]["sent_max"] == pytest.approx(claims["binomial tree"])  # root, one direction
    for m in met.values():  # every tree/ring/naive variant moves 2(N−1)S in total
        assert m["sent_mean"] == pytest.approx(2 * (n - 1) / n)
    assert met["double binary tree"]["sent_max"] == 2.0 and met["binary tree"]["sent_max"] == 3.0


def test_tradeoff_table_regimes():
    """The fastest-algorithm table: recursive doubling for small S, Rabenseifner for large S (N = 2^k)."""
    sizes = [1 << 10, 1 << 30]
    table = page.fastest([8, 64, 1024], sizes, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE)
    for row in table:
        assert row[0] == "recursive doubling" and row[-1] == "Rabenseifner"
    ns, sizes = [4, 8, 64, 256, 1024], [1 << e for e in (10, 16, 20, 24, 28, 30)]
    names = {k for row in page.fastest(ns, sizes, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE) for k in row}
    assert not names & {"naive (reduce+bcast)", "binary tree"}
    # ring against the tree model: S* = N(N − 1 − log₂N)·α/β
    for n in ns:
        want = n * (n - 1 - np.log2(n)) * page.ALPHA_EXAMPLE / page.BETA_EXAMPLE
        assert page.ring_tree_crossover(n, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE) == pytest.approx(want, rel=1e-4)


def test_exercise1_crossover():
    n, a, b = 16, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE
    k = 4
    s_star = k * a / ((k - 2 * (n - 1) / n) * b)
    assert ab.recursive_doubling_time(n, s_star, a, b) == pytest.approx(ab.rabenseifner_time(n, s_star, a, b))


# NCCL 2.30.7 (NVIDIA/nccl 5067397c2676d5aed50042fc39e5c8ee96eb0027), src/graph/tuning.cc, ncclTopoTuneModel,
# lines 330-331 and 378-380, copied verbatim: the tree AllReduce refinement and the busBw → algBw conversion.
NCCL_2_30_7_TUNING_CC = """
        if (a == NCCL_ALGO_TREE && coll == ncclFuncAllReduce)
          busBw = std::min(busBw * .92, graphs[a]->nChannels * perChMaxTreeBw);
          float ratio = 1.0f;
          if (a == NCCL_ALGO_RING || a == NCCL_ALGO_NVLS || a == NCCL_ALGO_NVLS_TREE) ratio *= (1.0 * nRanks) / nsteps;
          else ratio *= .5;
"""


@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_exercise_3b_nccl_ratio_is_not_n_over_n_minus_1(nodes):
    """Exercise 3(b): Ch1-04's model_cost gives the ring/tree algbw ratio that NCCL 2.30.7's tuning.cc
    gives (factors parsed from the source lines above, with nsteps = 2(N−1) for ring AllReduce):
    N/(N−1)/0.92, not the α-β model's N/(N−1); the same 0.92 Ch1-04 exercise 2 uses."""
    import re

    from snippets.ch1_collective.d04_nccl_topology import NCCL_SOURCE, model_cost

    assert NCCL_SOURCE["version"] == "2.30.7"
    tree_f = float(re.search(r"busBw = std::min\(busBw \* ([.\d]+), graphs\[a\]->nChannels \* perChMaxTreeBw",
                             NCCL_2_30_7_TUNING_CC).group(1))
    tree_ratio = float(re.search(r"else ratio \*= ([.\d]+);", NCCL_2_30_7_TUNING_CC).group(1))
    assert "ratio *= (1.0 * nRanks) / nsteps" in NCCL_2_30_7_TUNING_CC
    n = 8 * nodes
    nccl = (n / (2 * (n - 1))) / (tree_f * tree_ratio)
    _, b_ring = model_cost("ring", "Simple", nodes, 8, 400.0)
    _, b_tree = model_cost("tree", "Simple", nodes, 8, 400.0)
    assert b_ring / b_tree == pytest.approx(nccl, rel=1e-12)
    assert b_ring / b_tree != pytest.approx(n / (n - 1), rel=1e-3)

"""Ch1-03 Ring AllReduce 의 수학: each test asserts a claim the page makes."""
import time

import numpy as np
import pytest

from snippets import results
from snippets.ch1_collective import d03_ring_allreduce as page
from snippets.common import alphabeta as ab
from tests.conftest import cell_budget


def test_trace_lemma_invariant_and_final_state():
    """Lemma 1.3.4: after k reduce-scatter steps rank r's chunk (r−k) holds inputs r−k..r."""
    n = 4
    trace = page.ring_trace(n)
    for phase, k, state, _ in trace[1:n]:
        assert phase == "ReduceScatter"
        for r in range(n):
            want = "+".join(str(i) for i in sorted((r - j) % n for j in range(k + 1)))
            assert page.contributors(state[r, (r - k) % n], n) == want
    final = trace[-1][2]
    assert all(page.contributors(v, n) == "0+1+2+3" for v in final.ravel())
    assert len(trace) == 1 + 2 * (n - 1)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_trace_matches_vectorised_ring(n):
    x = np.array([[10 ** r] * n for r in range(n)], dtype=np.int64)
    out, *_ = page.ring_allreduce(x)
    assert np.array_equal(out, page.ring_trace(n)[-1][2])


def test_bytes_sweep_equals_formula_and_is_fast():
    """Theorem 1.3.5 (b)-(c) for N = 2..1024, and the GUIDE's budget (< 1 s)."""
    t0 = time.perf_counter()
    rows = page.bytes_sweep(page.SWEEP_NS)
    assert time.perf_counter() - t0 < cell_budget()
    assert max(page.SWEEP_NS) == 1024
    for r in rows:
        assert r["sum_ok"]
        assert r["steps"] == 2 * (r["N"] - 1)
        assert r["sent_max"] == r["sent_min"] == r["recv_max"] == r["formula"]


@pytest.mark.parametrize("n,count", [(4, 10), (5, 23), (8, 61), (7, 69), (16, 17)])
def test_uneven_chunks_exercise_2(n, count):
    """Exercise 2: rank r sends 2S − c[r+1] − c[r+2]; the excess over 2(N−1)S/N is < 2 elements."""
    x = np.ones((n, count), dtype=np.uint8)
    out, sent, recv, _ = page.ring_allreduce(x)
    assert np.all(out == n)
    c = np.array([len(a) for a in np.array_split(np.arange(count), n)])
    r = np.arange(n)
    assert np.array_equal(sent, 2 * count - c[(r + 1) % n] - c[(r + 2) % n])
    assert sent.max() - 2 * (n - 1) * count / n < 2


SMALL_NS = (2, 3, 4, 5, 6, 7, 8)


def _all_simulators():
    from snippets.ch1_collective import d02_allreduce_algorithms as d02

    sims = dict(d02.SIMULATORS)
    sims["binomial tree"] = d02.binomial_tree_allreduce
    return sims


@pytest.mark.parametrize("n", SMALL_NS)
def test_bandwidth_and_latency_bounds_hold_for_every_simulator(n):
    """Theorems 1.3.6 / 1.3.7 against every AllReduce simulator in the book, on real arrays at small N:
    each one is correct, its ranks send ≥ 2(N−1)S bytes in total, its busiest rank sends
    ≥ 2(N−1)S/N, it takes ≥ ⌈log₂N⌉ steps; the ring meets the bandwidth bound with equality and
    (N ≥ 2) misses the step bound."""
    from snippets.ch1_collective import d02_allreduce_algorithms as d02

    count = 8 * n * 4  # divisible by N and by every segment count the simulators use
    x = d02.inputs(n, count)
    s = count * x.dtype.itemsize
    checked = 0
    for name, fn in _all_simulators().items():
        try:
            sim = fn(x)
        except (AssertionError, ValueError):  # a schedule defined only for some N (e.g. powers of two)
            continue
        checked += 1
        assert sim.correct(x), name
        assert int(sim.sent.sum()) >= 2 * (n - 1) * s, name
        assert int(sim.sent.max()) * n >= 2 * (n - 1) * s, name
        assert sim.steps >= int(np.ceil(np.log2(n))), name
        if name == "ring":
            assert int(sim.sent.max()) * n == int(sim.sent.min()) * n == 2 * (n - 1) * s
            assert sim.steps == 2 * (n - 1) > np.ceil(np.log2(n))
    assert checked >= 5
    from snippets.ch1_collective.d04_nccl_topology import hierarchical_allreduce

    for g in range(2, n):                       # the 2D AllReduce (Ch1-04) for every split N = G·g
        if n % g == 0:
            r = hierarchical_allreduce(x, n // g, g)
            assert np.array_equal(r["out"], np.broadcast_to(x.sum(0), x.shape))
            sent = r["intra_sent"] + r["inter_sent"]
            assert int(sent.sum()) >= 2 * (n - 1) * s and int(sent.max()) * n >= 2 * (n - 1) * s
            assert r["intra_steps"] + r["inter_steps"] >= int(np.ceil(np.log2(n)))


def test_latency_gap_at_1024():
    """Theorem 1.3.7's figure: 2(N−1)/⌈log₂N⌉ ≈ 205 at N = 1024, counted by the simulator's steps."""
    rows = page.bytes_sweep([1024])
    assert round(rows[0]["steps"] / np.ceil(np.log2(1024))) == 205


def test_rabenseifner_never_slower_than_ring_for_powers_of_two():
    """Corollary 1.3.8, by brute force over sizes, and crossover_bytes' "never faster" answer."""
    sizes = np.logspace(0, 10, 50)
    for n in [2, 4, 8, 64, 1024]:
        assert np.all(ab.rabenseifner_time(n, sizes, 5e-6, 1e-10) <= ab.ring_allreduce_time(n, sizes, 5e-6, 1e-10))
    assert page.ring_crossovers(64, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE)["Rabenseifner"] == float("inf")


def _brute_crossover(n, a, b, small, large):
    """Independent answer: scan S on a fine grid; 0 if `large` is never slower, else where it wins."""
    sizes = np.concatenate([[0.0], np.logspace(-3, 15, 4000)])
    tl, ts = large(n, sizes, a, b), small(n, sizes, a, b)
    if np.all(tl <= ts * (1 + 1e-12)):
        return 0.0
    wins = tl < ts * (1 - 1e-12)
    if not wins[-1]:
        return float("inf")
    last_loss = np.nonzero(~wins)[0].max()
    return sizes[last_loss], sizes[min(last_loss + 1, len(sizes) - 1)]


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64, 1024])
def test_crossover_bytes_agrees_with_brute_force_for_every_pair(n):
    """The shared alphabeta.crossover_bytes tells 0 ("never slower") from inf ("never faster"), for every
    ordered pair of the book's cost formulas, checked against a scan of the costs themselves."""
    a, b = page.ALPHA_EXAMPLE, page.BETA_EXAMPLE
    costs = {**ab.ALGORITHMS, "binary tree": ab.binary_tree_time}
    for ns_, small in costs.items():
        for nl, large in costs.items():
            if ns_ == nl:
                continue
            got = float(ab.crossover_bytes(n, a, b, small, large))
            want = _brute_crossover(n, a, b, small, large)
            if isinstance(want, tuple):
                assert want[0] <= got <= want[1] * (1 + 1e-9), (n, ns_, nl, got, want)
            else:
                assert got == want, (n, ns_, nl, got, want)


def test_experiment3_ring_never_slower_than_naive():
    """The bug the first edition printed: ring vs naive is "all S" (0), never "ring always slower"."""
    cross = page.ring_crossovers(64, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE)
    assert cross["naive (reduce+bcast)"] == 0.0
    sizes = np.logspace(0, 12, 100)
    assert np.all(ab.ring_allreduce_time(64, sizes, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE)
                  <= ab.naive_allreduce_time(64, sizes, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE))
    assert page.crossover_label(cross["naive (reduce+bcast)"]).startswith("모든 S")
    assert page.crossover_label(cross["Rabenseifner"]).startswith("없음")


def test_fit_recovers_known_constants():
    n, alpha, beta = 4, 30e-6, 1 / 2e9
    rows = [{"bytes": s, "time_us_median": float(ab.ring_allreduce_time(n, s, alpha, beta)) * 1e6}
            for s in [2 ** k for k in range(4, 26)]]
    f = page.fit_ring_model(rows, n)
    assert f["alpha"] == pytest.approx(alpha, rel=1e-6)
    assert f["beta"] == pytest.approx(beta, rel=1e-6)


def test_measured_fit_on_committed_results():
    """Experiment 4's reading: positive α and β, and the model holds for large messages."""
    runs = results.load("collectives_bench", kind="cpu")
    assert {r.hardware["world_size"] for r in runs} >= {2, 4}
    for r in runs:
        f = page.fit_ring_model(page.measured_allreduce(r), r.hardware["world_size"])
        assert f["alpha"] > 0 and f["beta"] > 0
        big = f["sizes"] >= 1 << 20
        assert np.max(np.abs(f["rel_residuals"][big])) < 0.5
    two = next(r for r in runs if r.hardware["world_size"] == 2)
    four = next(r for r in runs if r.hardware["world_size"] == 4)
    small = lambda r: np.median([m["time_us_median"] for m in page.measured_allreduce(r) if m["bytes"] <= 1024])
    assert four.hardware["cpu_count"] < 4, "the page's premise: 4 processes on fewer cores"
    assert small(four) > 3 * small(two)   # the page's oversubscription claim


def test_two_process_alpha_is_hundreds_of_microseconds():
    """Experiment 4's reading: with 2 processes (no oversubscription) the fitted α is hundreds of µs,
    orders of magnitude above a GPU link's few µs."""
    from snippets import results
    from snippets.ch1_collective.d03_ring_allreduce import fit_ring_model, measured_allreduce

    run = next(r for r in results.load("collectives_bench", kind="cpu") if r.hardware["world_size"] == 2)
    f = fit_ring_model(measured_allreduce(run), 2)
    assert 100e-6 <= f["alpha"] < 1e-3


@pytest.mark.parametrize("n", [3, 4, 5])
def test_ring_step_figure_layout_follows_definition_and_lemma(n):
    """The ring-step figure (experiment 1): sends follow Definition 1.3.3 written out independently
    ((r − t) mod N, then (r + 1 − t) mod N), the counts follow Lemma 1.3.4, and the last panel is all N."""
    panels = page.ring_step_layout(n)
    assert len(panels) == 2 * (n - 1)
    for i, p in enumerate(panels):
        t = i if i < n - 1 else i - (n - 1)
        want = [(r - t) % n if i < n - 1 else (r + 1 - t) % n for r in range(n)]
        assert p["sends"] == want
        if i < n - 1:
            k = t + 1
            assert all(p["counts"][r, (r - k) % n] == k + 1 for r in range(n))
    assert (panels[-1]["counts"] == n).all()


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_allgather_received_chunks_are_r_down_to_r_minus_n_plus_2(n):
    """Proof of Theorem 1.3.5 (a): during the all-gather rank r receives chunks r, r−1, …, r−N+2 (N−1 chunks),
    read from the trace's sends (rank r receives what rank r−1 sends), and with its own chunk r+1 that is all of Z_N."""
    trace = page.ring_trace(n)
    ag = [sends for phase, _, _, sends in trace if phase == "AllGather"]
    for r in range(n):
        got = [int(s[(r - 1) % n]) for s in ag]
        assert got == [(r - k) % n for k in range(n - 1)]
        assert sorted(got + [(r + 1) % n]) == list(range(n))


# nccl-tests 2.19.6 (NVIDIA/nccl-tests a0b82b2260cf5152b9f8c061bbf7eaf0ba096432), the `double factor = ...;`
# right-hand side of each src/<op>.cu *GetBw, copied verbatim.
NCCL_TESTS_2_19_6_FACTOR = {
    "all_reduce": "((double)(2*(nranks - 1)))/((double)nranks)",       # src/all_reduce.cu:63
    "all_gather": "((double)(nranks - 1))/((double)nranks)",           # src/all_gather.cu:42
    "reduce_scatter": "((double)(nranks - 1))/((double)nranks)",       # src/reduce_scatter.cu:41
    "all_to_all": "((double)(nranks-1))/((double)(nranks))",           # src/alltoall.cu:52
    "broadcast": "1",                                                  # src/broadcast.cu:38
}


def test_exercise_3c_names_only_nccl_tests_busbw_factors():
    """Exercise 3(c) lists nccl-tests' busbw factors: the page may name only the three in BUSBW_FACTOR
    (2(n−1)/n, (n−1)/n, 1), which nccl-tests 2.19.6 applies in src/*.cu `*GetBw`; no (n−1)/(n+1)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "ch1-collective" / "03-ring-allreduce.md").read_text()
    sol = text[text.index("**문제 3 (논문 비평)"):]
    assert "(n+1)" not in sol and "(N+1)" not in sol
    for factor in ("$2(n-1)/n$", "$(n-1)/n$"):
        assert factor in sol
    # BUSBW_FACTOR against nccl-tests' own *GetBw factors, evaluated from its source text
    for op, expr in NCCL_TESTS_2_19_6_FACTOR.items():
        for n in (2, 3, 8, 64):
            c_value = eval(expr.replace("(double)", ""), {}, {"nranks": n})  # noqa: S307 (quoted C text)
            assert ab.BUSBW_FACTOR[op](n) == pytest.approx(c_value, rel=1e-15), (op, n)
    assert {round(f(8), 12) for f in ab.BUSBW_FACTOR.values()} == \
        {round(eval(e.replace("(double)", ""), {}, {"nranks": 8}), 12) for e in NCCL_TESTS_2_19_6_FACTOR.values()}

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
        assert phase == "reduce-scatter"
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


def test_ring_meets_bandwidth_bound_not_latency_bound():
    """Theorems 1.3.6 / 1.3.7 as the page states them."""
    n = np.array([2, 3, 4, 8, 100, 1024])
    s = 1e6
    ring_bw = ab.ring_allreduce_time(n, s, 0.0, 1.0)
    assert np.allclose(ring_bw, ab.allreduce_bandwidth_lower_bound(n, s, 1.0))
    ring_lat = ab.ring_allreduce_time(n, s, 1.0, 0.0)
    assert np.all(ring_lat > ab.allreduce_latency_lower_bound(n, 1.0))
    assert round(float(ring_lat[-1] / ab.allreduce_latency_lower_bound(1024, 1.0))) == 205


def test_rabenseifner_never_slower_than_ring_for_powers_of_two():
    """Corollary 1.3.8."""
    sizes = np.logspace(0, 10, 50)
    for n in [2, 4, 8, 64, 1024]:
        assert np.all(ab.rabenseifner_time(n, sizes, 5e-6, 1e-10) <= ab.ring_allreduce_time(n, sizes, 5e-6, 1e-10))
    assert page.ring_crossovers(64, page.ALPHA_EXAMPLE, page.BETA_EXAMPLE)["Rabenseifner"] == float("inf")


def test_crossover_is_where_costs_meet():
    """Experiment 3: below S* recursive doubling wins, above it ring wins, at S* they are equal."""
    a, b = page.ALPHA_EXAMPLE, page.BETA_EXAMPLE
    s_star = page.ring_crossovers(64, a, b)["recursive doubling"]
    assert np.isclose(ab.ring_allreduce_time(64, s_star, a, b), ab.recursive_doubling_time(64, s_star, a, b))
    assert ab.recursive_doubling_time(64, s_star / 2, a, b) < ab.ring_allreduce_time(64, s_star / 2, a, b)
    assert ab.recursive_doubling_time(64, s_star * 2, a, b) > ab.ring_allreduce_time(64, s_star * 2, a, b)
    assert page.best_algorithm(64, [1 << 10], a, b) != ["ring"]


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
    if four.hardware["cpu_count"] < 4:  # the page's oversubscription claim
        assert small(four) > 3 * small(two)


def test_two_process_alpha_is_hundreds_of_microseconds():
    """Experiment 4's reading: with 2 processes (no oversubscription) the fitted α is hundreds of µs,
    orders of magnitude above a GPU link's few µs."""
    from snippets import results
    from snippets.ch1_collective.d03_ring_allreduce import fit_ring_model, measured_allreduce

    run = next(r for r in results.load("collectives_bench", kind="cpu") if r.hardware["world_size"] == 2)
    f = fit_ring_model(measured_allreduce(run), 2)
    assert 100e-6 <= f["alpha"] < 1e-3

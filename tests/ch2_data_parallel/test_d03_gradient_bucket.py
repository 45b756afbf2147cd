"""Ch2-03 Gradient Bucket 과 Backward Overlap: each test asserts a claim the page makes."""
import itertools

import numpy as np
import pytest

from snippets import results
from snippets.ch2_data_parallel import d03_gradient_bucket as page
from snippets.common import alphabeta as ab
from snippets.common.ddp_buckets import MIB, assign_buckets, bucket_pipeline, ddp_limits

torch = pytest.importorskip("torch")
dist = torch.distributed


def _runs():
    runs = page.runs()
    assert {2, 4} <= set(runs)
    return runs


@pytest.mark.parametrize("seed", range(40))
def test_rule_equals_torch_compute_bucket_assignment(seed):
    """Definition 2.3.1 (experiment 1): our rule = torch.distributed._compute_bucket_assignment_by_size."""
    rng = np.random.default_rng(seed)
    numels = rng.integers(1, 5000, size=rng.integers(1, 30))
    limits = sorted(rng.integers(100, 20000, size=rng.integers(1, 3)).tolist())
    tensors = [torch.empty(int(n)) for n in numels]
    want, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(tensors))
    assert assign_buckets(4 * numels, limits) == want


def test_bucket_count_bounds_theorem_234():
    """Theorem 2.3.4: sizes in [C, C + s_max) but the last, S/(C+s_max) < k ≤ ⌊S/C⌋+1, big params alone."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        s = rng.integers(1, 1000, size=rng.integers(1, 40))
        cap = int(rng.integers(1, 3000))
        buckets = assign_buckets(s, [cap])
        sizes = [int(s[b].sum()) for b in buckets]
        assert all(cap <= x < cap + s.max() for x in sizes[:-1]) and sizes[-1] < cap + s.max()
        lo, hi = page.bucket_count_bounds(int(s.sum()), cap, int(s.max()))
        assert lo < len(buckets) <= hi
        if s.min() >= cap:
            assert len(buckets) == len(s)
    assert sorted(itertools.chain(*assign_buckets([5, 1, 7], [3]))) == [0, 1, 2]  # a partition, nothing split


def test_default_first_bucket_is_one_mib():
    """Definition 2.3.2: the installed torch's first-bucket constant is 1 MiB and applies only by default."""
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == MIB
    from torch.nn.parallel.distributed import _BucketCapacityConfig

    assert _BucketCapacityConfig.create(None, None, False).first_bucket_bytes_cap == MIB
    assert _BucketCapacityConfig.create(4, None, False).first_bucket_bytes_cap == 4 * MIB
    assert ddp_limits(None) == [MIB, 25 * MIB] and ddp_limits(4) == [4 * MIB]
    # iteration 0 is one bucket unless find_unused_parameters (compute_bucket_size_limits)
    cfg = _BucketCapacityConfig.create(None, None, False)
    assert cfg.compute_bucket_size_limits(False, False)[0][0] > 2**40
    assert cfg.compute_bucket_size_limits(True, True)[0][0] > 2**40
    assert cfg.compute_bucket_size_limits(False, True)[0] == [MIB, 25 * MIB]


def test_measured_layouts_equal_the_rule():
    """Experiment 2: every configuration, every iteration, N = 2 and 4: measured buckets = predicted_layout."""
    for n, run in _runs().items():
        m = run.measurements
        assert run.params["d"] == 512 and run.params["layers"] == 6  # the model the page describes
        assert sorted({p["bytes"] for p in m["model_params"]}) == [2048, MIB]  # 512·4 B bias, 512·512·4 B weight
        for lay in m["layouts"]:
            for it in range(len(lay["iterations"])):
                assert page.layout_matches(m, lay["label"], it), (n, lay["label"], it)
        by = {x["label"]: x["iterations"] for x in m["layouts"]}
        # the page's bullet points
        assert all(len(its[0]) == 1 for label, its in by.items() if "find_unused" not in label)
        assert [b["bytes"] for b in by["bucket_cap_mb=None"][1]][0] == m["default_first_bucket_bytes"] + 2048
        for cap in (0.25, 0.5, 1):
            assert len(by[f"bucket_cap_mb={cap}"][1]) == 8 and all(b["bytes"] > cap * MIB for b in by[f"bucket_cap_mb={cap}"][1])
        assert all(b["bytes"] >= 2 * MIB for b in by["bucket_cap_mb=2"][1][:-1])
        assert len(by["bucket_cap_mb=8"][1]) == len(by["bucket_cap_mb=16"][1]) == 1
        assert len(by["static_graph=True"][1]) == 1 and len(by["static_graph=True"][2]) == 2
        assert by["static_graph=True"][2] == by["bucket_cap_mb=None"][2]
        fu = by["find_unused_parameters=True"]
        assert fu[0] == fu[1] == fu[2] == fu[3]
        assert "head.weight" in fu[1][-1]["params"]  # the first-ready gradient sits in the last bucket
        assert page.grad_ready_order(m)[:2] == ["head.bias", "head.weight"]
        assert page.grad_ready_order(m)[-1].startswith("embed")
        assert "head.weight" in by["bucket_cap_mb=None"][1][0]["params"]
    # bucket layouts do not depend on N
    r = _runs()
    assert [x["iterations"] for x in r[2].measurements["layouts"]] == [x["iterations"] for x in r[4].measurements["layouts"]]


def test_closed_form_equals_queue_theorem_235():
    """Theorem 2.3.5: the queue's last end = max_j (r_j + Σ_{i≥j} c_i); both lower bounds hold."""
    rng = np.random.default_rng(2)
    for _ in range(200):
        k = int(rng.integers(1, 20))
        ready = np.sort(rng.uniform(0, 1, k))
        sizes = rng.uniform(1, 1e6, k)
        n, alpha, beta = int(rng.integers(2, 64)), rng.uniform(0, 1e-3), rng.uniform(0, 1e-6)
        pipe = bucket_pipeline(ready, sizes, n, alpha, beta, 1.0)
        c = ab.ring_allreduce_time(n, sizes, alpha, beta)
        closed = max(ready[j] + c[j:].sum() for j in range(k))
        assert pipe["end"][-1] == pytest.approx(closed, rel=1e-12)
        e = pipe["end"][-1] * (1 + 1e-12)
        assert e >= ready[-1] + c[-1] and e >= ready[0] + c.sum()
        # corollary 2.3.6: Σc = 2(N−1)kα + 2(N−1)/N·Sβ
        assert c.sum() == pytest.approx(2 * (n - 1) * k * alpha + 2 * (n - 1) / n * sizes.sum() * beta)


def test_overlap_timeline_claims():
    """Experiment 3: launches follow readiness, most before compute ends; completion after; backward waits."""
    m = _runs()[2].measurements
    t = page.timeline(m)
    assert len(t["buckets"]) == 8
    assert [b["index"] for b in t["buckets"]] == list(range(8))  # launched in bucket-index order
    assert all(0 <= d < 5e-3 for d in t["launch_after_ready"])
    assert t["launched_before_compute_end"] > len(t["buckets"]) / 2
    assert t["last_done"] > t["compute_end"] and t["backward_end"] >= t["last_done"]
    assert t["in_backward_median"] > t["standalone"]
    names = {r["name"] for r in m["profile"]["comm_events"]}
    assert any("all_reduce" in x for x in names)
    calls = {r["name"]: r["count"] for r in m["profile"]["comm_events"]}
    assert calls.get("gloo:all_reduce") == 8 * m["profile"]["steps"]  # one all_reduce per bucket per step
    assert any(r["name"] == "torch::distributed::reducer::mul_out" for r in m["profile"]["top"])


def test_tradeoff_prediction_terms():
    """Experiment 4 / corollary 2.3.6: the α term grows with k; one bucket hides nothing; CPU result labelled."""
    run = _runs()[2]
    rows = page.tradeoff_rows(run)
    f = page.fit(run.measurements, 2)
    assert f["alpha"] > 0 and f["beta"] > 0
    for r in rows:
        assert r["launch_alpha"] == pytest.approx(2 * 1 * r["buckets"] * f["alpha"])
        assert r["no_overlap"] >= r["step"]
    one = [r for r in rows if r["buckets"] == 1]
    assert one and all(0 <= r["exposed"] <= r["comm_total"] for r in one)
    assert max(r["exposed"] for r in rows) == max(r["exposed"] for r in one)  # one bucket: the longest tail
    assert {r["buckets"] for r in rows if r["cap"] in (8, 16)} == {1}
    ks = sorted({(r["buckets"], r["launch_alpha"]) for r in rows})
    assert all(a[1] < b[1] for a, b in zip(ks, ks[1:]))
    assert run.hardware["kind"] == "cpu" and "CPU" in run.label
    g = page.gap_summary(run)
    # the page: the measurement is longer than the contention-free model (the model underestimates)
    assert g["ratio_min"] > 1.0
    # the page: with the measured inputs T_b exceeds the last ready time, which is why one bucket's tail < its all-reduce
    assert g["t_b"] > g["last_ready"]
    assert all(r["exposed"] == pytest.approx(max(0.0, g["last_ready"] + r["comm_total"] - g["t_b"]))
               for r in one)
    # predicted minimum: the caps whose predicted step is smallest, recomputed from the rows
    best = min(r["step"] for r in rows)
    assert g["pred_argmin"] == [r["cap"] for r in rows if r["step"] == pytest.approx(best, rel=1e-9)]
    assert all(r["exposed"] == 0 for r in rows if r["cap"] in g["pred_argmin"]) or len(g["pred_argmin"]) == 1


def test_cells_are_fast():
    import time

    from tests.conftest import cell_budget

    t0 = time.perf_counter()
    run = _runs()[2]
    page.tradeoff_figure(run)
    page.timeline_figure(run.measurements, "x")
    page.sweep_rows(run.measurements)
    assert time.perf_counter() - t0 < 2 * cell_budget()


@pytest.mark.dist
def test_ddp_bench_tiny_preset_for_real(run_tiny):
    """The program runs for real (2 gloo processes): its layouts obey the rule, ranks stay bitwise equal."""
    data, took = run_tiny("ddp_bench", nproc=2, timeout=120)
    results.validate(data)
    m = data["measurements"]
    assert data["hardware"]["backend"] == "gloo" and data["hardware"]["world_size"] == 2
    for lay in m["layouts"]:
        for it in range(len(lay["iterations"])):
            assert page.layout_matches(m, lay["label"], it), (lay["label"], it)
    assert all(r["ranks_bitwise_equal"] for r in m["equivalence"]["rows"])
    assert len(m["timing"]["sweep"]) == len(data["params"]["caps"])


def test_solution_2_tail_minimised_at_n_star():
    """Problem 2: under T_c ≤ T_b/n_b the tail is T_c(n_b), smallest at n* = ⌊(T_b − 2(N−1)Sβ/N)/(2(N−1)α)⌋;
    the queue's tail over every k is smallest at n* or n* + 1, and equals T_c(k) for k ≤ n*."""
    for n, s, tb, alpha, beta in [(8, 2**30, 0.2, 20e-6, 1 / 10e9), (4, 2**28, 0.2, 200e-6, 1 / 5e9)]:
        n_star = int((tb - 2 * (n - 1) / n * s * beta) // (2 * (n - 1) * alpha))
        assert n_star >= 2
        tails = {}
        for k in range(1, 2 * n_star + 3):
            ready = np.arange(1, k + 1) * tb / k
            tails[k] = bucket_pipeline(ready, np.full(k, s / k), n, alpha, beta, tb)["exposed"]
            if k <= n_star:
                assert tails[k] == pytest.approx(ab.ring_allreduce_time(n, s / k, alpha, beta), rel=1e-9)
        assert min(tails, key=tails.get) in (n_star, n_star + 1)


def test_corollary_236_first_bucket_closes_no_earlier_with_a_larger_cap():
    """Corollary 2.3.6: a larger cap never closes the first bucket earlier (τ_1 does not decrease);
    the last bucket is a remainder, so its size is not monotone in the cap."""
    rng = np.random.default_rng(7)
    last_not_monotone = False
    for _ in range(300):
        s = rng.integers(1, 1000, size=rng.integers(2, 40))
        caps = sorted(rng.integers(1, 4000, size=2))
        b_small, b_large = assign_buckets(s, [int(caps[0])]), assign_buckets(s, [int(caps[1])])
        assert b_large[0][-1] >= b_small[0][-1]
        last_not_monotone |= s[b_large[-1]].sum() < s[b_small[-1]].sum()
    assert last_not_monotone

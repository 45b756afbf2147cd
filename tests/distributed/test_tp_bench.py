"""Distributed smoke run: tp_bench's tiny preset on 2 CPU processes (gloo): recorded bytes, tolerances.

The bytes are the ones the program recorded (CountingMode), checked against the layer's shapes from the
preset: with sequence parallelism each all-gather *outputs* and each reduce-scatter *inputs* the whole
activation, b·s·h·4 bytes (nccl-tests' S). A planted bug that counted the all-gather as its input shard
(b·s·h·4 / t) survived the other tests (shared/reviews/tests-audit.md)."""
import pytest

from snippets import results

pytestmark = pytest.mark.dist


def test_tp_bench_tiny_bytes_and_tolerances(run_tiny):
    data, _ = run_tiny("tp_bench", nproc=2, timeout=180)
    results.validate(data)
    p = data["params"]
    act = p["b"] * p["s"] * p["h"] * 4
    cases = {c["case"]: c for c in data["measurements"]["cases"]}
    sp = cases["block_sp"]
    for calls in (sp["forward_calls"], sp["backward_calls"]):
        ag = [b for name, b in calls if "all_gather" in name]
        rs = [b for name, b in calls if "reduce_scatter" in name]
        assert ag and rs, calls
        assert set(ag) == set(rs) == {act}, (calls, act)
    # Megatron MLP without SP: one all-reduce of the whole activation in forward (g), one in backward (f)
    mlp = cases["mlp"]
    assert mlp["forward"]["all_reduce"] == {"calls": 1, "bytes": act}
    assert mlp["backward"]["all_reduce"] == {"calls": 1, "bytes": act}
    # tolerance by dtype and reduction length, written into each case, and every case within it
    eps = 2.0 ** -23  # float32
    for c in cases.values():
        tol = c["tolerance"]
        k = max(4 * p["h"], p["b"] * p["s"])
        assert tol["dtype"] == "float32" and tol["eps"] == eps and tol["reduction_length"] == k
        assert tol["rel"] == pytest.approx(k * eps, rel=1e-3)
        for q, d in c["max_abs_diff"].items():
            assert d <= tol["abs"][q] == pytest.approx(tol["rel"] * c["ref_max_abs"][q]), (c["case"], q)
        assert c["within_tolerance_all_ranks"]

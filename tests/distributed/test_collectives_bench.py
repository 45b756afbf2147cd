"""Distributed smoke run: the collectives benchmark's tiny preset, 2 CPU processes, gloo."""
import pytest

from snippets import results

pytestmark = pytest.mark.dist


def test_collectives_bench_tiny(run_tiny):
    data, took = run_tiny("collectives_bench", nproc=2)
    assert took < 30
    results.validate(data)
    assert data["hardware"]["backend"] == "gloo" and data["hardware"]["world_size"] == 2
    ops = {m["op"] for m in data["measurements"]}
    assert ops == {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"}
    assert all(m["wrong"] == 0 for m in data["measurements"])
    for m in data["measurements"]:  # nccl-tests' method: spans of back-to-back calls, time per call = span / calls
        assert m["method"] == "back-to-back" and m["iters"] == m["spans"] * m["calls_per_span"]
    assert data["params"]["method"] == "back-to-back" and "back-to-back" in data["params"]["timing"]
    for m in data["measurements"]:  # nccl-tests definitions
        factor = {"all_reduce": 1.0, "broadcast": 1.0}.get(m["op"], 0.5)  # N = 2
        assert m["busbw_GBps"] == pytest.approx(m["algbw_GBps"] * factor)
        assert m["algbw_GBps"] == pytest.approx(m["bytes"] / (m["time_us_median"] * 1e-6) / 1e9)

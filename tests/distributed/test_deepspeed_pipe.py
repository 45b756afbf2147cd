"""Distributed smoke run: DeepSpeed PipelineModule (tiny preset) on 2 CPU processes, gloo."""
import pytest

from snippets import results
from snippets.common import pipeline_sim as ps

pytestmark = pytest.mark.dist


def test_deepspeed_pipe_tiny(run_tiny):
    data, _ = run_tiny("deepspeed_pipe", nproc=2, timeout=120)
    results.validate(data)
    m = data["measurements"]
    assert m["ranks"][0]["loss"] == pytest.approx(m["ref_loss"], rel=1e-6)
    for r in m["ranks"]:
        # what the engine executed is the planned TrainSchedule stream, flattened
        assert r["executed"] == [c for step in r["planned"] for c in step]
        # its forward/backward order is 1F1B's (k-th pass = micro-batch k)
        ops = [("F" if n == "ForwardPass" else "B") for n, _ in r["executed"] if n in ("ForwardPass", "BackwardPass")]
        want = [o for o, _, _ in ps.rank_order("1f1b", r["stage_id"], 2, m["m"])]
        assert ops == want
        assert r["num_pipe_buffers"] == max(2, min(2 - r["stage_id"], m["m"]))

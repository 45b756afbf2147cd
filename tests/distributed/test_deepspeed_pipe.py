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
        # the tied embedding / LM head (Ch4-03 experiment 5): parameters, ReduceTiedGrads, equal copies, one SGD step
        d, V, L = data["params"]["d"], data["params"]["vocab"], data["params"]["layers"]
        assert r["params"] == V * d + (L // 2) * (d * d + d)
        assert r["tied_grad_before_err"] < 1e-6 and r["tied_grad_after_err"] < 1e-6 and r["tied_weight_err"] < 1e-6
        # every boundary message is b·s·h·e bytes (rows · d · fp32)
        assert all(n == data["params"]["rows"] * d * 4 for _, _, n in r["sent"]) and len(r["sent"]) == m["m"]
    assert m["copies_max_diff"] == 0.0
    # DeepSpeed 0.19.8's fp32 clip norm over the pipe grid: stage 0's own norm only (runtime/utils.py:393)
    local = [r["clip_norms"][0][1] for r in m["ranks"]]
    assert m["ranks"][0]["clip_norms"][0][0] == pytest.approx(local[0], rel=1e-5)

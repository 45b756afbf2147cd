"""step_anatomy: the tiny preset for real (torchrun, 1 CPU process), the claims its results carry (the
ready order DDP's buckets assume, the window, F/B/W against the ordinary backward, FLOPs by
FlopCounterMode against the formula), a wrong W split fails the run, and the CUDA path's rule that
nothing synchronizes inside a gradient hook (a fake event clock, checked against autograd's own state)."""
from __future__ import annotations

import json
import re
import textwrap

import pytest

from snippets import results
from tests.conftest import ROOT, launch

pytestmark = pytest.mark.dist


def test_step_anatomy_tiny(run_tiny):
    data, took = run_tiny("step_anatomy", nproc=1)
    results.validate(data)
    p, m = data["params"], data["measurements"]
    L, S, T, h = p["layers"], p["stages"], p["tokens"], p["h"]
    assert p["parameters"] == L * 2 * 4 * h * h and p["dtype"] == "float32"
    t = m["timeline"]
    names = [f"{i}.{w}.weight" for i in range(L) for w in ("up", "down")]
    # every gradient's hook fired once per step, last layer first: the order DDP's reversed buckets assume
    assert t["hook_calls_per_step"] == [2 * L] * p["steps"]
    assert t["ready_order"] == names[::-1] and t["ready_order_is_reverse_of_parameters"]
    assert [r["name"] for r in t["params"]] == names[::-1]
    assert all(r["bytes"] == 4 * h * h * 4 for r in t["params"])
    for r in t["params"]:
        assert 0 <= r["ready_ms_min"] <= r["ready_ms_median"] <= r["ready_ms_max"]
    assert 0 <= t["first_ready_ms_median"] <= t["last_ready_ms_median"]
    assert max(r["ready_ms_max"] for r in t["params"]) <= max(t["backward_ms"])
    assert t["overlap_window_ms_median"] >= 0 and t["tail_ms_median"] >= 0
    # F / B / W per stage
    assert [r["stage"] for r in m["stages"]] == list(range(S))
    flops = (L // S) * 2 * (2 * T * h * 4 * h)
    for r in m["stages"]:
        assert r["blocks"] == L // S and r["matmul_flops_each"] == flops
        assert r["B_plus_W_ms"] == pytest.approx(r["B_ms_median"] + r["W_ms_median"])
    c = m["stages_check"]
    assert c["ok"] and c["max_rel_err_vs_BW"] <= c["tol"]
    assert c["flops_counted_stage0"] == {"F": flops, "B": flops, "W": flops}  # FlopCounterMode, not the formula
    impls = {r["impl"]: r for r in m["optimizer"]}
    assert set(impls) == {"fused", "foreach", "for-loop"} and all(r["supported"] for r in impls.values())
    for r in impls.values():
        assert r["bytes_min"] == 7 * p["parameters"] * 4 and r["state_bytes"] == 2 * p["parameters"] * 4


CORRUPT = textwrap.dedent('''
    """step_anatomy with every W-split weight gradient doubled."""
    import sys
    sys.path.insert(0, {root!r})
    from gpu_runs import harness, step_anatomy as sa

    real = sa.stage_weight_grads
    sa.stage_weight_grads = lambda *a: [2 * g for g in real(*a)]
    sys.exit(harness.main(sa.PROGRAM, sa.__doc__, sa.PRESETS, sa.measure, script=sa.__file__,
                          check=sa.check, allowed_world_sizes={{1}}))
''')


def test_a_wrong_weight_gradient_split_fails_the_run(tmp_path):
    script = tmp_path / "corrupt_split.py"
    script.write_text(CORRUPT.format(root=str(ROOT)))
    out = tmp_path / "out"
    proc, _ = launch(str(script), 1, ["--preset", "tiny", "--out", out], timeout=120, check=False)
    assert proc.returncode != 0 and re.search(r"exitcode\s*:\s*1\b", proc.stderr), proc.stderr[-2000:]
    [f] = out.glob("*.json")
    c = json.loads(f.read_text())["measurements"]["stages_check"]
    assert c["ok"] is False and c["max_rel_err_vs_BW"] == pytest.approx(1.0, rel=1e-3)


def test_cuda_path_records_in_hooks_and_synchronizes_only_after_the_step(monkeypatch):
    """backward_timeline with a clock that behaves like CUDA events: every gradient hook records a mark
    while autograd is inside backward (torch._C._current_graph_task_id() != -1), and the one
    synchronize (resolve, and any torch.cuda.synchronize) happens outside backward, after every step."""
    import torch

    from gpu_runs import step_anatomy as sa

    in_backward = lambda: torch._C._current_graph_task_id() != -1  # noqa: E731

    class Ev:
        def __init__(self, t, inside):
            self.t, self.inside = t, inside

        def synchronize(self):

            pass


        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    class FakeCuda(sa.harness.Clock):
        def __init__(self):
            self.cuda, self.marks, self.syncs = True, [], []

        def mark(self):
            import time

            e = Ev(time.perf_counter(), in_backward())
            self.marks.append(e)
            return e

        def resolve(self):
            self.syncs.append(in_backward())

    cuda_syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: cuda_syncs.append(in_backward()))
    cfg = {"h": 16, "layers": 3, "tokens": 8}
    blocks = sa.make_stack(cfg, "cpu", torch.float32)
    x, target = torch.randn(8, 16), torch.randn(8, 16)
    opt = torch.optim.Adam(blocks.parameters(), lr=1e-3)
    clock = FakeCuda()
    t = sa.backward_timeline(blocks, x, target, opt, clock, warmup=1, steps=2)
    inside = [e for e in clock.marks if e.inside]
    assert len(inside) == 2 * 3 * (1 + 2)  # one per parameter per step, recorded inside backward
    assert clock.syncs == [False] and not any(cuda_syncs)  # one synchronize, outside backward
    assert t["hook_calls_per_step"] == [6, 6]
    # hooks are removed afterwards: a later backward records nothing
    n = len(clock.marks)
    torch.nn.functional.mse_loss(sa.run(blocks, x), target).backward()
    assert len(clock.marks) == n

"""The harness and the shared program code, run for real (torchrun, 2 CPU processes, gloo).

- a program that needs N >= 2 processes refuses 1 with exit code 2 and a message;
- the collectives benchmark's correctness check sees a corrupted result (wrong > 0, exit != 0);
- CommCounter's exact ops and bytes for a tiny FSDP2 step plus the calls DeepSpeed's ZeRO makes.
"""
from __future__ import annotations

import json
import re
import textwrap

import pytest

from tests.conftest import ROOT, launch

pytestmark = pytest.mark.dist

MIN_WORLD = re.compile(r"harness\.(?:init|main)\([^)]*min_world_size=(\d+)")  # the regex scripts/runs.py reads


def _min_world(program: str) -> int:
    m = MIN_WORLD.search((ROOT / "gpu_runs" / f"{program}.py").read_text(encoding="utf-8"))
    return int(m.group(1)) if m else 1


def _programs_needing(n: int) -> list[str]:
    out = []
    for p in sorted((ROOT / "gpu_runs").glob("*.py")):
        if p.stem in ("harness", "comm_counter", "__init__"):  # modules, not programs
            continue
        text = p.read_text(encoding="utf-8")
        if _min_world(p.stem) >= n and "needs CUDA" not in text:  # GPU-only programs refuse CPU first
            out.append(p.stem)
    return out


def test_some_programs_need_two_processes():
    assert "collectives_bench" in _programs_needing(2)


def test_one_process_is_refused_with_exit_2_under_torchrun():
    """End to end once: torchrun reports the worker's own exit code 2 and the message."""
    program = "collectives_bench"
    proc, took = launch(f"gpu_runs/{program}.py", 1, ["--preset", "tiny", "--no-save"], timeout=120, check=False)
    assert proc.returncode != 0
    # torchrun exits 1 and reports the worker's own exit code
    assert re.search(r"exitcode\s*:\s*2\b", proc.stderr), proc.stderr[-2000:]
    assert f"error: this program needs a world size of at least {_min_world(program)}, got 1" in proc.stderr


SWEEP = textwrap.dedent('''
    """Run each program as __main__ with torchrun's environment for one process; print its exit code."""
    import io, json, os, runpy, sys, contextlib
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="1", CUDA_VISIBLE_DEVICES="")
    out = {}
    for path in sys.argv[1:]:
        err = io.StringIO()
        sys.argv = [path, "--preset", "tiny", "--no-save"]
        code = None
        with contextlib.redirect_stderr(err):
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as e:
                code = e.code
        out[path] = {"code": code, "stderr": err.getvalue()[-2000:]}
    print(json.dumps(out))
''')


def test_every_program_needing_two_processes_refuses_one_with_exit_2(tmp_path):
    """Every such program, each run as its own __main__ in one Python process (one torch import instead of
    a torchrun launch per program): exit code 2 and the message, before any process group exists."""
    import os
    import subprocess
    import sys

    programs = _programs_needing(2)
    assert len(programs) >= 10
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, str(script), *[str(ROOT / "gpu_runs" / f"{p}.py") for p in programs]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for program in programs:
        r = got[str(ROOT / "gpu_runs" / f"{program}.py")]
        assert r["code"] == 2, (program, r)
        assert f"error: this program needs a world size of at least {_min_world(program)}, got 1" in r["stderr"], (program, r)


CORRUPT = textwrap.dedent('''
    """Run collectives_bench with every all_reduce result on rank 1 corrupted in one element."""
    import sys
    sys.path.insert(0, {root!r})
    import torch.distributed as dist
    from gpu_runs import collectives_bench as cb

    real = cb.run_op

    def corrupted(op, inp, out):
        res = real(op, inp, out)
        if op == "all_reduce" and dist.get_rank() == 1:
            res.view(-1)[-1] += 1
        return res

    cb.run_op = corrupted
    sys.exit(cb.main())
''')


def test_collectives_bench_detects_a_wrong_result(tmp_path):
    script = tmp_path / "corrupt_bench.py"
    script.write_text(CORRUPT.format(root=str(ROOT)))
    out = tmp_path / "out"
    proc, _ = launch(str(script), 2, ["--preset", "tiny", "--ops", "all_reduce,broadcast", "--out", out],
                     timeout=120, check=False)
    assert proc.returncode != 0, "a benchmark with wrong results must fail"
    assert re.search(r"exitcode\s*:\s*1\b", proc.stderr) and "wrong elements" in proc.stderr, proc.stderr[-2000:]
    [f] = out.glob("*.json")
    rows = json.loads(f.read_text())["measurements"]
    for r in rows:  # one corrupted element per checked call, on one rank, all_reduce only
        assert r["checked_calls"] >= 1
        assert r["wrong"] == (r["checked_calls"] if r["op"] == "all_reduce" else 0), r
    assert {r["op"] for r in rows} == {"all_reduce", "broadcast"}


COUNT = textwrap.dedent('''
    """A tiny step whose collectives are known exactly: FSDP2 forward+backward, then the calls
    DeepSpeed's ZeRO makes through torch.distributed (all_gather_into_tensor, reduce_scatter_tensor,
    all_reduce, broadcast). Rank 0 prints what CommCounter recorded."""
    import json, sys, warnings
    sys.path.insert(0, {root!r})
    import torch, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from gpu_runs.comm_counter import CommCounter

    dist.init_process_group("gloo")
    n = dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 6, bias=False))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    x = torch.randn(4, 8)
    with CommCounter() as fwd:
        y = model(x)
    with CommCounter() as bwd:
        y.sum().backward()
    flat = torch.zeros(10 * n)
    with CommCounter() as zero, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch 2.13 deprecates the two names DeepSpeed calls
        dist.all_gather_into_tensor(flat, torch.ones(10))
        dist.reduce_scatter_tensor(torch.empty(10), flat)
        dist.all_reduce(torch.ones(7))
        dist.broadcast(torch.ones(5), src=0)
    if dist.get_rank() == 0:
        print("COUNTS " + json.dumps({{"world": n, "units": [layer.weight.numel() for layer in model],
                                     "fwd": fwd.calls, "bwd": bwd.calls, "zero": zero.calls}}))
    dist.destroy_process_group()
    # gloo's worker threads can abort the interpreter's own shutdown ("terminate called without an active
    # exception", seen once in CI after the counts were printed): leave without it
    sys.stdout.flush()
    import os
    os._exit(0)
''')


def test_comm_counter_exact_ops_and_bytes_of_a_tiny_run(tmp_path):
    script = tmp_path / "count_tiny.py"
    script.write_text(COUNT.format(root=str(ROOT)))
    proc, _ = launch(str(script), 2, timeout=120)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("COUNTS "))
    got = json.loads(line[len("COUNTS "):])
    n, units = got["world"], got["units"]
    assert n == 2 and units == [64, 48]  # both divisible by N: no padding
    f32 = 4
    # FSDP2 (reshard_after_forward=True): one all-gather of each unit's full parameters in forward,
    # again in backward (reverse order), and one reduce-scatter of each unit's full gradient.
    ag = "all_gather_single"
    rs = "reduce_scatter_single"
    assert [tuple(c) for c in got["fwd"]] == [(ag, u * f32) for u in units]
    assert sorted(tuple(c) for c in got["bwd"]) == sorted([(ag, u * f32) for u in units] + [(rs, u * f32) for u in units])
    fwd_bwd_bytes = sum(b for _, b in got["fwd"] + got["bwd"])
    assert fwd_bwd_bytes == 3 * f32 * sum(units)  # ZeRO-3's 3ψ (in bytes), counted once each
    assert [tuple(c) for c in got["zero"]] == [
        ("all_gather_into_tensor", 10 * n * f32), ("reduce_scatter_tensor", 10 * n * f32),
        ("all_reduce", 7 * f32), ("broadcast", 5 * f32)]

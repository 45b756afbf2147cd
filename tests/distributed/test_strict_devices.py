"""HARNESS_CHECK_DEVICES=1 (gpu_runs/harness.py strict mode), run for real: 2 CPU processes, gloo.

Under NCCL a collective on a CPU tensor crashes ("No backend type associated with device type cpu"); on
gloo it runs, so a CPU test cannot see it. In strict mode every tensor a CUDA run would hold on the host
(created without device=, or by .cpu()) is marked, and torch.distributed's collectives refuse it. The
review's two crashes (zero_bench's and sp_activation_bench's timed steps all-reduced
torch.tensor([t]) without a device) fail this way; the programs as they are now pass it.
"""
from __future__ import annotations

import textwrap

import pytest

from snippets import results
from tests.conftest import ROOT, launch

pytestmark = pytest.mark.dist

PLANTED = textwrap.dedent('''
    """The reviewed bug in a minimal program: a timing all-reduced from a tensor made without device=."""
    import sys, time
    sys.path.insert(0, {root!r})
    import torch, torch.distributed as dist
    from gpu_runs import harness

    def measure(env, cfg, args):
        t = torch.tensor([time.perf_counter()], dtype=torch.float64)   # zero_bench.py:301 before the fix
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return {{}}, {{}}

    sys.exit(harness.main("strict_probe", __doc__, {{"tiny": {{}}, "full": {{}}}}, measure, script=__file__))
''')


def test_strict_mode_fails_the_reviewed_bug(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CHECK_DEVICES", "1")
    script = tmp_path / "strict_probe.py"
    script.write_text(PLANTED.format(root=str(ROOT)))
    proc, _ = launch(str(script), 2, ["--preset", "tiny", "--no-save"], timeout=120, check=False)
    assert proc.returncode != 0
    assert "DeviceError: all_reduce" in proc.stderr and "created without device=env.device" in proc.stderr


@pytest.mark.parametrize("program,extra", [
    ("zero_bench", ["--stages", "1"]),       # the timed step's all_reduce (review §2.1)
    ("sp_activation_bench", []),             # the timed forward+backward's all_reduce (review §2.1)
    ("offload_bench", []),                   # its per-step times were all-reduced the same way, behind an if
])
def test_programs_pass_strict_mode(run_tiny, monkeypatch, program, extra):
    monkeypatch.setenv("HARNESS_CHECK_DEVICES", "1")
    data, _ = run_tiny(program, nproc=2, extra=extra, timeout=240)
    results.validate(data)

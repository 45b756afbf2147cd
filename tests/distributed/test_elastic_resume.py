"""Distributed run: torchrun --max-restarts=1 with a rank killed (tiny preset, 2 CPU processes); every process it
started is gone afterwards, even when the run fails."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snippets import results
from tests.conftest import ROOT, SMOKE_BUDGET_S, slowdown

pytestmark = pytest.mark.dist


def _processes_mentioning(token: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if token in (d / "cmdline").read_bytes().decode(errors="ignore"):
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def test_elastic_resume_tiny(tmp_path):
    out = tmp_path / "elastic"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "gpu_runs/elastic_resume.py", "--preset", "tiny", "--out", str(out), "--timeout", "150"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=200)
    finally:   # whatever happened: kill the driver's whole session (torchrun and its workers included)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        time.sleep(0.5)
        left = _processes_mentioning(str(out))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not left, f"processes left behind: {left}"
    took = time.perf_counter() - t0
    assert proc.returncode == 0, stderr[-3000:]
    files = sorted(out.glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    results.validate(data)
    m = data["measurements"]
    assert m["restart_count"] == 1 and m["bitwise_equal"] and m["resumed"] == m["uninterrupted"]
    # two torchrun start-ups (the attempt killed, the restart): twice the smoke budget
    assert took / slowdown() < 2 * SMOKE_BUDGET_S, f"took {took:.1f} s at slowdown {slowdown():.2f}"

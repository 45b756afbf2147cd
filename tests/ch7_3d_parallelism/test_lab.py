"""Chapter 7 lab: it runs on CPU in about a minute, and the 2×2 mesh's bytes and counts equal the plan (the lab prints the checks)."""
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, slowdown

LAB = ROOT / "docs" / "ch7-3d-parallelism" / "lab.py"


@pytest.mark.dist
def test_lab_runs_and_the_run_matches_the_plan():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(LAB)], cwd=LAB.parent, env=env, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "TP 가 node 안 (intra) 인가, 상위 5 개 모두: True" in out
    assert "선택: d = 2, t = 2" in out
    assert out.count("→ True;") == 4
    assert "계획과 측정이 모든 rank 에서 맞는가: True" in out
    assert took / slowdown() < 90, f"lab took {took:.1f} s (slowdown {slowdown():.2f}); about a laptop minute is the budget"

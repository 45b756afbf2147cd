"""Chapter 6 lab: it runs on CPU in about a minute, and its measured bytes equal the formulas (the lab asserts them)."""
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, slowdown

LAB = ROOT / "docs" / "ch6-activation-memory" / "lab.py"


def test_lab_runs_and_its_counts_equal_the_formulas():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(LAB)], cwd=LAB.parent, env=env, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "설명된 차이 0: True" in out
    assert "저장 == L·A: True | block 단위 == L·c: True | selective == L·(A − 6as²b): True" in out
    assert out.count("bit 단위로 같은가 True") == 3
    assert took / slowdown() < 60, f"lab took {took:.1f} s (slowdown {slowdown():.2f}); a laptop minute is the budget"

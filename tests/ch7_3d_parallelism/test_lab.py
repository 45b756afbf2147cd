"""Chapter 7 lab: it runs on CPU in about a minute, and the 2×2 mesh's bytes and counts equal the plan (the lab prints the checks)."""
import pytest

from tests.conftest import ROOT, run_lab_script

LAB = ROOT / "docs" / "ch7-3d-parallelism" / "lab.py"


@pytest.mark.dist
def test_lab_runs_and_the_run_matches_the_plan():
    out = run_lab_script(LAB, budget_s=90)  # about a laptop minute
    assert "TP 가 node 안 (intra) 인가, 상위 5 개 모두: True" in out
    assert "선택: d = 2, t = 2" in out
    assert out.count("→ True;") == 4
    assert "계획과 측정이 모든 rank 에서 맞는가: True" in out

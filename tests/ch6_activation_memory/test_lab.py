"""Chapter 6 lab: it runs on CPU in about a minute, and its measured bytes equal the formulas (the lab asserts them)."""
from tests.conftest import ROOT, run_lab_script

LAB = ROOT / "docs" / "ch6-activation-memory" / "lab.py"


def test_lab_runs_and_its_counts_equal_the_formulas():
    out = run_lab_script(LAB, budget_s=60)  # a laptop minute
    assert "설명된 차이 0: True" in out
    assert "저장 == L·A: True | block 단위 == L·c: True | selective == L·(A − 6as²b): True" in out
    assert out.count("bit 단위로 같은가 True") == 3

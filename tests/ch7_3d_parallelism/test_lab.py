"""Chapter 7 lab: it runs on CPU in about a minute, measures two real 4-process layouts and finds every rank's
collectives equal to the prediction printed before the runs (the lab prints the checks, in Korean)."""
import pytest

from tests.conftest import ROOT, run_lab_script

LAB = ROOT / "docs" / "ch7-3d-parallelism" / "lab.py"


@pytest.mark.dist
def test_lab_predicts_then_measures_two_layouts():
    out = run_lab_script(LAB, budget_s=90)  # about a laptop minute
    assert out.count("TP 는 모두 node 안: True") == 2
    assert out.index("배치 A (d, p, t) = (2, 1, 2), stage 0: TP all-reduce") < out.index("배치 A: mesh")  # prediction first
    assert "배치 A: 예측과 측정이 모든 rank 에서 같은가: True" in out
    assert "배치 B: 예측과 측정이 모든 rank 에서 같은가: True" in out
    assert out.count("→ 예측과 같은가 True") == 8 and "예측과 같은가 False" not in out
    assert "이 작은 모델에서는 A 가 더 많이 옮깁니다." in out

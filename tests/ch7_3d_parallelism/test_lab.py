"""Chapter 7 lab: it runs on CPU in about a minute, measures two real 4-process layouts and finds every rank's
collectives equal to the prediction printed before the runs (the lab prints the checks, in Korean); its bytes → time
cell is recomputed here from the measured bytes it prints, with a hand-written ring α-β."""
import re

import pytest

from snippets.common import planner_3d as pl
from tests.conftest import ROOT, run_lab_script

LAB = ROOT / "docs" / "ch7-3d-parallelism" / "lab.py"


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _check_bytes_to_time(out: str) -> None:
    """The new cell's per-layout times and its reading, recomputed from the calls and bytes it prints, which must be
    rank 0's measured ones (section 4's line for rank 0). Ring over n = 2: AllReduce 2(n−1)α + 2(n−1)/n·S/BW per call,
    AllGather / ReduceScatter (n−1)α + (n−1)/n·S/BW, a send α + S/BW; links: Ch7-01's H100 NVLink and NIC."""
    c, n = pl.H100_64, 2
    link = {"intra": (c.alpha_intra, c.intra_bw), "inter": (c.alpha_inter, c.inter_bw)}
    place = {"TP 가 node 안": ("intra", "inter"), "TP 가 node 밖": ("inter", "intra")}
    pat = re.compile(r"배치 (A|B), (TP 가 node 안|TP 가 node 밖): TP (\d+) 번 ([\d,]+) B → ([\d.]+) µs, "
                     r"(DP|PP) (\d+) 번 ([\d,]+) B → ([\d.]+) µs; 합 ([\d.]+) µs")
    rows = pat.findall(out)
    assert len(rows) == 4
    secs = {}
    for k, where, tp_calls, tp_bytes, tp_us, axis, o_calls, o_bytes, o_us, total_us in rows:
        # the bytes are the measured ones section 4 printed for rank 0
        m = re.search(rf"배치 {k}, rank 0 \(.*?\): TP (\d+) 번 ([\d,]+) B", out)
        assert (int(tp_calls), _num(tp_bytes)) == (int(m.group(1)), _num(m.group(2)))
        (al_t, bw_t), (al_o, bw_o) = link[place[where][0]], link[place[where][1]]
        tp = int(tp_calls) * 2 * (n - 1) * al_t + 2 * (n - 1) / n * _num(tp_bytes) / bw_t
        if axis == "DP":
            o = int(o_calls) * (n - 1) * al_o + (n - 1) / n * _num(o_bytes) / bw_o
        else:
            o = int(o_calls) * al_o + _num(o_bytes) / bw_o
        assert float(tp_us) == pytest.approx(tp * 1e6, abs=0.006) and float(o_us) == pytest.approx(o * 1e6, abs=0.006)
        assert float(total_us) == pytest.approx((tp + o) * 1e6, abs=0.011)
        secs[where, k] = tp + o
        assert {"A": "DP", "B": "PP"}[k] == axis
    a_sum = sum(_num(r[3]) + _num(r[7]) for r in rows if r[0] == "A" and r[1] == "TP 가 node 안")
    b_sum = sum(_num(r[3]) + _num(r[7]) for r in rows if r[0] == "B" and r[1] == "TP 가 node 안")
    more = "A" if a_sum > b_sum else "B"
    assert f"bytes 로는 {more} 가 더 많이 옮깁니다 ({max(a_sum, b_sum):,} 대 {min(a_sum, b_sum):,} B)" in out
    flips = False
    for where in place:
        fast = min("AB", key=lambda k: secs[where, k])
        ratio = max(secs[where, "A"], secs[where, "B"]) / min(secs[where, "A"], secs[where, "B"])
        assert f"{where}일 때 {fast} 가 {ratio:.1f} 배" in out
        flips |= fast == more
    assert ("더 빠른 배치는 뒤집히지 않습니다" in out) == (not flips)


@pytest.mark.dist
def test_lab_predicts_then_measures_two_layouts():
    out = run_lab_script(LAB, budget_s=90)  # about a laptop minute
    assert out.count("TP 는 모두 node 안: True") == 2
    assert out.index("배치 A (d, p, t) = (2, 1, 2), stage 0: TP AllReduce") < out.index("배치 A: mesh")  # prediction first
    assert "배치 A: 예측과 측정이 모든 rank 에서 같은가: True" in out
    assert "배치 B: 예측과 측정이 모든 rank 에서 같은가: True" in out
    assert out.count("→ 예측과 같은가 True") == 8 and "예측과 같은가 False" not in out
    assert "이 작은 모델에서는 A 가 더 많이 옮깁니다." in out
    _check_bytes_to_time(out)
    assert not re.search(r"all-reduce|all-gather|reduce-scatter", out, re.I)  # the book's spelling in printed text

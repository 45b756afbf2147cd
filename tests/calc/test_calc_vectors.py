"""The browser calculators compute what the book's Python computes (issue 14).

Python (snippets/calc.py, which only composes the shared formula modules) writes the test vectors;
Node runs the served JavaScript (docs/assets/calc/*.js) on them; any difference beyond floating-point
rounding fails. The 3D planner's vectors exist only where snippets/common/planner_3d.py does (Ch7):
that check is skipped, not passed, when the module is absent.
"""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from snippets import book, calc

ROOT = book.ROOT
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
RUNNER = ROOT / "tests" / "calc" / "run_vectors.mjs"


def run_node(vec: dict, tmp_path) -> dict:
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(vec), encoding="utf-8")
    proc = subprocess.run([NODE, "--disable-warning=MODULE_TYPELESS_PACKAGE_JSON", str(RUNNER), str(path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def vectors():
    return calc.vectors()


def test_javascript_matches_python_on_every_vector(vectors, tmp_path):
    res = run_node(vectors, tmp_path)
    assert res["n_mismatches"] == 0, res["mismatches"]
    # every number and flag of every case was compared (not an empty run)
    assert len(vectors["memory"]) >= 40 and len(vectors["pipeline"]) >= 50
    assert res["checked"] > 10_000


def test_the_comparison_catches_a_difference(vectors, tmp_path):
    """A vector nudged by one part in 10⁶, or a flipped verdict, is reported: the check is not vacuous."""
    bad = json.loads(json.dumps(vectors))
    bad["memory"][3]["out"]["activations"] *= 1 + 1e-6
    bad["memory"][5]["out"]["fits"] = not bad["memory"][5]["out"]["fits"]
    bad["pipeline"][7]["out"]["actions"][0][-1][5] += 0.5
    bad["pipeline"][9]["out"]["inflight"][0] += 1
    res = run_node(bad, tmp_path)
    paths = [m["path"] for m in res["mismatches"]]
    assert res["n_mismatches"] == 4, paths
    assert any(p.startswith("memory[3].activations") for p in paths)
    assert any(p.startswith("memory[5].fits") for p in paths)


def test_vectors_cover_every_schedule_stage_and_recompute_policy(vectors):
    assert {c["in"]["schedule"] for c in vectors["pipeline"]} == set(calc.PIPE_SCHEDULES)
    assert {c["in"]["stage"] for c in vectors["memory"]} == {0, 1, 2, 3}
    assert {c["in"]["recompute"] for c in vectors["memory"]} == {"none", "selective", "full"}
    assert {c["out"]["fits"] for c in vectors["memory"]} == {True, False}


def test_memory_estimate_is_the_sum_of_the_book_formulas(vectors):
    """Independent route: ZeRO total from zero_memory_bytes (Ch5 Thm) and the activations from
    Korthikanti's Table 2 closed forms (Ch6), against the term-by-term composition the JS ports."""
    from snippets.common import activation_memory as am
    from snippets.common import zero_memory as zm

    table2 = {(False, "none"): lambda s, b, h, a, t: am.tensor_parallel(s, b, h, a, t),
              (True, "none"): am.tensor_sequence_parallel,
              (False, "selective"): lambda s, b, h, a, t: am.tensor_parallel_selective(s, b, h, a, t),
              (True, "selective"): lambda s, b, h, a, t: am.tensor_sequence_parallel_selective(s, b, h, a, t)}
    checked = 0
    for c in vectors["memory"]:
        i, o = c["in"], c["out"]
        states = zm.zero_memory_bytes(i["psi"] / i["t"], i["n"], i["stage"], i["k"])
        assert o["params"] + o["grads"] + o["optimizer"] == pytest.approx(states, rel=1e-12)
        if i["act_bytes"] != 2 or i["mask_bytes"] != 1:
            continue
        s, b, h, a, t = i["s"], i["b"], i["h"], i["a"], i["t"]
        per_layer = (am.full_recompute(s, b, h) if i["recompute"] == "full"
                     else table2[(i["sp"] and t > 1, i["recompute"])](s, b, h, a, t))
        assert o["activations"] == pytest.approx(per_layer * i["layers"], rel=1e-12)
        assert o["fits"] == (o["total"] <= i["capacity_gib"] * 2 ** 30)
        checked += 1
    assert checked >= 40


def test_planner_vectors(tmp_path):
    if not calc.planner_available():
        pytest.skip("snippets/common/planner_3d.py (Ch7) is not on this branch: 3D planner vectors not checked")
    vec = {"memory": [], "pipeline": [], "planner": calc.planner_vectors()}
    res = run_node(vec, tmp_path)
    assert res["n_mismatches"] == 0, res["mismatches"]

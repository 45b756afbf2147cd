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
    assert len(vectors["memory"]) >= 80 and len(vectors["pipeline"]) >= 50 and len(vectors["pipeline_view"]) >= 28
    assert res["checked"] > 20_000


def test_the_comparison_catches_a_difference(vectors, tmp_path):
    """A vector nudged by one part in 10⁶, or a flipped verdict, is reported: the check is not vacuous."""
    bad = json.loads(json.dumps(vectors))
    bad["memory"][3]["out"]["activations"] *= 1 + 1e-6
    bad["memory"][5]["out"]["fits"] = not bad["memory"][5]["out"]["fits"]
    bad["pipeline"][7]["out"]["actions"][0][-1][5] += 0.5
    bad["pipeline"][9]["out"]["inflight"][0] += 1
    bad["pipeline_view"][4]["out"]["chunk_t"][0] *= 2          # a per-chunk time in the wrong unit
    pp = next(i for i, c in enumerate(bad["memory"]) if c["in"].get("p", 1) > 1)
    bad["memory"][pp]["out"]["rank_totals"][-1] *= 1 + 1e-6    # one pipeline rank's bytes
    res = run_node(bad, tmp_path)
    paths = [m["path"] for m in res["mismatches"]]
    assert res["n_mismatches"] == 6, paths
    assert any(p.startswith("pipeline_view[4]") for p in paths)
    assert any(p.startswith("memory[3].activations") for p in paths)
    assert any(p.startswith("memory[5].fits") for p in paths)


def test_vectors_cover_every_schedule_stage_and_recompute_policy(vectors):
    assert {c["in"]["schedule"] for c in vectors["pipeline"]} == set(calc.PIPE_SCHEDULES)
    assert {c["in"]["stage"] for c in vectors["memory"]} == {0, 1, 2, 3}
    assert {c["in"]["recompute"] for c in vectors["memory"]} == {"none", "selective", "full"}
    assert {c["out"]["fits"] for c in vectors["memory"]} == {True, False}
    assert {c["in"].get("schedule", "1f1b") for c in vectors["memory"] if c["in"].get("p", 1) > 1} == \
        {"1f1b", "interleaved", "gpipe"}
    assert {c["in"].get("grad_bytes", 2) for c in vectors["memory"]} == {2, 4}
    assert {c["in"].get("with_activations", True) for c in vectors["memory"]} == {True, False}
    assert any(not calc.gpt_shape(c["in"]["h"], c["in"]["a"], c["in"].get("kv_heads", 0), c["in"].get("ffn", 0),
                                  c["in"].get("swiglu", False), c["in"].get("dropout", True)) for c in vectors["memory"])
    assert {c["in"]["schedule"] for c in vectors["pipeline_view"]} == set(calc.PIPE_SCHEDULES)


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
        if any(k in i for k in ("p", "vocab", "grad_bytes", "with_activations", "kv_heads", "ffn", "swiglu", "dropout")):
            continue  # the pipeline, embedding and shape cases: test_pipeline_ranks_by_hand
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


def test_pipeline_ranks_by_hand(vectors):
    """The memory cases with p > 1, recomputed here from the book's closed forms without calc.py's helpers:
    1F1B rank r keeps min(p − r, m) micro-batches of L/p layers (Ch4-03), interleaved rank 0 keeps
    pA(1 + (p−1)/(pv)) (Ch4-04 Theorem, pipeline_sim.interleaved_first_rank_memory) unless m·v caps it, GPipe m;
    the parameters of all ranks add up to ψ; fp32 gradients are twice the 16-bit ones; activations off leaves
    the model states."""
    from snippets.common import pipeline_sim as ps
    from snippets.common import zero_memory as zm

    seen = set()
    for c in vectors["memory"]:
        i, o = c["in"], c["out"]
        p = i.get("p", 1)
        if p == 1 and not i.get("vocab"):
            continue
        m, v, L, sch = i.get("m", 1), i.get("v", 1), i["layers"], i.get("schedule", "1f1b")
        r = o["rank"]
        assert o["rank_totals"][r] == max(o["rank_totals"])
        want_units = {"1f1b": min(p - r, m), "gpipe": m,
                      "interleaved": min(2 * (p - 1 - r) + (v - 1) * p + 1, m * v) / v}[sch]
        assert o["inflight"] == pytest.approx(want_units, rel=1e-12)
        if sch == "interleaved" and r == 0 and m * v >= 2 * (p - 1) + (v - 1) * p + 1:
            assert o["inflight"] == pytest.approx(float(ps.interleaved_first_rank_memory(p, v)), rel=1e-12)
            assert o["inflight"] == pytest.approx(p * (1 + (p - 1) / (p * v)), rel=1e-12)
            seen.add("Ch4-04")
        act_on = i.get("with_activations", True)
        assert o["activations"] == pytest.approx(o["per_layer"] * L / p * want_units if act_on else 0.0, rel=1e-12)
        # parameters on the fullest rank: its L/p layers' share of ψ − 2Vh, plus V·h on the first and on the last rank
        Vh = i.get("vocab", 0) * i["h"]
        n_rank = (i["psi"] - 2 * Vh) / p + Vh * (r == 0) + Vh * (r == p - 1)
        sharded = n_rank / i["t"] / (i["n"] if i["stage"] >= 3 else 1)
        assert o["params"] == pytest.approx(zm.PARAM_BYTES * sharded, rel=1e-12)
        g = i.get("grad_bytes", 2)
        assert o["grads"] == pytest.approx(g * n_rank / i["t"] / (i["n"] if i["stage"] >= 2 else 1), rel=1e-12)
        assert o["model_states"] == pytest.approx(o["params"] + o["grads"] + o["optimizer"], rel=1e-12)
        assert o["total"] == pytest.approx(o["model_states"] + o["activations"] + o["logits"], rel=1e-12)
        assert sum(calc.stage_parameters(i["psi"], p, k, i.get("vocab", 0), i["h"]) for k in range(p)) == \
            pytest.approx(i["psi"], rel=1e-12)
        seen.add(sch)
    assert seen >= {"1f1b", "interleaved", "gpipe", "Ch4-04"}


def test_shaped_layers_use_ch7s_terms_and_gpt_layers_ch6s():
    """Llama-shaped layers (GQA, SwiGLU, no dropout) come from planner_3d's terms; the GPT layer from Korthikanti's."""
    from snippets.common import activation_memory as am
    from snippets.common import planner_3d as pl

    got = calc.layer_activation(8192, 1, 8192, 64, 8, True, "selective", kv_heads=8, ffn=28672, swiglu=True,
                                dropout=False)
    m = pl.Model(layers=80, hidden=8192, heads=64, seq=8192, vocab=128256, psi=70e9, ffn=28672,
                                 kv_heads=8, swiglu=True, dropout=False)
    assert got == pl.layer_activation_bytes(m, 1, 8, "selective", pl.Assumptions())
    # by hand: 2sbh(2 + 1 + 1 + 2·(8/64) + 1 + 1 + 4·28672/8192)/t, no masks, no core (selective)
    sbh = 8192 * 8192
    assert got == pytest.approx(2 * sbh * (2 + 1 + 1 + 2 * 8 / 64 + 1 + 1 + 4 * 28672 / 8192) / 8, rel=1e-12)
    assert m.kv_heads == 8
    assert calc.layer_activation(2048, 1, 12288, 96, 8, False, "none") == am.layer_bytes(2048, 1, 12288, 96, t=8)
    with pytest.raises(ValueError):  # what Ch7's terms do not model is refused, not guessed
        calc.layer_activation(8192, 1, 8192, 64, 8, False, "selective", kv_heads=8, ffn=28672, swiglu=True)


def test_pipeline_view_is_ch4_04s_model_and_interleaving_never_looks_slower():
    """The calculator's times are per rank (L/p layers): interleaved with v chunks is Ch4-04's
    d04_interleaved_1f1b.interleaved (each chunk 1/v of T_F, T_B), and with equal inputs its makespan never
    exceeds 1F1B's (the unit bug of the review: 213 against 117)."""
    from snippets.ch4_pipeline_parallel import d04_interleaved_1f1b as d04

    for p, m, v in ((2, 8, 2), (4, 8, 2), (4, 16, 4), (8, 32, 2)):
        view = calc.pipeline_view("interleaved", p, m, v, 1.0, 2.0, 0.7)
        assert view["makespan"] == pytest.approx(d04.interleaved(p, m, v, 1.0, 2.0).makespan, rel=1e-12)
        one = calc.pipeline_view("1f1b", p, m, 1, 1.0, 2.0, 0.7)
        assert one["makespan"] == pytest.approx((m + p - 1) * 3.0, rel=1e-12)   # 1F1B: (m + p − 1)(T_F + T_B)
        assert view["makespan"] < one["makespan"]
        assert view["makespan"] == pytest.approx(d04.lower_bound(p, m, v, 1.0, 2.0), rel=1e-12)
    # the backward entered is the whole backward: T_F = 1, T_B = 2 is the classic 1F1B step, (m + p − 1)·3
    assert calc.pipeline_view("gpipe", 4, 8, 1, 1.0, 2.0, 1.0)["makespan"] == 33.0
    # ZB-H1 splits T_B into B = T_B − T_W and W = T_W; the busy time per rank is still m(T_F + T_B)
    zb = calc.pipeline_view("zb_h1", 4, 8, 1, 1.0, 2.0, 0.8)
    assert zb["chunk_t"] == pytest.approx([1.0, 1.2, 0.8]) and max(zb["busy"]) == pytest.approx(8 * 3.0)
    assert zb["makespan"] < 33.0


def test_planner_vectors(tmp_path):
    if not calc.planner_available():
        pytest.skip("snippets/common/planner_3d.py (Ch7) is not on this branch: 3D planner vectors not checked")
    vec = {"memory": [], "pipeline": [], "planner": calc.planner_vectors(),
           "planner_dropped": calc.planner_dropped_vectors()}
    res = run_node(vec, tmp_path)
    assert res["n_mismatches"] == 0, res["mismatches"]


def test_dropped_pipeline_degrees_are_exactly_those_plan_never_uses():
    """A p is reported dropped iff plan() returns no layout with it, and the reason names the rule that fails
    (checked against the brute force of valid())."""
    from snippets.common import planner_3d as pl

    for c in calc.planner_dropped_vectors():
        i = c["in"]
        model, cluster = pl.Model(**i["model"]), pl.Cluster(**i["cluster"])
        batch = pl.Batch(**i["batch"])
        a = pl.Assumptions(**{k: tuple(v) if k == "mfu_curve" else v for k, v in i["assume"].items()})
        used = {r["p"] for r in pl.plan(model, cluster, batch, assume=a)}
        dropped = {x["p"]: x["reasons"] for x in c["out"]}
        assert set(dropped) == set(pl.divisors(cluster.gpus)) - used
        for p, reasons in dropped.items():
            if "p_layers" in reasons:
                assert (p > model.layers) if a.uneven_stages else (model.layers % p != 0)
        for d, t, p in pl.factorisations(cluster.gpus):   # rejection() is valid() with a reason
            ok = t <= cluster.gpus_per_node and pl.valid(model, batch, d, t, p, a)
            assert (pl.rejection(model, batch, d, t, p, a, cluster.gpus_per_node) is None) == ok
    l405 = calc.planner_dropped_vectors()[2]["out"]
    assert [x["p"] for x in l405] == [4, 8, 16, 32, 64, 128] and all(x["reasons"] == ["p_layers"] for x in l405)


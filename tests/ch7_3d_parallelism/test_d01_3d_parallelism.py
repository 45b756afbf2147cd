"""Ch7-01 3D Parallelism: each test asserts a claim the page makes, against an independent computation."""
import itertools
import math

import pytest

from snippets import results
from snippets.ch7_3d_parallelism import d01_3d_parallelism as page
from snippets.common import planner_3d as pl

M, C, B = pl.LLAMA70B, pl.H100_64, pl.BATCH_4M


def test_factorisations_are_every_ordered_triple():
    """The planner enumerates every (d, t, p) with d·t·p = N: brute force over all triples."""
    for n in (1, 8, 12, 64):
        brute = {(d, t, p) for d, t, p in itertools.product(range(1, n + 1), repeat=3) if d * t * p == n}
        assert set(pl.factorisations(n)) == brute and len(pl.factorisations(n)) == len(brute)


def test_axis_links_match_rank_coordinates():
    """Definition 7.1.1: an axis is intra-node iff all ranks of each of its groups share a node (rank // g)."""
    g = 8
    for d, t, p in pl.factorisations(64):
        coords = {(rd, rp, rt): rt + t * (rp + p * rd) for rd in range(d) for rp in range(p) for rt in range(t)}
        def intra(axis):
            groups = {}
            for (rd, rp, rt), r in coords.items():
                key = {"tp": (rd, rp), "pp": (rd, rt), "dp": (rp, rt)}[axis]
                groups.setdefault(key, set()).add(r // g)
            return all(len(nodes) == 1 for nodes in groups.values())
        ev = pl.evaluate(M, C, B, d, t, p)
        assert {a: ev["links"][a] == "intra" for a in ("tp", "pp", "dp")} == {a: intra(a) for a in ("tp", "pp", "dp")}


def test_evaluate_against_hand_written_alpha_beta():
    """Definition 7.1.2 recomputed from scratch (ring α-β, Korthikanti 34sbh/t, ZeRO-1) for the syllabus layout."""
    d, t, p = 2, 8, 4
    L, h, s, a, b = M.layers, M.hidden, M.seq, M.heads, 1
    m = B.global_batch // (d * b)
    ev = pl.evaluate(M, C, B, d, t, p)
    S = 2 * b * s * h
    ring = lambda n, size, al, be: 2 * (n - 1) * al + 2 * (n - 1) / n * size * be  # noqa: E731
    tp = 4 * ring(t, S, C.alpha_intra, 1 / C.intra_bw) * (L / p) * m
    pp = 2 * m * (C.alpha_inter + S / t / C.inter_bw)
    dp = ring(d, 2 * M.psi / (t * p), C.alpha_inter, 1 / C.inter_bw)
    assert ev["comm_s"] == pytest.approx({"tp": tp, "pp": pp, "dp": dp}, rel=1e-12)
    act = 34 * s * b * h / t * (L / p) * min(p, m)
    states = 4 * M.psi / (t * p) + 12 * M.psi / (t * p) / d
    assert ev["mem"]["total"] == pytest.approx(act + states, rel=1e-12)
    comp = (72 * b * s * h * h + 12 * b * s * s * h) * (L / p) * m / (t * C.flops * C.mfu)
    assert ev["step_s"] == pytest.approx((comp + tp + pp) * (1 + (p - 1) / m) + dp, rel=1e-12)


def test_traffic_theorem_and_corollary():
    """Theorem 7.1.3 in closed form; Corollary 7.1.4 exact when ψ = 12Lh²; the page's ordering TP ≫ PP, DP."""
    d, t, p = 2, 8, 4
    L, h, s = M.layers, M.hidden, M.seq
    m, e = B.global_batch // d, 2
    v = page.bytes_per_step(M, B, d, t, p)
    assert v["tp"] == pytest.approx(8 * (t - 1) / t * s * h * e * L / p * m)
    assert v["pp"] == pytest.approx(2 * m * s * h * e / t)
    assert v["dp"] == pytest.approx(2 * (d - 1) / d * e * M.psi / (t * p))
    ideal = pl.Model(L, h, M.heads, s, M.vocab, 12 * L * h * h)
    vi = page.bytes_per_step(ideal, B, d, t, p)
    assert vi["tp"] / vi["dp"] == pytest.approx(page.tp_over_dp(t, d, B.global_batch * s, h))
    assert v["tp"] / v["pp"] == pytest.approx(4 * (t - 1) * L / p)
    assert v["tp"] > 100 * max(v["pp"], v["dp"])
    # "PP and DP take under a second even over the NIC; TP takes seconds even over NVLink" (experiment 1)
    assert max(v["pp"], v["dp"]) / C.inter_bw < 1 < v["tp"] / C.intra_bw
    # "over the NIC, TP takes longer than the step's compute" (experiment 1)
    assert v["tp"] / C.inter_bw > pl.evaluate(M, C, B, d, t, p)["compute_s"]
    # ZeRO-3 adds one all-gather of the parameters: (d−1)/d · eψ/(tp)
    v3 = page.bytes_per_step(M, B, d, t, p, zero_stage=3)
    assert v3["dp"] - v["dp"] == pytest.approx((d - 1) / d * e * M.psi / (t * p))


def test_planner_ranking_claims():
    """Experiment 2: ranking sorted, fits consistent; every feasible row keeps TP intra; the best has t < 8 and
    the syllabus layout 2·8·4 fits but is not first; t = 16 (TP over the NIC) is several times slower."""
    rows = pl.plan(M, C, B)
    feasible = [r for r in rows if r["fits"]]
    assert rows[:len(feasible)] == feasible
    assert [r["step_s"] for r in feasible] == sorted(r["step_s"] for r in feasible)
    assert all(r["fits"] == (r["mem"]["total"] <= C.mem_bytes) for r in rows)
    assert all(r["links"]["tp"] == "intra" for r in rows)
    syl = page.find(rows, 2, 8, 4)
    assert syl["fits"] and rows.index(syl) > 0 and rows[0]["t"] < 8
    # "same compute (t·p equal), the gap comes from TP; PP time and bubble are smaller for 2·8·4"
    best = rows[0]
    assert best["t"] * best["p"] == 32 and syl["compute_s"] == pytest.approx(best["compute_s"])
    assert syl["comm_s"]["tp"] - best["comm_s"]["tp"] > syl["step_s"] - best["step_s"] > 0
    assert syl["comm_s"]["pp"] < best["comm_s"]["pp"] and syl["bubble"] < best["bubble"]
    t16 = min((r for r in pl.plan(M, C, B, max_t=16) if r["t"] == 16), key=lambda r: r["step_s"])
    assert t16["links"]["tp"] == "inter" and t16["step_s"] > 2 * rows[0]["step_s"]
    # every valid layout is there: t | a, p | L, d | B, t <= g
    want = {(d, t, p) for d, t, p in pl.factorisations(64) if M.heads % t == 0 and M.layers % p == 0
            and B.global_batch % d == 0 and t <= 8}
    assert {(r["d"], r["t"], r["p"]) for r in rows} == want


def test_small_batch_moves_the_choice():
    """Exercise 2: with B = 64 the winner has a smaller p and a larger t than with B = 1024."""
    big, small = pl.plan(M, C, B)[0], pl.plan(M, C, pl.Batch(64, 1))[0]
    assert small["p"] < big["p"] and small["t"] > big["t"]
    assert page.find(pl.plan(M, C, pl.Batch(64, 1)), 2, 2, 16)["bubble"] == pytest.approx(15 / 32)


def test_llama3_405b_exercise():
    """Exercise 1: t = 4 does not fit 80 GB, t = 8 does (ZeRO-3 states + 34sbh/t activations, first 1F1B stage)."""
    psi, L, h, s = 405e9, 126, 16384, 8192
    for t, fits in ((4, False), (8, True)):
        total = 16 * psi / (t * 16) / 64 + 34 * s * h / t * math.ceil(L / 16) * 16
        assert (total <= 80e9) is fits


def _mesh():
    return results.load("mesh_3d", kind="cpu")


@pytest.mark.parametrize("r", _mesh(), ids=lambda r: r.path.name)
def test_mesh_run_matches_theorem_and_one_process(r):
    """Experiment 3/4: loss equal to one process (float32 rounding), collective counts and bytes as Theorem 7.1.5
    predicts, on every rank and every step."""
    m = r.measurements
    assert m["d"] == 2 and m["t"] == 2 and r.hardware["world_size"] == 4
    assert m["max_abs_loss_diff"] < 1e-6 and m["max_abs_param_diff"] < 1e-6
    assert len(m["losses"]) == r.params["steps"]
    for row in page.mesh_rows(r):
        assert row["measured"] == row["predicted"], row
        assert row["same_every_step"]
    # the independent count of the model's parameters (from the run) agrees with the prediction's
    assert page.mesh_prediction(r.params, 2, 2)["total_params"] == m["total_params"]
    # the row-parallel bias is the only tensor TP replicates
    assert {n for n, pls in m["placements"].items() if pls[1] == "R"} == {f"{i}.down.bias" for i in range(r.params["L"])}


def test_tp_over_dp_magnitudes_in_prose():
    """Corollary 7.1.4's prose: hundreds to thousands when d ≈ t (70B, t = 8, d = 2: over a thousand); tens for
    Llama 3 405B (t = 8, d = 64, 16M tokens/step, h = 16384); V_TP/V_PP = 4(t−1)L/p in the hundreds for both."""
    assert 1000 < page.tp_over_dp(8, 2, 1024 * 4096, 8192) < 2000
    assert 10 < page.tp_over_dp(8, 64, 16 * 2**20, 16384) < 100
    assert 100 < 4 * 7 * 80 / 4 < 1000 and 100 < 4 * 7 * 126 / 16 < 1000
    # the page's helper is the corollary, checked against the theorem's two volumes (ψ = 12Lh²)
    L, h, s, b, m, d, t, p = 80, 8192, 4096, 1, 512, 2, 8, 4
    v_tp = 8 * (t - 1) / t * b * s * h * 2 * L / p * m
    v_dp = 2 * (d - 1) / d * 2 * 12 * L * h * h / (t * p)
    assert v_tp / v_dp == pytest.approx(page.tp_over_dp(t, d, d * m * b * s, h))


def test_gemm_cell_says_assumption_without_a_file_and_reads_the_sweep_with_one(tmp_path, monkeypatch):
    """Where the page states the planner's MFU: with no gemm_bench file the cell says the MFU is an assumption;
    with one, each hardware's tab shows sweep TFLOP/s ÷ that file's peak, recomputed here for h = 8192, t = 8."""
    from tests.page_cells import results_dir, run_cell, synthetic_gemm, tab

    md = "ch7-3d-parallelism/01-3d-parallelism.md"
    res = results_dir(tmp_path, ["mesh_3d"])
    bare = run_cell(md, "ch7-01-exp1-gemm", res, monkeypatch)
    assert "<strong>가정</strong>" in bare and f"MFU {C.mfu:.0%}" in bare and "hardware-tabs" not in bare
    sweep = [{"family": f, "h": h, "t": t, "tokens": 8192, "m": 8192, "n": 4 * h // t, "k": h, "dtype": "bfloat16",
              "time_us_median": 1.0, "tflops": 700.0 / (1 + 0.1 * t) + (13 if f == "qkv" else 0)}
             for h in (4096, 8192) for f in ("mlp_up", "mlp_down", "qkv", "attn_out") for t in (1, 2, 4, 8)]
    sweep += [{"family": "square", "h": h, "t": 1, "tokens": h, "m": h, "n": h, "k": h, "dtype": "bfloat16",
               "time_us_median": 1.0, "tflops": 650.0} for h in (4096, 8192)]
    like = next((res / "mesh_3d").glob("gpu-*.json"))
    synthetic_gemm(res, like, peak_tflops=800.0, sweep=sweep)
    gpu = tab(run_cell(md, "ch7-01-exp1-gemm", res, monkeypatch), "GPU")
    qkv = next(g for g in sweep if (g["family"], g["h"], g["t"]) == ("qkv", 8192, 8))
    assert f"qkv {qkv['tflops'] / 800.0:.0%}" in gpu and "(실험 1 의 배치)" in gpu
    shard = [g["tflops"] for g in sweep if g["family"] != "square" and g["t"] > 1]
    assert f"{min(shard) * 1e12 / C.flops:.0%}–{max(shard) * 1e12 / C.flops:.0%}" in gpu
    assert f"planner 가 가정한 MFU: {C.mfu:.0%}" in gpu


def test_a_cpu_float32_gemm_file_is_not_set_against_the_planner(tmp_path, monkeypatch):
    """scripts/runs.py runs gemm_bench on CPU in float32: that tab shows efficiency against its own peak (.3g, not
    "0 TFLOP/s"), never the planner's bf16 F or its MFU; the GPU bf16 file beside it still is compared."""
    import json

    from tests.page_cells import results_dir, run_cell, synthetic_gemm, tab

    md = "ch7-3d-parallelism/01-3d-parallelism.md"
    res = results_dir(tmp_path, ["mesh_3d"])
    sweep = [{"family": f, "h": h, "t": t, "tokens": 512, "m": 512, "n": 4 * h // t, "k": h, "dtype": "float32",
              "time_us_median": 1.0, "tflops": 0.05} for h in (256, 8192) for f in ("mlp_up", "qkv") for t in (1, 8)]
    cpu = synthetic_gemm(res, next((res / "mesh_3d").glob("cpu-*.json")), peak_tflops=0.08, sweep=sweep)
    d = json.loads(cpu.read_text())
    d["params"]["dtype"] = d["measurements"]["peak"]["dtype"] = "float32"
    cpu.write_text(json.dumps(d))
    synthetic_gemm(res, next((res / "mesh_3d").glob("gpu-*.json")), peak_tflops=800.0,
                   sweep=[{**g, "dtype": "bfloat16", "tflops": 600.0} for g in sweep])
    html = run_cell(md, "ch7-01-exp1-gemm", res, monkeypatch)
    body = tab(html, "CPU")
    assert "peak: 0.08 TFLOP/s (float32" in body and f"{0.05 / 0.08:.0%}" in body
    assert "planner 의 F" not in body.replace("planner 의 F 와 MFU", "") and "planner 가 가정한 MFU" not in body
    assert "비교하지 않습니다" in body
    gpu = tab(html, "GPU")
    assert f"planner 가 가정한 MFU: {C.mfu:.0%}" in gpu and f"{600e12 / C.flops:.0%}" in gpu


def test_gpu_tab_of_the_mesh_run_reads_the_gpu_file(tmp_path, monkeypatch):
    """Experiments 3–4 per hardware: the GPU tab's measured counts and bytes are the GPU file's. One rank's
    local bytes in the fixture are changed; only the GPU tab shows the changed value."""
    from tests.page_cells import edit, results_dir, run_cell, tab

    res = results_dir(tmp_path, ["mesh_3d"])
    f = next((res / "mesh_3d").glob("gpu-*.json"))
    edit(f, lambda d: d["measurements"]["ranks"][1].update(local_param_bytes=d["measurements"]["ranks"][1]["local_param_bytes"] + 4))
    want = results.read(f).measurements["ranks"][1]["local_param_bytes"]
    html = run_cell("ch7-3d-parallelism/01-3d-parallelism.md", "ch7-01-exp4-bytes", res, monkeypatch)
    assert f"{want:,}" in tab(html, "GPU") and f"{want:,}" not in tab(html, "CPU")
    assert "t = 16 의 가장 빠른 배치" in html  # the planner line stays outside the tabs

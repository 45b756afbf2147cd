"""Ch3-05 TP communication cost: each test asserts a claim the page makes."""
from pathlib import Path

import numpy as np
import pytest

from snippets import results
from snippets.ch3_tensor_parallel import d05_tp_communication_cost as page
from snippets.common import tp_cost
from tests.ch3_tensor_parallel import FIXTURES as FIXTURE_DIR
from tests.ch3_tensor_parallel import as_world, cpu_runs, gpu_fixture, platform, relabelled


def test_measured_counts_match_formula():
    """Experiment 1: DTensor block = 4 all_reduces; full recompute without early stop = 6; torch's
    default early stop = 5 (the last g is not recomputed); every all_reduce carries b·s·h·4 bytes."""
    runs = page.tp_runs()
    assert sorted(r.hardware["world_size"] for r in cpu_runs(runs)) == [2, 4]  # the CPU tab's t
    for run in runs:
        m = page.measured_counts(run)
        total = {k: len(v["forward"]) + len(v["backward"]) for k, v in m.items()}
        assert total["block"] == tp_cost.tp_allreduces_per_layer("none")
        assert total["block_recompute_full"] == tp_cost.tp_allreduces_per_layer("full")
        assert total["block_recompute"] == tp_cost.tp_allreduces_per_layer("full") - 1
        # per step: L layers × m micro-batches of the measured block (the count read from the file, not re-typed)
        for L, mb in [(1, 1), (96, 8)]:
            assert tp_cost.tp_allreduces_per_step(L, mb) == L * mb * total["block"]
            assert tp_cost.tp_allreduces_per_step(L, mb, "full") == L * mb * total["block_recompute_full"]
        for case in ("block", "block_recompute", "block_recompute_full"):
            c = m[case]
            assert len(c["forward"]) == 2
            assert {nb for _, nb in c["forward"] + c["backward"]} == {c["b"] * c["s"] * c["h"] * 4}
            assert all(d <= c["tol"][q] for q, d in c["diff"].items()) and c["within"]  # the run's own bound


def test_early_stop_is_torchs_default():
    """The page's explanation of the 5: non-reentrant checkpoint stops early by default."""
    pytest.importorskip("torch")
    from torch.utils import checkpoint

    import inspect

    # checkpoint(..., early_stop: bool = True): the default the page relies on, read from the installed torch
    assert inspect.signature(checkpoint.checkpoint).parameters["early_stop"].default is True
    # and no global override is set (None: each call's early_stop argument decides)
    assert checkpoint._enable_checkpoint_early_stop is None


def _ring_sim_time(t, S, alpha, beta, op="all_reduce"):
    """Time of one collective from Ch1's ring simulators (moving real arrays): steps·α + bytes sent per rank·β."""
    from snippets.ch1_collective.d01_collective_taxonomy import ring_all_gather
    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce

    x = np.zeros((t, S), dtype=np.uint8)  # S one-byte elements per rank
    if op == "all_reduce":
        _, sent, _, steps = ring_allreduce(x)
        return steps * alpha + int(sent.max()) * beta
    _, sent = ring_all_gather(np.zeros((t, S // t), dtype=np.uint8))
    return (t - 1) * alpha + int(sent.max()) * beta


def test_bytes_and_time_formulas_against_alphabeta():
    """Experiment 2: S = bshe is the block all_reduce tp_bench counted (fp32 there, e = 4); one layer's time is the
    measured number of all_reduces × one ring all-reduce of Ch1's simulator (4 and 6 with full recompute)."""
    for run in page.tp_runs():
        c = page.measured_counts(run)["block"]
        assert tp_cost.tp_allreduce_bytes(c["b"], c["s"], c["h"], 4) == c["forward"][0][1]
    m = page.measured_counts(page.tp_runs()[0])
    n_block = len(m["block"]["forward"]) + len(m["block"]["backward"])
    n_full = len(m["block_recompute_full"]["forward"]) + len(m["block_recompute_full"]["backward"])
    t, S_scaled = 8, 8 * 1024  # the simulator moves S bytes; the α-β time is linear in S, so scale it up
    for r in page.layer_time_rows(t, 1, 2048, 12288):
        beta = 1 / (r["GBps"] * 1e9)
        one = _ring_sim_time(t, S_scaled, page.ALPHA_ASSUMED, beta * r["S"] / S_scaled)
        assert r["one_allreduce_s"] == pytest.approx(one)
        assert r["layer_s"] == pytest.approx(n_block * one) and r["layer_full_recompute_s"] == pytest.approx(n_full * one)
    rows = {r["link"].split(" (")[0]: r for r in page.layer_time_rows(8, 1, 2048, 12288)}
    bw = page.links()
    bw_ratio = next(v for k, v in bw.items() if k.startswith("NVLink4")) / next(v for k, v in bw.items()
                                                                                 if k.startswith("InfiniBand NDR"))
    ratio = rows["InfiniBand NDR"]["layer_s"] / rows["NVLink4"]["layer_s"]
    assert 1 < ratio < bw_ratio  # below the bandwidth ratio: the α term is the same on both links


def test_link_rates_are_per_direction():
    """ERRATA 8: A100 300, H100 450 GB/s per direction (600/900 bidirectional); HDR 25, NDR 50 GB/s."""
    got = {k.split(" (")[0]: v for k, v in page.links().items()}
    assert got == {"NVLink3": 300.0, "NVLink4": 450.0, "InfiniBand HDR": 25.0, "InfiniBand NDR": 50.0}


def _weighted_error(run, alpha, beta):
    """Σ of squared relative errors of T = 2(N−1)α + 2(N−1)/N·Sβ over the file's all_reduce sizes."""
    n = run.hardware["world_size"]
    rows = [x for x in run.measurements if x["op"] == "all_reduce"]
    return sum(((2 * (n - 1) * alpha + 2 * (n - 1) / n * x["bytes"] * beta) / (x["time_us_median"] * 1e-6) - 1) ** 2
               for x in rows)


@pytest.mark.parametrize("run", results.experiment("collectives_bench") + [gpu_fixture("collectives_bench", n)
                                                                            for n in (2, 4)],
                         ids=lambda r: r.hardware["id"])
def test_alpha_beta_is_the_least_squares_fit_of_that_file(run):
    """Experiment 2 (a): each tab's α, β minimise the relative error of the ring model over that file's own
    all_reduce times (any nudge of α or β makes it worse), and are positive."""
    f = page.alpha_beta(run)
    assert f["alpha"] > 0 and f["beta"] > 0 and f["run"] is run and f["n"] == run.hardware["world_size"]
    best = _weighted_error(run, f["alpha"], f["beta"])
    for da, db in ((1.01, 1), (0.99, 1), (1, 1.01), (1, 0.99)):
        assert _weighted_error(run, f["alpha"] * da, f["beta"] * db) > best


def _ring(t, S, alpha, beta):
    """Ch1-03's ring all-reduce time, written out again: 2(t−1)α + 2(t−1)/t·S·β."""
    return 2 * (t - 1) * alpha + 2 * (t - 1) / t * S * beta


def _block_S(run):
    return next(c for c in run.data["measurements"]["cases"] if c["case"] == "block")["forward_calls"][0][1]


def test_cost_tab_uses_the_same_hardwares_fit():
    """Experiment 2 (a)'s GPU tab: its α, β come from the GPU collectives_bench file at N = t, and its S is the GPU
    tp_bench file's counted block all_reduce; a t without collectives_bench at that N borrows the nearest N's fit,
    marked †."""
    coll, tp = gpu_fixture("collectives_bench"), gpu_fixture("tp_bench")
    plat = platform(coll, tp, gpu_fixture("tp_bench", 4))
    assert all(r.is_gpu for r in plat.runs)
    text = page.cost_tab(plat)
    f = page.alpha_beta(coll)
    S = _block_S(tp)
    assert f"| 2 | 2 | {f['alpha'] * 1e6:.1f} µs | {1 / f['beta'] / 1e9:.2f} GB/s | {S:,} | " in text
    assert f"{_ring(2, S, f['alpha'], f['beta']) * 1e3:.3f} ms" in text
    S4 = _block_S(gpu_fixture("tp_bench", 4))
    assert f"| 4 | 2 † |" in text and f"{_ring(4, S4, f['alpha'], f['beta']) * 1e3:.3f} ms" in text
    assert "t = 4: N = 4 의 collectives_bench 측정이 없어 N = 2 의 fit" in text and "t (GPUs)" in text
    # the real page: every committed hardware pairs its own files (CPU with CPU)
    for tab in results.platforms(page.cost_runs()):
        assert len({r.hardware["kind"] for r in tab.runs}) == 1


def test_cost_tab_on_the_real_gpu_plan_collectives_at_8_tp_at_2():
    """scripts/runs.py's node plan: collectives_bench on all 8 GPUs, tp_bench on 2. The GPU tab is not empty: it
    predicts t = 2 from the N = 8 fit (α, β recomputed here by least squares from the file's own times), marked †."""
    coll = as_world(gpu_fixture("collectives_bench", 4), 8)
    tp = gpu_fixture("tp_bench")
    text = page.cost_tab(platform(coll, tp))
    rows = [x for x in coll.data["measurements"] if x["op"] == "all_reduce"]
    n = 8
    # the fit minimises Σ (model/measured − 1)²: weighted least squares in (α, β), solved here with numpy
    A = np.array([[2 * (n - 1), 2 * (n - 1) / n * x["bytes"]] for x in rows]) / np.array(
        [[x["time_us_median"] * 1e-6] for x in rows])
    alpha, beta = np.linalg.lstsq(A, np.ones(len(rows)), rcond=None)[0]
    S = _block_S(tp)
    assert f"| 2 | 8 † | {alpha * 1e6:.1f} µs | {1 / beta / 1e9:.2f} GB/s | {S:,} |" in text
    assert f"{_ring(2, S, alpha, beta) * 1e3:.3f} ms" in text and "ring model" in text.lower()


@pytest.mark.parametrize("t", [2, 3, 8, 16, 64])
def test_rho_closed_form_equals_separate_times(t):
    """Theorem 3.5.4: ρ(t) = 16(t−1)Rβ/(72h+12s) equals T_comm/T_comp from tp_scaling (α = 0) for any b."""
    R, gbps, s, h = 989e12, 450.0, 2048, 12288
    rho = float(page.comm_to_compute_ratio(t, s, h, R, gbps))
    for b in (1, 4, 32):
        sc = tp_cost.tp_scaling(np.array([t]), b, s, h, R, 0.0, 1 / (gbps * 1e9))
        assert float(sc["comm_s"][0] / sc["compute_s"][0]) == pytest.approx(rho)


def test_scaling_limit_shape():
    """Theorem 3.5.4: compute ∝ 1/t, per-rank bytes increase toward 4bsh; the comm fraction increases with t,
    and an InfiniBand TP group has ρ larger by the bandwidth ratio."""
    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce

    ts = np.array([2, 4, 8, 16, 32, 64])
    sc = tp_cost.tp_scaling(ts, 1, 2048, 12288, 989e12, 5e-6, 1 / 450e9)
    assert np.all(np.diff(sc["comm_fraction"]) > 0)
    n_block = sum(len(v) for v in (lambda c: (c["forward"], c["backward"]))(page.measured_counts(page.tp_runs()[0])["block"]))
    b, s, h = 1, 64, 48  # small enough for the simulator to move every byte (the formula is linear in b·s·h)
    sent = tp_cost.tp_bytes_sent_per_rank_per_layer(ts, b, s, h)
    for t, got in zip(ts, sent):
        _, simulated, _, _ = ring_allreduce(np.zeros((t, b * s * h), dtype=np.float16))  # e = 2
        assert got == pytest.approx(n_block * int(simulated.max()))
    assert np.all(np.diff(sent) > 0) and np.all(sent < n_block * 2 * b * s * h * 2)
    assert float(page.comm_to_compute_ratio(16, 2048, 12288, 989e12, 50)) > 1 > float(
        page.comm_to_compute_ratio(8, 2048, 12288, 989e12, 450))


def test_flops_formula_matches_narayanan():
    """layer_flops = 72bsh² + 12bs²h = ¾ of Narayanan et al.'s 96bsh²(1 + s/6h) (which includes a recompute forward)."""
    b, s, h = 2, 2048, 12288
    assert tp_cost.layer_flops(b, s, h) == pytest.approx(0.75 * 96 * b * s * h * h * (1 + s / (6 * h)))


def test_sequence_parallel_same_volume():
    """Theorem 3.5.5 / Experiment 4: SP = 2 AG + 2 RS per pass, each of the AR's S; ring bytes per rank equal TP's;
    the LayerNorm gradients are left Partial."""
    sp = tp_cost.tp_collectives_per_layer(sequence_parallel=True)
    assert sp["forward"] == sp["backward"] == {"all_gather": 2, "reduce_scatter": 2}
    for run in page.tp_runs():
        m = page.measured_counts(run)
        tp, spc = m["block"], m["block_sp"]
        t = tp["t"]
        S = tp["b"] * tp["s"] * tp["h"] * 4
        assert (spc["b"], spc["s"], spc["h"]) == (tp["b"], tp["s"], tp["h"])
        for p in ("forward", "backward"):
            ops = sorted(op for op, _ in spc[p])
            assert ops == ["all_gather_into_tensor"] * 2 + ["reduce_scatter_tensor"] * 2
            assert {nb for _, nb in spc[p]} == {S}
        assert page.ring_bytes_per_rank(spc["forward"] + spc["backward"], t) == pytest.approx(
            page.ring_bytes_per_rank(tp["forward"] + tp["backward"], t))
        assert all(d <= spc["tol"][q] for q, d in spc["diff"].items()) and spc["within"]
        assert {v for k, v in spc["grad_placements"].items() if k.startswith("ln")} == {"(Partial(sum),)"}
        # DTensor adds the row-parallel bias before the ReduceScatter: its gradient is already replicated (Megatron's
        # is not; the page's 4h vs 6h)
        assert {spc["grad_placements"][k] for k in ("attn.o.bias", "mlp.fc2.bias")} == {"(Replicate(),)"}


def test_ring_allgather_against_ch1_simulator():
    """SP's AllGather / ReduceScatter time: (t−1) steps and (t−1)/t·S bytes per rank, as Ch1's ring all-gather
    simulator moves them."""
    for t in (2, 8, 64):
        S = 64 * t
        assert tp_cost.ring_allgather_time(t, S, 1e-6, 1e-9) == pytest.approx(_ring_sim_time(t, S, 1e-6, 1e-9, "all_gather"))


def test_figure_and_tables_fit_the_cell_budget():
    """GUIDE: a build-time cell runs in under 1 s (CPU time of this thread, scaled by the machine's speed)."""
    import time

    from tests.conftest import cell_budget

    t0 = time.thread_time()
    svg = page.scaling_figure()
    assert "<svg" in svg and time.thread_time() - t0 < cell_budget()
    t0 = time.thread_time()
    page.layer_time_rows(8, 1, 2048, 12288)
    for tab in results.platforms(page.cost_runs()):
        page.cost_tab(tab)
    page.cost_tab(platform(gpu_fixture("collectives_bench"), gpu_fixture("tp_bench")))
    assert time.thread_time() - t0 < cell_budget()


def test_bandwidth_term_limit_is_16bsh_beta():
    """Theorem 3.5.4 and the figure's caption: per layer and micro-batch the bandwidth term grows with t
    toward 4 all-reduces × 2S = 16·b·s·h·β (16-bit), i.e. 4bsh bytes per all-reduce; it never falls."""
    b, s, h, beta = 1, 2048, 12288, 1 / 450e9
    ts = np.array([2, 4, 8, 64, 4096], float)
    per_layer = tp_cost.tp_comm_time_per_layer(ts, b, s, h, 0.0, beta)
    assert np.all(np.diff(per_layer) > 0)
    assert per_layer[-1] == pytest.approx(16 * b * s * h * beta, rel=1e-3)
    sent = tp_cost.tp_bytes_sent_per_rank_per_layer(ts, b, s, h)
    assert sent[-1] == pytest.approx(16 * b * s * h, rel=1e-3)


def test_sp_tab_reads_the_gpu_file():
    """Experiment 4's GPU tab: the SP block's collectives and the LayerNorm gradient placement of the GPU file."""
    run = gpu_fixture("tp_bench")
    text = page.sp_tab(platform(run))
    sp = next(c for c in run.data["measurements"]["cases"] if c["case"] == "block_sp")
    lns = sorted({v for k, v in sp["grad_placements"].items() if k.startswith("ln")})
    rb = sorted({sp["grad_placements"][k] for k in ("attn.o.bias", "mlp.fc2.bias")})
    assert f"row-parallel bias (attn.o, mlp.fc2) gradient placement: {rb}" in text
    assert f"LayerNorm gradient placement: {lns}" in text and "all_gather" in text and "reduce_scatter" in text


# --------------------------------------------------------------------------- measured GEMM efficiency (gemm_bench)

LAYER = {"mlp_up": lambda h, t, n: (n, h, 4 * h // t), "mlp_down": lambda h, t, n: (n, 4 * h // t, h),
         "qkv": lambda h, t, n: (n, h, 3 * h // t), "attn_out": lambda h, t, n: (n, h // t, h)}  # (m, k, n)
GPU_PRESET = {"hs": (1024, 2048, 4096, 5120, 8192, 12288), "ts": (1, 2, 4, 8, 16, 32, 64), "tokens": 2048}


def _gemm_data(like: Path, hs=GPU_PRESET["hs"], ts=GPU_PRESET["ts"], tokens=GPU_PRESET["tokens"], dtype="bfloat16",
               peak=700e12) -> dict:
    """A results file shaped as gpu_runs/gemm_bench.py writes it (same keys; the real program's own output is
    read in test_the_real_programs_output below): the provenance of `like` with gemm_bench's program, params and
    measurements. Times: a GEMM whose smallest dimension is d reaches d/(d + 512) of `peak`, plus a per-family
    wobble, so that the families, the h and the t all differ."""
    import json

    d = json.loads(Path(like).read_text())
    d["program"] = "gemm_bench"
    d["params"] = {"preset": "gpu", "dtype": dtype, "hs": list(hs), "ts": list(ts), "tokens": tokens}
    wob = {"square": 1.0, "mlp_up": 1.1, "mlp_down": 0.9, "qkv": 1.05, "attn_out": 0.8, None: 1.0}

    def entry(m, n, k, family=None, **kw):
        dd = min(m, n, k)
        us = 2 * m * n * k / (peak * dd / (dd + 512) * wob[family]) * 1e6
        return {**({"family": family} if family else {}), **kw, "m": m, "n": n, "k": k, "dtype": dtype,
                "time_us_median": us, "tflops": 2 * m * n * k / (us * 1e-6) / 1e12}

    sweep = []
    for h in hs:
        sweep.append(entry(h, h, h, family="square", h=h, t=1, tokens=h))
        for t in ts:
            for fam, shape in LAYER.items():
                m, k, n = shape(h, t, tokens)
                sweep.append(entry(m, n, k, family=fam, h=h, t=t, tokens=tokens))
    d["measurements"] = {"peak": entry(16384, 16384, 16384), "sweep": sweep}
    return d


def _write(root: Path, d: dict) -> Path:
    import json

    path = root / "gemm_bench" / f"{d['hardware']['id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    results.validate(d, path)
    path.write_text(json.dumps(d))
    return path


CPU_LIKE = results.RESULTS / "tp_bench" / "cpu-gloo-2proc-amd-epyc.json"
GPU_LIKE = FIXTURE_DIR / "tp_bench" / "gpu-nccl-1x2-nvidia-h200.json"


@pytest.fixture
def gemm_results(tmp_path, monkeypatch):
    """A results tree in a temp folder holding one CPU-provenance (the full preset's shapes) and one GPU-provenance
    (the gpu preset's shapes) gemm_bench file; results.RESULTS points at it."""
    root = tmp_path / "results"
    paths = [_write(root, _gemm_data(CPU_LIKE, hs=(256, 512, 1024, 2048), ts=(1, 2, 4, 8), tokens=512,
                                     dtype="float32", peak=1e11)),
             _write(root, _gemm_data(GPU_LIKE))]
    monkeypatch.setattr(results, "RESULTS", root)
    return paths


def test_no_gemm_results_means_the_peak_assumption(tmp_path, monkeypatch):
    """The decision cell: no gemm_bench file → gemm_runs() is None and the page says η = 1 is assumed; a malformed
    file is not silently skipped."""
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert page.gemm_runs() is None
    note = page.no_gemm_note()
    assert "η = 1" in note and "gemm_bench" in note
    (tmp_path / "gemm_bench").mkdir()
    (tmp_path / "gemm_bench" / "broken.json").write_text("{}")
    with pytest.raises(results.ResultsError):
        page.gemm_runs()


def _layer_rate(data: dict, h: int, t: int) -> float:
    """The layer's rate from the JSON alone: the four shard GEMMs' 2mnk over their summed median times."""
    es = [e for e in data["measurements"]["sweep"] if (e["h"], e["t"]) == (h, t) and e["family"] in LAYER]
    assert len(es) == 4
    return sum(2 * e["m"] * e["n"] * e["k"] for e in es) / (sum(e["time_us_median"] for e in es) * 1e-6)


def _peak(data: dict) -> float:
    pk = data["measurements"]["peak"]
    return 2 * pk["m"] * pk["n"] * pk["k"] / (pk["time_us_median"] * 1e-6)


def _rho(t, s, h, rate, gbps):
    """Theorem 3.5.4 written out again: 4 ring all-reduces of 2bsh bytes over (72bsh² + 12bs²h)/(t·R)."""
    return 4 * 2 * (t - 1) / t * 2 * s * h / (gbps * 1e9) / ((72 * s * h * h + 12 * s * s * h) / (t * rate))


def test_gpu_tab_rho_from_the_gpus_own_measured_rate(gemm_results):
    """Findings 2 and 7: the GPU tab's ρ uses the rate this GPU measured at the GPT-3 shard width, read at
    h = 12288 itself and tokens = 2048, recomputed here from the JSON (not through the page's functions), and the
    header names the tokens; the H100-peak column is Theorem 3.5.4 at 989 TFLOP/s."""
    import json

    gpu = results.platforms(page.gemm_runs())[1]
    data = json.loads(gemm_results[1].read_text())
    text = page.efficiency_tab(gpu)
    s, h = page.GPT3["s"], page.GPT3["h"]
    for t in (2, 8, 64):
        R = _layer_rate(data, h, t)
        prev = _layer_rate(data, h, t // 2) if t > 2 else None
        row = (f"| {t} | {h // t} | {h} | {R / 1e12:.0f} | {R / _peak(data):.2f} | "
               + (f"{2 * R / prev:.2f}" if prev else "") + f" | {_rho(t, s, h, 989e12, 450):.2f} | "
               f"{_rho(t, s, h, R, 450):.2f} | {_rho(t, s, h, R, 50):.2f} |")
        assert row in text, row
    assert "m = tokens = 2048" in text and "외삽하지 않음" not in text and "12288 에서 쟀습니다" in text
    a, z = _layer_rate(data, h, 2), _layer_rate(data, h, 64)
    assert f"**{32 * z / a:.2f} 배** 줄어듭니다" in text  # the tab's reading, from its own numbers


def test_gpu_tab_names_the_h_it_borrows_and_the_other_tokens(tmp_path, monkeypatch):
    """A GPU file from the old preset (tokens = 8192, t ≤ 8, no 12288 at t > 8): the widths h/t it lacks at
    h = 12288 are read at another h, which the row names, and the tokens mismatch is said."""
    root = tmp_path / "results"
    _write(root, _gemm_data(GPU_LIKE, hs=(4096, 5120, 8192, 12288), ts=(1, 2, 4, 8), tokens=8192))
    monkeypatch.setattr(results, "RESULTS", root)
    text = page.efficiency_tab(results.platforms(page.gemm_runs())[0])
    assert "| 8 | 1536 | 12288 |" in text and "| 16 | 768 | 5120 … 8192 |" in text
    assert "| 64 | 192 | 4096 * |" in text and "외삽하지 않음" in text
    assert "tokens = 8192 은 GPT-3 layer 의 b·s = 2048 와 달라" in text


def test_cpu_tab_has_no_gpt3_rho(gemm_results):
    """Finding 3: the CPU tab shows fp32 BLAS η against h/t at its own shapes and never a GPT-3 / H100 ρ; its
    reading is recomputed here from the JSON."""
    import json

    cpu = results.platforms(page.gemm_runs())[0]
    text = page.efficiency_tab(cpu)
    assert "ρ" not in text.replace("ρ 는 GPU 탭에만", "") and "GPT-3" not in text
    data = json.loads(gemm_results[0].read_text())
    a, z = _layer_rate(data, 2048, 1), _layer_rate(data, 2048, 8)
    assert f"**{8 * z / a:.2f} 배** 줄었습니다" in text
    assert f"| 8 | 256 | {z / 1e9:.1f} | {z / _peak(data):.2f} |" in text


def test_mutating_the_gpu_file_changes_the_gpu_tab_only(gemm_results):
    """Slow one shard GEMM of the GPU file (h = 12288, t = 8, qkv, time × 3): the GPU tab's t = 8 rate and ρ move,
    the CPU tab is unchanged."""
    import json

    before = {p.kind: page.efficiency_tab(p) for p in results.platforms(page.gemm_runs())}
    data = json.loads(gemm_results[1].read_text())
    for e in data["measurements"]["sweep"]:
        if (e["h"], e["t"], e["family"]) == (12288, 8, "qkv"):
            e["time_us_median"] *= 3
    gemm_results[1].write_text(json.dumps(data))
    after = {p.kind: page.efficiency_tab(p) for p in results.platforms(page.gemm_runs())}
    assert before["cpu"] == after["cpu"] and before["gpu"] != after["gpu"]
    R = _layer_rate(data, 12288, 8)
    assert f"| 8 | 1536 | 12288 | {R / 1e12:.0f} |" in after["gpu"]
    assert f"{_rho(8, 2048, 12288, R, 450):.2f}" in after["gpu"]


@pytest.mark.dist
def test_the_real_programs_output(tmp_path, monkeypatch):
    """Finding 8: gemm_bench's tiny preset for real (torchrun, 1 process), read through results.experiment: the
    layer's η is its four shard GEMMs' FLOPs over their time over the file's peak, recomputed from the JSON; the
    CPU tab renders from it. (Once `make runs` commits a CPU gemm_bench file, test_committed_gemm_files reads it.)"""
    from tests.conftest import launch

    out = tmp_path / "results" / "gemm_bench"
    launch("gpu_runs/gemm_bench.py", 1, ["--preset", "tiny", "--out", out], 180)
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    runs = page.gemm_runs()
    assert len(runs) == 1
    _check_file(runs[0])
    assert "η" in page.efficiency_tab(results.platforms(runs)[0])


def _check_file(run):
    data = run.data
    pts = {(p["h"], p["t"]): p for p in page.layer_efficiency(run)}
    assert set(pts) == {(h, t) for h in data["params"]["hs"] for t in data["params"]["ts"]}
    for (h, t), p in pts.items():
        assert p["flops_per_s"] == pytest.approx(_layer_rate(data, h, t), rel=1e-12)
        assert p["eta"] == pytest.approx(_layer_rate(data, h, t) / _peak(data), rel=1e-12)
        assert p["tokens"] == data["params"]["tokens"]


@pytest.mark.parametrize("run", (lambda: (results.experiment("gemm_bench")
                                          if any((results.RESULTS / "gemm_bench").glob("*.json")) else []))(),
                         ids=lambda r: r.hardware["id"])
def test_committed_gemm_files(run):
    """Every committed gemm_bench file (none until `make runs` writes the CPU one) through the page's reader."""
    _check_file(run)
    page.efficiency_tab(results.platforms([run])[0])


def test_efficiency_cell_with_three_hardwares_fits_the_budget(gemm_results):
    """Finding 9: the efficiency cell with CPU + two GPU models (a relabelled copy) stays under the cell budget."""
    import time

    from tests.conftest import cell_budget

    runs = page.gemm_runs()
    runs = runs + [relabelled(runs[1], "NVIDIA H100 80GB HBM3")]
    assert len(results.platforms(runs)) == 3
    t0 = time.thread_time()
    html = results.hardware_tabs(runs, page.efficiency_tab)
    took = time.thread_time() - t0
    assert html.count("<svg") == 3 and took < cell_budget(), took

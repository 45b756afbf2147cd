"""Ch3-05 TP communication cost: counts per layer and step, bytes, α-β time, the scaling limit, SP.

Every formula comes from snippets/common/tp_cost.py (shared with Ch7's planner) and Ch1's α-β
module; link rates come from Ch1-04's table (per direction). Measured counts come from
gpu_runs/tp_bench.py, α and β from gpu_runs/collectives_bench.py and GEMM efficiency from
gpu_runs/gemm_bench.py, each read per hardware. Notation: t, b, s, h, L, m, e (docs/notation.md);
F a vendor's published peak FLOP/s; R the rate (FLOP/s) a GEMM reached in gemm_bench; η = R over the same
file's measured peak GEMM (never another GPU's peak).
"""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch3_tensor_parallel import case_tolerance, case_within, missing, shape_line, unit
from snippets.ch1_collective.d04_nccl_topology import IB_PORT_GBIT, gbit_to_GBps, nvlink_GBps
from snippets.common import figures
from snippets.common.alphabeta import fit_alpha_beta, ring_allreduce_time
from snippets.common.tp_cost import (layer_flops, ring_allgather_time, tp_allreduce_bytes, tp_allreduces_per_layer,
                                     tp_allreduces_per_step, tp_collectives_per_layer, tp_comm_time_per_layer,
                                     tp_scaling)

GPT3 = {"b": 1, "s": 2048, "h": 12288, "L": 96}  # GPT-3 175B's shape (Brown et al. 2020, Table 2.1)
ALPHA_ASSUMED = 5e-6  # s per message: an assumption for GPU links (not measured here), as in Ch1-03
# Published dense 16-bit tensor-core peaks (vendor whitepapers), labelled, not measured here
PEAK_FLOPS = {"A100": 312e12, "H100 SXM": 989e12}


# --8<-- [start:links]
def links() -> dict[str, float]:
    """Per-direction bandwidth of one GPU's path, GB/s (Ch1-04's table: vendors' rates, not measured)."""
    return {"NVLink3 (A100, 노드 안)": nvlink_GBps("NVLink3 (A100)")[0],
            "NVLink4 (H100, 노드 안)": nvlink_GBps("NVLink4 (H100)")[0],
            "InfiniBand HDR (GPU 당 1 포트, 노드 사이)": gbit_to_GBps(IB_PORT_GBIT["HDR"]),
            "InfiniBand NDR (GPU 당 1 포트, 노드 사이)": gbit_to_GBps(IB_PORT_GBIT["NDR"])}
# --8<-- [end:links]


# --8<-- [start:fit]
def alpha_beta(run) -> dict:
    """α, β of ring all_reduce fitted to one collectives_bench results file (N = its world size):
    T(S) = 2(N−1)α + 2(N−1)/N·S·β over every measured size (Ch1-03's fit)."""
    n = run.hardware["world_size"]
    rows = [x for x in run.measurements if x["op"] == "all_reduce"]
    S = np.array([x["bytes"] for x in rows], float)
    secs = np.array([x["time_us_median"] for x in rows]) * 1e-6
    alpha, beta, _ = fit_alpha_beta(np.full_like(S, 2 * (n - 1)), 2 * (n - 1) / n * S, secs)
    return {"alpha": alpha, "beta": beta, "n": n, "run": run}
# --8<-- [end:fit]


def cost_runs() -> list:
    """collectives_bench and tp_bench files together: hardware_tabs groups them into one tab per hardware,
    so a tab's prediction uses that hardware's own α and β."""
    return results.experiment("collectives_bench") + results.experiment("tp_bench")


def of(plat, program: str) -> dict:
    """{world size: Result} of one program among a tab's files."""
    return {r.hardware["world_size"]: r for r in plat.runs if r.data["program"] == program}


# --8<-- [start:cost]
def fit_for(fits: dict, t: int) -> tuple[dict, bool]:
    """The α, β this hardware measured for a ring of t: the fit at N = t when collectives_bench ran there
    (exact = True); otherwise the fit at the measured N closest to t (a tie: the larger), assuming the ring
    model's per-step α and per-byte β do not depend on N (exact = False, and the table says so)."""
    if t in fits:
        return alpha_beta(fits[t]), True
    n = min(fits, key=lambda n: (abs(np.log(n / t)), -n))
    return alpha_beta(fits[n]), False


def cost_tab(plat) -> str:
    """One hardware: its own α, β (collectives_bench, at N = t where measured) predict the time of the block's
    all_reduce of S (tp_bench's counted bytes)."""
    fits, tps = of(plat, "collectives_bench"), of(plat, "tp_bench")
    if not tps:
        return missing(plat, "이 하드웨어에는 tp_bench 결과가 없어 block 의 S 를 모릅니다")
    if not fits:
        return missing(plat, "이 하드웨어에는 collectives_bench 결과가 없어 α, β 를 fit 할 수 없습니다")
    rows, borrowed = [], []
    for t, run in sorted(tps.items()):
        f, exact = fit_for(fits, t)
        if not exact:
            borrowed.append((t, f["n"]))
        S = measured_counts(run)["block"]["forward"][0][1]  # the block's all_reduce, as DTensor issued it
        one = float(ring_allreduce_time(t, S, f["alpha"], f["beta"]))
        crowded = not plat.is_gpu and t > run.hardware["cpu_count"]  # more processes than cores: the scheduler
        rows.append([f"{t}" + (" (core 보다 많음)" if crowded else ""), f"{f['n']}" + ("" if exact else " †"),
                     f"{f['alpha'] * 1e6:.1f} µs", f"{1 / f['beta'] / 1e9:.2f} GB/s", f"{S:,}",
                     f"{one * 1e3:.3f} ms", f"{4 * one * 1e3:.3f} ms"])
    out = results.markdown_table([f"t ({unit(plat)})", "fit 의 N", "fit α", "fit 1/β", "block 의 S (B)",
                                  "S 의 AllReduce 1 번 (예측)", "layer, 4 번 (예측)"], rows)
    if borrowed:
        out += ("\n\n† " + "; ".join(f"t = {t}: N = {t} 의 collectives_bench 측정이 없어 N = {n} 의 fit" for t, n in borrowed)
                + " 을 썼습니다. Ring model 의 가정 (step 당 α 와 byte 당 β 가 N 과 무관) 에 기댄 예측입니다.")
    return out
# --8<-- [end:cost]


# --8<-- [start:time]
def layer_time_rows(t: int, b: int, s: int, h: int, e: int = 2, alpha: float = ALPHA_ASSUMED) -> list[dict]:
    """TP communication per layer per micro-batch (4 ring all-reduces, nothing overlapped) on each link."""
    S = tp_allreduce_bytes(b, s, h, e)
    rows = []
    for name, gbps in links().items():
        beta = 1 / (gbps * 1e9)
        one = float(ring_allreduce_time(t, S, alpha, beta))
        rows.append({"link": name, "GBps": gbps, "S": S, "one_allreduce_s": one,
                     "layer_s": float(tp_comm_time_per_layer(t, b, s, h, alpha, beta, e=e)),
                     "layer_full_recompute_s": float(tp_comm_time_per_layer(t, b, s, h, alpha, beta, "full", e=e))})
    return rows
# --8<-- [end:time]


# --8<-- [start:ratio]
def comm_to_compute_ratio(t, s: int, h: int, flops_per_s: float, link_GBps: float):
    """Bandwidth term only: ρ(t) = T_comm/T_comp = 16(t−1)·F·β / (72h + 12s), independent of b.

    T_comm = 4 ring all-reduces of 2bsh bytes = 4·2(t−1)/t·2bsh·β; T_comp = (72bsh² + 12bs²h)/(t·F).
    """
    t = np.asarray(t, float)
    return 16 * (t - 1) * flops_per_s / (link_GBps * 1e9) / (72 * h + 12 * s)
# --8<-- [end:ratio]


def scaling_figure(ts=(1, 2, 4, 8, 16, 32, 64), shape=GPT3, gpu="H100 SXM") -> str:
    """Communication fraction of a GPT-3-shaped layer vs t on NVLink4 and on NDR (no overlap)."""
    fig, (ax1, ax2) = figures.new(8, 3.4, ncols=2)
    F = PEAK_FLOPS[gpu]
    t = np.array(ts, float)
    for name, gbps in list(links().items())[1::2]:  # NVLink4 and NDR
        sc = tp_scaling(t, shape["b"], shape["s"], shape["h"], F, ALPHA_ASSUMED, 1 / (gbps * 1e9))
        ax1.loglog(t, sc["compute_s"] * 1e3, "k-", lw=1)
        ax1.loglog(t[1:], sc["comm_s"][1:] * 1e3, "o-", ms=3, label=f"통신: {name.split(' (')[0]}")
        ax2.semilogx(t, sc["comm_fraction"], "o-", ms=3, label=name.split(" (")[0])
    ax1.loglog([], [], "k-", lw=1, label=f"계산 ({gpu} peak 가정)")
    ax1.set_xlabel("t")
    ax1.set_ylabel("layer 당 시간 (ms)")
    ax1.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.axvline(8, color="gray", ls=":", lw=1)
    ax2.set_xlabel("t (점선: 한 node 의 8 GPU)")
    ax2.set_ylabel("통신 / (계산 + 통신)")
    ax2.set_ylim(0, 1)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    return figures.svg(fig)


# --------------------------------------------------------------------------- measured (tp_bench)

def tp_runs():
    """Every tp_bench results file, on every hardware (CPU first)."""
    return results.experiment("tp_bench")


def measured_counts(run) -> dict:
    """{case: {"forward": [(op, bytes)], "backward": [...], ...}} for the block cases."""
    out = {}
    for c in run.measurements["cases"]:
        if c["case"].startswith("block"):
            b, s, h = c["shapes"]["input"]  # the global input (an SP rank gets s/t of its rows)
            out[c["case"]] = {"t": c["t"], "b": b, "s": s, "h": h, "forward": [tuple(x) for x in c["forward_calls"]],
                              "backward": [tuple(x) for x in c["backward_calls"]], "diff": c["max_abs_diff"],
                              "tol": case_tolerance(c), "within": case_within(c),
                              "grad_placements": c["grad_placements"]}
    return out


def ring_bytes_per_rank(calls, t: int) -> float:
    """Bytes one rank sends for these collectives under ring algorithms (Ch1-03)."""
    f = {"all_reduce": 2 * (t - 1) / t, "all_gather_into_tensor": (t - 1) / t, "reduce_scatter_tensor": (t - 1) / t}
    return sum(f[op] * nb for op, nb in calls)


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def shapes(plat) -> str:
    return "; ".join(sorted({shape_line(r) for r in plat.runs if r.data["program"] == "tp_bench"})) + "\n\n"


def no_tp(plat) -> str:
    return missing(plat, "이 하드웨어에는 tp_bench 결과가 없습니다")


def sp_rows(run) -> list[list]:
    """Experiment 4's rows for one tp_bench file: the TP block and the SP block side by side."""
    m = measured_counts(run)
    rows = []
    for case in ("block", "block_sp"):
        c = m[case]
        S = c["b"] * c["s"] * c["h"] * 4
        ops = lambda calls: ", ".join(op.replace("_into_tensor", "").replace("_tensor", "") for op, _ in calls)  # noqa: E731
        rows.append([c["t"], case, ops(c["forward"]), ops(c["backward"]),
                     sorted({nb // S for _, nb in c["forward"] + c["backward"]}),
                     f"{ring_bytes_per_rank(c['forward'] + c['backward'], c['t']) / S:.3f}·S", f"{max(c['diff'].values()):.1e}"])
    return rows


def sp_tab(plat) -> str:
    """Experiment 4 on one hardware: SP against TP at every t, and the LayerNorm gradients' placement."""
    rows = [row for run in plat.runs for row in sp_rows(run)]
    ln = sorted({v for run in plat.runs for k, v in measured_counts(run)["block_sp"]["grad_placements"].items()
                 if k.startswith("ln")})
    row_bias = sorted({v for run in plat.runs for k, v in measured_counts(run)["block_sp"]["grad_placements"].items()
                       if k in ("attn.o.bias", "mlp.fc2.bias")})
    return (shapes(plat) + results.markdown_table(
        ["t", "block", "forward", "backward", "각 collective 의 S / (b·s·h·4)", "rank 당 ring bytes", "unsharded 와 max |차|"],
        rows) + f"\n\nSP block 의 LayerNorm gradient placement: {ln}"
        + f"\n\nSP block 의 row-parallel bias (attn.o, mlp.fc2) gradient placement: {row_bias}")


# --------------------------------------------------------------------------- measured GEMM efficiency (gemm_bench)

GEMM_PROGRAM = "gemm_bench"
LAYER_GEMMS = ("qkv", "attn_out", "mlp_up", "mlp_down")  # a layer's four linear GEMMs: the 24bsh² of its forward


def gemm_runs() -> list | None:
    """Every gemm_bench results file, or None when there is none yet (then the page uses η = 1, the peak)."""
    try:
        return results.experiment(GEMM_PROGRAM)
    except results.ResultsError:
        if any((results.RESULTS / GEMM_PROGRAM).glob("*.json")):
            raise  # a file exists but is malformed: fail the build, do not fall back silently
        return None


# --8<-- [start:efficiency]
def gemm_flops(e: dict) -> float:
    """FLOPs of one GEMM [m, k] × [k, n]: 2mnk."""
    return 2.0 * e["m"] * e["n"] * e["k"]


def layer_efficiency(run) -> list[dict]:
    """Per measured (h, t): the layer's four tensor-parallel shard GEMMs together (qkv [n, h]×[h, 3h/t],
    attn_out [n, h/t]×[h/t, h], mlp_up [n, h]×[h, 4h/t], mlp_down [n, 4h/t]×[4h/t, h]; n tokens).
    η = (ΣFLOPs / Σtime) / peak: the fraction of this file's peak GEMM the layer's compute reaches,
    weighted by time, since the summed time is what a layer waits for."""
    peak = gemm_flops(run.measurements["peak"]) / (run.measurements["peak"]["time_us_median"] * 1e-6)
    groups: dict[tuple, list] = {}
    for e in run.measurements["sweep"]:
        if e["family"] in LAYER_GEMMS:
            groups.setdefault((e["h"], e["t"], e["tokens"]), []).append(e)
    out = []
    for (h, t, n), es in sorted(groups.items()):
        if sorted(e["family"] for e in es) != sorted(LAYER_GEMMS):
            continue  # a shape the sweep did not finish: no layer value
        secs = sum(e["time_us_median"] for e in es) * 1e-6
        flops = sum(gemm_flops(e) for e in es)
        out.append({"h": h, "t": t, "tokens": n, "w": h / t, "time_s": secs, "flops_per_s": flops / secs,
                    "eta": flops / secs / peak,
                    "families": {e["family"]: gemm_flops(e) / (e["time_us_median"] * 1e-6) / peak for e in es}})
    return out


def rate_at_width(points: list[dict], w: float, h_model: int) -> dict:
    """The layer's measured rate R (FLOP/s) and η at shard width w = h/t. At each measured width the point whose
    h is closest to the model's h_model (h_model itself when the sweep has it; a tie: the larger h). Between two
    measured widths R and η are interpolated in log w; outside them the nearest end is used, inside = False.
    'hs' names the h the value was read from (two when interpolated)."""
    best: dict[float, dict] = {}
    for p in points:
        key = (abs(np.log(p["h"] / h_model)), -p["h"])
        q = best.get(p["w"])
        if q is None or key < (abs(np.log(q["h"] / h_model)), -q["h"]):
            best[p["w"]] = p
    ws = sorted(best)
    inside = ws[0] <= w <= ws[-1]
    if w <= ws[0] or w >= ws[-1] or w in best:
        p = best[w] if w in best else best[ws[0] if w <= ws[0] else ws[-1]]
        return {"rate": p["flops_per_s"], "eta": p["eta"], "hs": (p["h"],), "inside": inside}
    i = int(np.searchsorted(ws, w))
    lo, hi = best[ws[i - 1]], best[ws[i]]
    f = (np.log2(w) - np.log2(lo["w"])) / (np.log2(hi["w"]) - np.log2(lo["w"]))
    return {"rate": float(lo["flops_per_s"] + f * (hi["flops_per_s"] - lo["flops_per_s"])),
            "eta": float(lo["eta"] + f * (hi["eta"] - lo["eta"])), "hs": (lo["h"], hi["h"]), "inside": True}


def measured_rho(t, s: int, h: int, rate: float, link_GBps: float):
    """Theorem 3.5.4's ρ with the compute at the rate this GPU measured for the shard (R(h/t), FLOP/s) in place
    of a peak F: ρ = 16(t−1)·R·β / (72h + 12s). R is η(h/t) × this file's own measured peak, never another GPU's."""
    return comm_to_compute_ratio(t, s, h, rate, link_GBps)


def speedup(rate_from: float, rate_to: float, t_from: int, t_to: int) -> float:
    """How much faster one rank's share of the layer's GEMMs gets from t_from to t_to ranks: the FLOPs fall by
    t_to/t_from, the rate changes from R(h/t_from) to R(h/t_to). Ideal (constant R, any η): t_to/t_from."""
    return t_to / t_from * rate_to / rate_from
# --8<-- [end:efficiency]


def efficiency_figure(run, label: str) -> str:
    """One panel: the layer's η against h/t for every measured h, and the square GEMM's η against h (dashed)."""
    pts = layer_efficiency(run)
    fig, ax = figures.new(5.5, 3.2)
    for h in sorted({p["h"] for p in pts}):
        line = sorted((p for p in pts if p["h"] == h), key=lambda p: p["w"])
        ax.semilogx([p["w"] for p in line], [p["eta"] for p in line], "o-", ms=2.5, base=2, label=f"h = {h}")
    pk = run.measurements["peak"]
    peak = gemm_flops(pk) / (pk["time_us_median"] * 1e-6)
    sq = sorted((e for e in run.measurements["sweep"] if e["family"] == "square"), key=lambda e: e["h"])
    if sq:
        ax.semilogx([e["h"] for e in sq], [gemm_flops(e) / (e["time_us_median"] * 1e-6) / peak for e in sq], "k--",
                    lw=1, base=2, label="square (x = h)")
    ax.set_xlabel(f"h / t (tokens = {run.params.get('tokens')})")
    ax.set_ylabel(f"η = layer TFLOP/s / peak ({label})")
    ax.set_ylim(0, max(1.05, ax.get_ylim()[1]))
    ax.legend(fontsize=6, ncol=2)
    return figures.svg(fig)


def _peak_line(run) -> tuple[float, str]:
    pk = run.measurements["peak"]
    peak = gemm_flops(pk) / (pk["time_us_median"] * 1e-6)
    return peak, (f"이 하드웨어의 peak GEMM ({pk['m']}×{pk['k']}×{pk['n']}, {pk['dtype']}): **{peak / 1e12:.3g} TFLOP/s** "
                  f"(측정). η 는 같은 파일의 layer 네 shard GEMM 이 그 peak 의 몇 분의 일을 내는가입니다 "
                  f"(shard 의 행 수 m = tokens = {run.params.get('tokens')}).")


def _cpu_efficiency(run, pts) -> str:
    """A CPU file: η against h/t at its largest h only (fp32 BLAS; no ρ, which is a GPU's and GPT-3's)."""
    hmax = max(p["h"] for p in pts)
    line = sorted((p for p in pts if p["h"] == hmax), key=lambda p: p["t"])
    rows = [[p["t"], f"{p['w']:g}", f"{p['flops_per_s'] / 1e9:.1f}", f"{p['eta']:.2f}",
             "" if i == 0 else f"{speedup(line[i - 1]['flops_per_s'], p['flops_per_s'], line[i - 1]['t'], p['t']):.2f}"]
            for i, p in enumerate(line)]
    a, z = line[0], line[-1]
    reading = (f"이 CPU (fp32 BLAS) 에서 h = {hmax} 의 shard 가 t = {a['t']} → {z['t']} 로 좁아지면 η 가 "
               f"{a['eta']:.2f} → {z['eta']:.2f} 입니다: 한 rank 의 계산 시간은 이상적인 {z['t'] / a['t']:g} 배가 아니라 "
               f"**{speedup(a['flops_per_s'], z['flops_per_s'], a['t'], z['t']):.2f} 배** 줄었습니다. GPU 의 값을 예측하지 않고, "
               "shard 가 좁아질 때 효율이 어떻게 변하는지의 모양만 보여 줍니다 (ρ 는 GPU 탭에만 있습니다).")
    return results.markdown_table(["t", f"h/t (h = {hmax})", "layer GFLOP/s", "η", "t 를 늘린 계산 속도 향상 (이상: t 비)"],
                                  rows) + "\n\n" + reading


def _gpu_efficiency(run, pts, ts, shape) -> str:
    """A GPU file: the GPT-3 layer's shard widths h/t, the rate this GPU measured there, and ρ from that rate."""
    nv, ndr = links()["NVLink4 (H100, 노드 안)"], links()["InfiniBand NDR (GPU 당 1 포트, 노드 사이)"]
    F = PEAK_FLOPS["H100 SXM"]
    got = [(t, rate_at_width(pts, shape["h"] / t, shape["h"])) for t in ts]
    rows = []
    for i, (t, r) in enumerate(got):
        src = " … ".join(str(h) for h in r["hs"]) + ("" if r["inside"] else " *")
        rows.append([t, f"{shape['h'] / t:g}", src, f"{r['rate'] / 1e12:.0f}", f"{r['eta']:.2f}",
                     "" if i == 0 else f"{speedup(got[i - 1][1]['rate'], r['rate'], got[i - 1][0], t):.2f}",
                     f"{float(comm_to_compute_ratio(t, shape['s'], shape['h'], F, nv)):.2f}",
                     f"{float(measured_rho(t, shape['s'], shape['h'], r['rate'], nv)):.2f}",
                     f"{float(measured_rho(t, shape['s'], shape['h'], r['rate'], ndr)):.2f}"])
    (t0, a), (t1, z) = got[0], got[-1]
    n = run.params.get("tokens")
    tok = ("" if n == shape["b"] * shape["s"] else
           f" 이 파일의 tokens = {n} 은 GPT-3 layer 의 b·s = {shape['b'] * shape['s']} 와 달라, 행 수가 다른 GEMM 의 효율입니다.")
    exact = all(r["hs"] == (shape["h"],) for _, r in got)
    reading = (f"이 GPU 에서 t = {t0} → {t1} 로 shard 가 좁아지면 η 는 {a['eta']:.2f} → {z['eta']:.2f} 이고, 한 rank 의 GEMM 시간은 "
               f"이상적인 {t1 / t0:g} 배가 아니라 **{speedup(a['rate'], z['rate'], t0, t1):.2f} 배** 줄어듭니다. "
               + ("모든 폭을 GPT-3 의 h = 12288 에서 쟀습니다." if exact else
                  "\"측정한 h\" 열이 GPT-3 의 h 와 다른 행은 다른 h 의 같은 폭에서 읽은 값입니다.") + tok)
    table = results.markdown_table(
        ["t", "h/t (GPT-3)", "측정한 h", "R (TFLOP/s, 측정)", "η", "계산 속도 향상 (직전 t 대비, 이상: 2)",
         "ρ NVLink4 (H100 peak 가정)", "ρ NVLink4 (측정 R)", "ρ NDR (측정 R)"], rows)
    note = ("\n\n\\* 측정한 h/t 범위 밖: 가장 가까운 끝의 값을 썼습니다 (외삽하지 않음)."
            if not all(r["inside"] for _, r in got) else "")
    return (f"ρ 의 계산 속도는 이 GPU 가 shard 폭에서 잰 R 입니다 (GPT-3: b = {shape['b']}, s = {shape['s']}, h = {shape['h']}; "
            f"링크는 vendor 의 한 방향 대역폭). 비교 열은 실험 3 의 표와 같은 H100 SXM peak {F / 1e12:.0f} TFLOP/s 가정입니다.\n\n"
            + table + note + "\n\n" + reading)


def efficiency_tab(plat, ts=(2, 4, 8, 16, 32, 64), shape=GPT3) -> str:
    """Experiment 3 with measured efficiency on one hardware. CPU: η against h/t at its own shapes. GPU: the rate
    it measured at the GPT-3 layer's shard widths, and ρ(t) computed from that rate (not from another GPU's peak)."""
    out = []
    for run in (r for r in plat.runs if r.data["program"] == GEMM_PROGRAM):
        pts = layer_efficiency(run)
        if not pts:
            out.append(missing(plat, "이 gemm_bench 파일에는 layer 의 네 shard GEMM 을 모두 잰 (h, t) 가 없습니다"))
            continue
        _, head = _peak_line(run)
        body = _gpu_efficiency(run, pts, ts, shape) if plat.is_gpu else _cpu_efficiency(run, pts)
        out.append(head + "\n\n" + body + "\n\n" + efficiency_figure(run, run.hardware["kind"].upper()))
    return "\n\n".join(out)


def no_gemm_note() -> str:
    """What the page says when no gemm_bench result exists: the ρ above is the η = 1 assumption."""
    return results.md_to_html(
        '!!! warning "측정된 GEMM 효율 없음: η = 1 (peak) 가정"\n'
        "    이 판에는 `gpu_runs/gemm_bench.py` 의 결과 파일이 없습니다. 그래서 위의 ρ(t) 와 그림은 계산이 vendor peak 그대로\n"
        "    ($\\eta = 1$) 라고 가정한 값이고, 실제보다 큽니다. GEMM sweep 을 돌려 결과 파일이 생기면, 이 자리에 하드웨어마다\n"
        "    shard 모양 $h/t$ 에서 잰 효율 $\\eta$ 와 그것으로 다시 계산한 $\\rho$ 가 나옵니다.\n")


__all__ = ["GPT3", "PEAK_FLOPS", "links", "alpha_beta", "cost_runs", "cost_tab", "layer_time_rows",
           "comm_to_compute_ratio", "scaling_figure", "tp_runs", "measured_counts", "gemm_runs", "layer_efficiency",
           "rate_at_width", "measured_rho", "speedup", "ring_bytes_per_rank", "tp_allreduces_per_layer", "tp_allreduces_per_step",
           "tp_collectives_per_layer", "tp_allreduce_bytes", "ring_allgather_time", "layer_flops", "tp_scaling"]

"""Ch1-05 Bandwidth vs Latency Bound: the code the page runs and the tests import.

Every collective cost here has the α-β form T = a(N)·α + b(N)·S·β: a(N) steps on the critical
path and b(N)·S bytes sent by the busiest rank. The AllReduce algorithms' costs live in
snippets/common/alphabeta.py; this module adds the per-collective (step, byte) models of what
gloo and NCCL run, the threshold S* where the two terms are equal, and the fits to the committed
sweeps (gpu_runs/results/collectives_bench/), one hardware at a time: every results file is fitted
under the models of its own backend, and the page shows one tab per hardware.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from snippets.common import alphabeta as ab

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")


# --8<-- [start:models]
@dataclass(frozen=True)
class CollectiveModel:
    """T(N, S) = steps(N)·α + bytes_factor(N)·S·β for one collective under one algorithm."""

    op: str
    algorithm: str
    steps: Callable[[int], float]          # a(N): messages on the critical path
    bytes_factor: Callable[[int], float]   # b(N): bytes sent by the busiest rank, per byte of S
    source: str

    def time(self, n, s, alpha, beta):
        return self.steps(n) * alpha + self.bytes_factor(n) * np.asarray(s, float) * beta

    def threshold(self, n, alpha, beta):
        """S* where the latency and bandwidth terms are equal: a(N)α = b(N)S*β."""
        return self.steps(n) / self.bytes_factor(n) * alpha / beta


def _log2(n):
    return int(ab.log2_ceil(n))


# What gloo runs for each torch.distributed call the benchmark makes (S as in nccl-tests).
GLOO_MODELS = {
    "all_reduce": CollectiveModel(
        "all_reduce", "ring (ReduceScatter + AllGather)",
        lambda n: 2 * (n - 1), lambda n: 2 * (n - 1) / n, "gloo/allreduce.cc ring()"),
    "reduce_scatter": CollectiveModel(
        "reduce_scatter", "전체 all_reduce 후 자기 블록 복사",
        lambda n: 2 * (n - 1), lambda n: 2 * (n - 1) / n,
        "ProcessGroupGloo.cpp reduce_scatter_tensor_coalesced"),
    "all_gather": CollectiveModel(
        "all_gather", "ring", lambda n: n - 1, lambda n: (n - 1) / n, "gloo/allgather.cc"),
    "broadcast": CollectiveModel(
        "broadcast", "binomial tree", lambda n: _log2(n), lambda n: _log2(n), "gloo/broadcast.cc"),
    "all_to_all": CollectiveModel(
        "all_to_all", "pairwise exchange", lambda n: n - 1, lambda n: (n - 1) / n, "gloo/alltoall.cc"),
}

# What NCCL runs for the same calls, as the α-β model of this page assumes it: ring algorithms (the
# tuner may pick tree, NVLS or others for all_reduce: docs/ch1-collective/04-nccl-topology.md), with
# b(N) = nccl-tests' busbw factors (doc/PERFORMANCE.md; snippets.common.alphabeta.BUSBW_FACTOR).
# Broadcast is a pipelined ring (chain): N − 1 hops, every rank forwards S once. all_to_all is
# point-to-point sends to every peer, counted in the single-port model as N − 1 steps.
NCCL_MODELS = {
    "all_reduce": CollectiveModel(
        "all_reduce", "ring (ReduceScatter + AllGather)",
        lambda n: 2 * (n - 1), lambda n: 2 * (n - 1) / n, "NCCL ring AllReduce"),
    "reduce_scatter": CollectiveModel(
        "reduce_scatter", "ring ReduceScatter", lambda n: n - 1, lambda n: (n - 1) / n, "NCCL ring ReduceScatter"),
    "all_gather": CollectiveModel(
        "all_gather", "ring", lambda n: n - 1, lambda n: (n - 1) / n, "NCCL ring AllGather"),
    "broadcast": CollectiveModel(
        "broadcast", "ring (pipeline 된 사슬)", lambda n: n - 1, lambda n: 1.0, "NCCL ring Broadcast"),
    "all_to_all": CollectiveModel(
        "all_to_all", "모든 peer 에 send/recv", lambda n: n - 1, lambda n: (n - 1) / n, "ncclSend/ncclRecv group"),
}
MODELS = {"gloo": GLOO_MODELS, "nccl": NCCL_MODELS}


def models_for(result) -> dict[str, CollectiveModel]:
    """The (step, byte) models of the backend a results file ran on."""
    return MODELS[result.hardware["backend"]]


# The textbook ring reduce-scatter, which gloo does NOT run (half of a ring AllReduce).
RING_REDUCE_SCATTER = CollectiveModel(
    "reduce_scatter", "ring ReduceScatter (교과서)", lambda n: n - 1, lambda n: (n - 1) / n,
    "Thakur et al. 2005")
# --8<-- [end:models]


# --8<-- [start:threshold]
# a(N)/b(N) for the AllReduce algorithms of snippets.common.alphabeta: S* = a/b · α/β.
def threshold_ratio(fn, n) -> float:
    """a(N)/b(N) of any affine cost fn(n, s, alpha, beta) = a·α + b·s·β, read off the function."""
    a = float(fn(n, 0.0, 1.0, 0.0))
    b = float(fn(n, 1.0, 0.0, 1.0))
    return a / b


def bandwidth_fraction(s, s_star):
    """Share of T spent in the bandwidth term: bSβ / (aα + bSβ) = S / (S + S*)."""
    s = np.asarray(s, float)
    return s / (s + s_star)


def size_for_fraction(eta, s_star):
    """Smallest S whose bandwidth share is at least eta: S = η/(1−η)·S*."""
    return eta / (1 - eta) * s_star
# --8<-- [end:threshold]


def threshold_table(ns=(2, 8, 64, 1024)) -> list[dict]:
    """a(N)/b(N) for every AllReduce algorithm in snippets.common.alphabeta and the gloo models."""
    rows = []
    for name, fn in ab.ALGORITHMS.items():
        rows.append({"name": f"AllReduce: {name}", **{n: threshold_ratio(fn, n) for n in ns}})
    for op, m in GLOO_MODELS.items():
        if op != "all_reduce":
            rows.append({"name": f"{op}: {m.algorithm}", **{n: m.steps(n) / m.bytes_factor(n) for n in ns}})
    return rows


# --8<-- [start:fit]
def measured(result, op: str) -> list[dict]:
    return [r for r in result.measurements if r["op"] == op]


def fit_collective(rows: list[dict], model: CollectiveModel, n: int) -> dict:
    """Least-squares α, β of T = a(N)α + b(N)Sβ to measured medians (relative error weighted)."""
    sizes = np.array([r["bytes"] for r in rows], dtype=float)
    secs = np.array([r["time_us_median"] for r in rows]) * 1e-6
    steps = np.full_like(sizes, model.steps(n))
    per_rank_bytes = model.bytes_factor(n) * sizes
    alpha, beta, rel = ab.fit_alpha_beta(steps, per_rank_bytes, secs)
    return {"op": model.op, "n": n, "model": model, "algorithm": model.algorithm, "alpha": alpha, "beta": beta,
            "bandwidth_GBps": 1 / beta / 1e9, "s_star": model.threshold(n, alpha, beta),
            "sizes": sizes, "seconds": secs, "predicted": model.time(n, sizes, alpha, beta),
            "rel_residuals": rel}


def fit_all(result, models=None) -> dict[str, dict]:
    """Fit every collective of one results file under `models` (default: what its backend runs)."""
    models = models or models_for(result)
    n = result.hardware["world_size"]
    return {op: fit_collective(measured(result, op), models[op], n) for op in OPS}
# --8<-- [end:fit]


def fit_summary_rows(fits: dict[str, dict]) -> list[list]:
    rows = []
    for op, f in fits.items():
        m = f["model"]
        r = np.abs(f["rel_residuals"])
        big = f["sizes"] >= 1 << 20
        rows.append([op, m.algorithm, f"{m.steps(f['n']):g}", f"{m.bytes_factor(f['n']):.3g}·S",
                     f"{f['alpha'] * 1e6:.0f} µs", f"{f['bandwidth_GBps']:.3f} GB/s",
                     f"{f['s_star'] / 2**10:.0f} KiB", f"{np.median(r):.0%}", f"{r.max():.0%}",
                     f"{r[big].max():.0%}", f"{int(f['sizes'][r.argmax()]):,} B"])
    return rows


def residual_table_rows(fits: dict[str, dict]) -> tuple[list[str], list[list]]:
    """One row per measured size: measured / predicted (µs) and relative residual, per collective."""
    sizes = sorted({int(s) for f in fits.values() for s in f["sizes"]})
    header = ["S (bytes)"] + [f"{op} 측정 / 예측 (µs), 오차" for op in fits]
    rows = []
    for s in sizes:
        row = [f"{s:,}"]
        for f in fits.values():
            i = np.flatnonzero(f["sizes"] == s)
            if len(i) == 0:
                row.append("—")
                continue
            i = i[0]
            row.append(f"{f['seconds'][i] * 1e6:,.0f} / {f['predicted'][i] * 1e6:,.0f}, "
                       f"{f['rel_residuals'][i]:+.0%}")
        rows.append(row)
    return header, rows


def fits_figure(fits: dict[str, dict], title: str = ""):
    from snippets.common import figures

    fig, ax = figures.new(7.5, 4.5)
    for (op, f), color in zip(fits.items(), ["C0", "C1", "C2", "C3", "C4"]):
        ax.loglog(f["sizes"], f["seconds"] * 1e6, "o", color=color, ms=3.5, label=f"{op} 측정")
        ax.loglog(f["sizes"], f["predicted"] * 1e6, "-", color=color, lw=1)
        ax.axvline(f["s_star"], color=color, ls=":", lw=0.8)
    ax.set_xlabel("메시지 크기 S (bytes)")
    ax.set_ylabel("시간 (µs, median)")
    ax.set_title(title + " — 선: α-β fit, 점선: 각 collective 의 S*", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return figures.svg(fig)


# --8<-- [start:oversub]
def small_message_median_us(result, op: str = "all_reduce", max_bytes: int = 1024) -> float:
    """Median of the measured medians at S ≤ max_bytes: the latency plateau of one collective."""
    return float(np.median([r["time_us_median"] for r in measured(result, op) if r["bytes"] <= max_bytes]))


def oversubscription_rows(small, large) -> list[dict]:
    """Per collective: the measured small-message ratio N_large / N_small against the step-count ratio
    a(N_large)/a(N_small) of the backend's model: what the latency term alone predicts."""
    n1, n2 = small.hardware["world_size"], large.hardware["world_size"]
    rows = []
    for op, m in models_for(small).items():
        t1, t2 = small_message_median_us(small, op), small_message_median_us(large, op)
        rows.append({"op": op, "t_small": t1, "t_large": t2, "measured_ratio": t2 / t1,
                     "step_ratio": m.steps(n2) / m.steps(n1)})
    return rows


def oversubscribed(result) -> bool:
    """More processes than cores: a CPU run whose ranks wait for the scheduler (GUIDE). A GPU run has
    one GPU per rank."""
    h = result.hardware
    return h["kind"] == "cpu" and h["world_size"] > h["cpu_count"]
# --8<-- [end:oversub]


def oversubscription_reading(small, large) -> str:
    """The sentence experiment 3 draws from one CPU pair of results: which collectives' small-message times
    grew by at least the step-count ratio, computed (a measurement on a loaded 2-core box varies)."""
    rows = oversubscription_rows(small, large)
    over = [r["op"] for r in rows if r["measured_ratio"] >= r["step_ratio"]]
    under = [f"{r['op']} ({r['measured_ratio']:.2f} 배, step 수 비 {r['step_ratio']:.2f})" for r in rows
             if r["measured_ratio"] < r["step_ratio"]]
    if not under:
        head = f"이 책의 CPU 결과 (gloo) 에서는 {len(rows)} 개 collective 모두 작은 메시지 시간이 step 수 비 이상으로 늘었습니다."
    else:
        head = (f"이 책의 CPU 결과 (gloo) 에서는 {len(rows)} 개 collective 중 {len(over)} 개 ({', '.join(over) or '없음'}) 의 작은 메시지 시간이 "
                f"step 수 비 이상으로 늘었고, {', '.join(under)} 는 그보다 덜 늘었습니다.")
    return head


# --8<-- [start:crossover]
def crossover_table(alpha: float, beta: float, ns=(2, 4, 8, 16, 64, 256, 1024)) -> list[dict]:
    """S above which ring AllReduce beats each tree-like algorithm, at the given α, β.

    inf: ring is never faster; 0.0: ring is never slower (fewer or equal steps and fewer bytes).
    """
    out = []
    for n in ns:
        row = {"N": n, "ring S*": n * alpha / beta}
        for name in ("recursive doubling", "double binary tree"):
            other = ab.ALGORITHMS[name]
            row[name] = float(ab.crossover_bytes(n, alpha, beta, other, ab.ring_allreduce_time))
        out.append(row)
    return out
# --8<-- [end:crossover]


# --8<-- [start:links]
# Published per-direction bandwidths (NOT measured here; ERRATA row 8): NVLink totals are
# bidirectional (A100 600 GB/s, H100 900 GB/s), so one direction is half. InfiniBand HDR is
# 200 Gb/s and NDR 400 Gb/s per port per direction. PCIe Gen4 x16 ≈ 31.5 GB/s per direction.
LINKS_GBPS = {
    "NVLink 3 (A100, 한 방향)": 300.0,
    "NVLink 4 (H100, 한 방향)": 450.0,
    "PCIe Gen4 x16 (한 방향)": 31.5,
    "InfiniBand HDR (포트당 한 방향)": 200 / 8,
    "InfiniBand NDR (포트당 한 방향)": 400 / 8,
}
ALPHA_ASSUMED = 5e-6  # s per message: a stated assumption (the order of NCCL's per-step latency), not a datum


def link_rows(n: int, bucket_sizes, alpha: float = ALPHA_ASSUMED) -> list[dict]:
    """Ring AllReduce S* = Nα/β on each link, and the bandwidth share of each bucket size."""
    rows = []
    for name, gbps in LINKS_GBPS.items():
        beta = 1 / (gbps * 1e9)
        s_star = n * alpha / beta
        rows.append({"link": name, "GBps": gbps, "s_star": s_star,
                     **{s: float(bandwidth_fraction(s, s_star)) for s in bucket_sizes}})
    return rows


ALPHA_RANGE = (1e-6, 2.5e-6, 5e-6, 10e-6)  # the η of a link moves with the assumed α: show the spread


def eta_vs_alpha(n: int, s: float, alphas=ALPHA_RANGE) -> dict[str, list[float]]:
    """Bandwidth share η(S) of each published link for several assumed α (ring AllReduce, N ranks)."""
    return {name: [float(bandwidth_fraction(s, n * a * gbps * 1e9)) for a in alphas]
            for name, gbps in LINKS_GBPS.items()}
# --8<-- [end:links]


# --8<-- [start:ddp]
def ddp_bucket_defaults() -> dict:
    """DDP's bucket limits as the installed torch defines them (bytes)."""
    import torch.distributed as dist
    import torch.nn.parallel.distributed as ddp_mod

    return {"bucket_cap_mb": ddp_mod._DEFAULT_BUCKET_CAP_MB,
            "mb_to_bytes": ddp_mod._MB_TO_BYTES,
            "bucket_cap_bytes": int(ddp_mod._DEFAULT_BUCKET_CAP_MB * ddp_mod._MB_TO_BYTES),
            "first_bucket_bytes": int(dist._DEFAULT_FIRST_BUCKET_BYTES)}
# --8<-- [end:ddp]


def crossover_figure(alpha: float, beta: float, label: str):
    from snippets.common import figures

    ns = np.array([2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
    fig, ax = figures.new(7, 4)
    ax.loglog(ns, ns * alpha / beta, "o-", label="ring 의 S* = Nα/β")
    ax.loglog(ns, ab.log2_ceil(ns) * alpha / beta, "s-", label="double binary tree 의 S* = ⌈log₂N⌉α/β")
    rd = [float(ab.crossover_bytes(n, alpha, beta, ab.recursive_doubling_time, ab.ring_allreduce_time)) for n in ns]
    rd = [v if np.isfinite(v) else np.nan for v in rd]  # N = 2: ring never wins, nothing to draw
    ax.loglog(ns, rd, "^--", label="ring 이 recursive doubling 을 이기는 S")
    for s, name in [(1 << 20, "DDP 첫 bucket 1 MiB"), (25 << 20, "DDP bucket 25 MiB")]:
        ax.axhline(s, color="gray", ls=":", lw=1)
        ax.text(ns[0], s * 1.15, name, fontsize=8, color="gray")
    ax.set_xlabel("N (ranks)")
    ax.set_ylabel("bytes")
    ax.set_title(label, fontsize=9)
    ax.legend(fontsize=8)
    return figures.svg(fig)


# --8<-- [start:gap]
GAP_PROGRAM = "cpu_allreduce_gap"


def shm_memory_passes(n: int) -> float:
    """Copy-equivalents of S that DeepSpeed 0.19.8's shm all-reduce moves through memory per rank
    (csrc/cpu/comm/shm.cpp, distributed_naive_reduce, S ≥ 1 MiB): copy-in of S (read S, write S),
    reduce of its slice (read N·S/N, write S/N), copy-out of S (read S, write S). A copy of S reads
    and writes S, so the three passes are 1 + (1 + 1/N)/2 + 1 copies."""
    return 2 + (1 + 1 / n) / 2


def gap_rows(result) -> list[dict]:
    """Per size: busbw of gloo and ds_shm, the memcpy rate, and the shm ceiling the memcpy rate implies."""
    n = result.hardware["world_size"]
    by = {}
    for m in result.measurements:
        by.setdefault(m["bytes"], {})[m["method"]] = m
    rows = []
    for s in sorted(by):
        d = by[s]
        if not {"gloo", "memcpy"} <= set(d):
            continue
        copy = d["memcpy"]["algbw_GBps"]
        rows.append({"bytes": s, "gloo": d["gloo"]["busbw_GBps"],
                     "ds_shm": d["ds_shm"]["busbw_GBps"] if "ds_shm" in d else None,
                     "memcpy": copy,
                     # the three-pass path (distributed_naive_reduce) runs from 1 MiB (NAIVE_ALLREDUCE_THRESHOLD)
                     "shm_ceiling": (copy * ab.BUSBW_FACTOR["all_reduce"](n) / shm_memory_passes(n)
                                     if s >= 1 << 20 else None),
                     "wrong": sum(v["wrong"] for v in d.values())})
    return rows
# --8<-- [end:gap]


def gap_figure(result) -> str:
    from snippets.common import figures

    rows = gap_rows(result)
    s = [r["bytes"] for r in rows]
    fig, ax = figures.new(7, 4)
    ax.loglog(s, [r["memcpy"] for r in rows], "k.-", label="memcpy (GB/s 복사, 모든 rank 동시에)")
    big = [r for r in rows if r["shm_ceiling"] is not None]
    ax.loglog([r["bytes"] for r in big], [r["shm_ceiling"] for r in big], "k:",
              label="shm 상한 = memcpy × 2(N−1)/N ÷ 메모리 통과 수 (S ≥ 1 MiB)")
    if all(r["ds_shm"] for r in rows):
        ax.loglog(s, [r["ds_shm"] for r in rows], "o-", label="DeepSpeed shm AllReduce busbw")
    ax.loglog(s, [r["gloo"] for r in rows], "s-", label="gloo all_reduce busbw")
    ax.set_xlabel("메시지 크기 S (bytes)")
    ax.set_ylabel("GB/s")
    ax.legend(fontsize=8)
    return figures.svg(fig)


# ---------------------------------------------------------------- one tab per hardware

def timing_runs(plat) -> list:
    """The runs of one hardware whose times the page compares: N ≥ 2 and, on CPU, no more processes
    than cores (GUIDE). On a GPU platform every world size qualifies (one GPU per rank)."""
    return [r for r in plat.runs if r.hardware["world_size"] >= 2 and not oversubscribed(r)]


def _unit(plat) -> str:
    return "GPUs" if plat.is_gpu else "processes"


def _size(nbytes: float) -> str:
    """KiB below 1 MiB, MiB above, three significant digits (no exponent notation)."""
    return f"{nbytes / 2**20:.3g} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.3g} KiB"


def _missing(plat, what: str) -> str:
    have = ", ".join(str(n) for n in sorted(plat.by_world))
    return f"이 하드웨어에는 {what} 측정이 없습니다 (있는 N: {have})."


def fit_readings(result, fits: dict) -> list[str]:
    """Experiment 2's readings of one fit: scatter of the repeats, spread of 1/β, where each error peaks."""
    spread = [m["time_us_p90"] / m["time_us_median"] for m in result.measurements]
    bw = {op: f["bandwidth_GBps"] for op, f in fits.items()}
    out = [f"흔들림: {len(spread)} 개 측정점 중 p90 이 median 의 2 배를 넘는 점 {sum(q > 2 for q in spread)} 개, "
           f"p90 / median 의 최댓값 {max(spread):.1f}",
           f"fit 한 1/β: 가장 큰 collective {max(bw, key=bw.get)} ({max(bw.values()):.3g} GB/s), 가장 작은 collective "
           f"{min(bw, key=bw.get)} ({min(bw.values()):.3g} GB/s), 비 {max(bw.values()) / min(bw.values()):.1f} 배"]
    for op, f in fits.items():
        worst = np.abs(f["rel_residuals"]).argmax()
        big = f["sizes"] >= 1 << 20
        tail = f", S ≥ 1 MiB 에서 최대 {np.abs(f['rel_residuals'][big]).max():.0%}" if big.any() else ""
        out.append(f"{op}: 가장 큰 상대 오차 {abs(f['rel_residuals'][worst]):.0%} (S = {int(f['sizes'][worst]):,} B)"
                   f"{tail}; S* = {_size(f['s_star'])}")
    return out


SUMMARY_HEADER = ["collective", "가정한 알고리즘", "a(N)", "b(N)", "fit α", "fit 1/β", "S*", "median |오차|", "max |오차|",
                  "max |오차|, S ≥ 1 MiB", "max |오차| 의 S"]


def fit_block(result, title: str) -> str:
    """Markdown for one results file: the fit of all five collectives, readings, figure, every point."""
    from snippets import results

    fits = fit_all(result)
    header, rows = residual_table_rows(fits)
    points = results.markdown_table(header, rows).replace("\n", "\n    ")
    return "\n\n".join([
        results.markdown_table(SUMMARY_HEADER, fit_summary_rows(fits)),
        "\n".join(f"- {t}" for t in fit_readings(result, fits)),
        fits_figure(fits, title),
        f'??? note "측정점마다: 측정 median / fit 예측 (µs), 상대 오차 = (예측 − 측정)/측정 — {title}"\n\n    {points}'])


# --8<-- [start:tabs]
def fit_tab(plat) -> str:
    """Experiment 2 on one hardware: every timing run fitted under its backend's models."""
    runs = timing_runs(plat)
    if not runs:
        return _missing(plat, "시간을 비교할 수 있는 (N ≥ 2, CPU 면 N ≤ core 수)")
    backend = runs[0].hardware["backend"]
    return "\n\n".join(f"**N = {r.hardware['world_size']} {_unit(plat)}, {backend}**\n\n"
                        + fit_block(r, f"{backend}, {r.hardware['world_size']} {_unit(plat)}") for r in runs)


def reduce_scatter_tab(plat) -> str:
    """Which reduce-scatter the backend runs: the measured time ratio RS/AR at S ≥ 1 MiB against the
    textbook ring's (N−1)/N ÷ 2(N−1)/N = 0.5 and an all-reduce-priced RS's 1; on gloo, the refit too."""
    lines = []
    for r in [r for r in plat.runs if r.hardware["world_size"] >= 2]:
        n = r.hardware["world_size"]
        ar = {m["bytes"]: m["time_us_median"] for m in measured(r, "all_reduce")}
        rs = {m["bytes"]: m["time_us_median"] for m in measured(r, "reduce_scatter")}
        ratio = float(np.median([rs[s] / ar[s] for s in rs if s in ar and s >= 1 << 20]))
        near = "all_reduce 의 비용 (1)" if abs(np.log(ratio)) < abs(np.log(ratio / 0.5)) else "교과서 ring (0.5)"
        lines.append(f"- N = {n} {_unit(plat)}{' (과다 구독)' if oversubscribed(r) else ''}: S ≥ 1 MiB 에서 reduce_scatter "
                     f"시간 / all_reduce 시간의 median = {ratio:.2f}, {near} 에 더 가깝습니다.")
    base = next(iter(timing_runs(plat)), None)
    if base is not None and base.hardware["backend"] == "gloo":
        n = base.hardware["world_size"]
        fits = fit_all(base)
        textbook = fit_collective(measured(base, "reduce_scatter"), RING_REDUCE_SCATTER, n)
        lines += [f"- N = {n} 에서 다시 fit: all_reduce 의 1/β = {fits['all_reduce']['bandwidth_GBps']:.3f} GB/s; "
                  f"reduce_scatter 를 gloo 모델 (= all_reduce) 로 1/β = {fits['reduce_scatter']['bandwidth_GBps']:.3f} GB/s, "
                  f"S* = {_size(fits['reduce_scatter']['s_star'])}; 교과서 ring 모델로 1/β = "
                  f"{textbook['bandwidth_GBps']:.3f} GB/s, S* = {_size(textbook['s_star'])} (잔차도 같음: "
                  f"{np.allclose(textbook['rel_residuals'], fits['reduce_scatter']['rel_residuals'])})"]
    return "\n".join(lines) or _missing(plat, "N ≥ 2 인")


def oversubscription_tab(plat) -> str:
    """Experiment 3 on one hardware: small-message times from the smallest to the largest N against the
    step-count ratio; on CPU, the fit of every oversubscribed run."""
    from snippets import results

    runs = [r for r in plat.runs if r.hardware["world_size"] >= 2]
    if len(runs) < 2:
        return _missing(plat, "N 이 둘 이상인")
    small, large = runs[0], runs[-1]
    n1, n2 = small.hardware["world_size"], large.hardware["world_size"]
    rows = oversubscription_rows(small, large)
    cores = ", ".join(f"N={r.hardware['world_size']}: {r.hardware['cpu_count']}" for r in runs)
    state = (f"N = {n2} 은 core 보다 process 가 많습니다 (과다 구독)." if oversubscribed(large) else
             f"rank 마다 GPU 가 하나라 N = {n2} 도 과다 구독이 아닙니다." if plat.is_gpu else
             f"N = {n2} 도 core 수 이하입니다.")
    table = results.markdown_table(
        ["collective", f"S ≤ 1 KiB median, N={n1}", f"S ≤ 1 KiB median, N={n2}", f"측정 비 N={n2}/N={n1}",
         f"step 수 비 a({n2})/a({n1})"],
        [[r["op"], f"{r['t_small']:,.0f} µs", f"{r['t_large']:,.0f} µs", f"{r['measured_ratio']:.1f}×",
          f"{r['step_ratio']:.1f}×"] for r in rows])
    far = [r["op"] for r in rows if r["measured_ratio"] > 2 * r["step_ratio"]]
    near = [r["op"] for r in rows if r["measured_ratio"] <= 2 * r["step_ratio"]]
    out = [f"{'CPU cores' if not plat.is_gpu else 'host CPU cores'} ({cores}). {state}", table,
           f"측정 비가 step 수 비의 2 배를 넘는 collective: {', '.join(far) or '없음'}; 2 배 이내: {', '.join(near) or '없음'}."]
    for r in [r for r in runs if oversubscribed(r)]:
        n = r.hardware["world_size"]
        out += [f"**N = {n} processes 의 fit (과다 구독)**", fit_block(r, f"{r.hardware['backend']}, {n} processes on "
                                                                     f"{r.hardware['cpu_count']} cores (oversubscribed)")]
    return "\n\n".join(out)


def crossover_tab(plat) -> str:
    """Experiment 4 on one hardware: its all_reduce fit at the smallest timing N as the link constants,
    extrapolated to larger N."""
    from snippets import results

    runs = timing_runs(plat)
    if not runs:
        return _missing(plat, "fit 할 수 있는 (N ≥ 2, CPU 면 N ≤ core 수)")
    base = runs[0]
    n0 = base.hardware["world_size"]
    f = fit_all(base)["all_reduce"]
    a, b = f["alpha"], f["beta"]
    fmt = lambda v: ("없음 (ring 이 항상 느림)" if v == float("inf") else  # noqa: E731
                     "모든 S (ring 이 항상 빠르거나 같음)" if v == 0 else _size(v))
    rows = crossover_table(a, b)
    big = [r["N"] for r in crossover_table(a, b, ns=2 ** np.arange(1, 11)) if r["ring S*"] > 25 * 2**20]
    first = f"{big[0]}" if big else "1024 까지 없음"
    label = f"{base.hardware['backend']}, N = {n0} 의 fit 상수 (α = {a * 1e6:.3g} µs, 1/β = {1 / b / 1e9:.3g} GB/s) 로 외삽"
    return "\n\n".join([
        f"fit 상수 (all_reduce, N = {n0} {_unit(plat)}): α = {a * 1e6:.3g} µs, 1/β = {1 / b / 1e9:.3g} GB/s, "
        f"α/β = {_size(a / b)}; 측정된 N = {n0} 의 경계 S* = {_size(f['s_star'])}. "
        f"N ≠ {n0} 의 값은 측정이 아니라 외삽입니다.",
        results.markdown_table(["N", "ring 의 S* = Nα/β", "ring 이 recursive doubling 을 이기는 S",
                                "ring 이 double binary tree 를 이기는 S"],
                               [[r["N"], fmt(r["ring S*"]), fmt(r["recursive doubling"]), fmt(r["double binary tree"])]
                                for r in rows]),
        f"Ring 의 S* 가 25 MiB 를 넘는 가장 작은 2 의 거듭제곱 N: {first}",
        crossover_figure(a, b, label)])
# --8<-- [end:tabs]


def fit_spread_tab(plat) -> str:
    """Exercise 3 (a): how far the fitted constants of one hardware's collectives are from one link constant."""
    runs = timing_runs(plat)
    if not runs:
        return _missing(plat, "fit 할 수 있는")
    out = []
    for r in runs:
        fits = fit_all(r)
        bws = {op: f["bandwidth_GBps"] for op, f in fits.items()}
        alphas = {op: f["alpha"] * 1e6 for op, f in fits.items()}
        out.append(f"- N = {r.hardware['world_size']} {_unit(plat)}: 1/β 최소 {min(bws.values()):.3g} GB/s "
                   f"({min(bws, key=bws.get)}), 최대 {max(bws.values()):.3g} GB/s ({max(bws, key=bws.get)}), 비 "
                   f"{max(bws.values()) / min(bws.values()):.1f}×; α 최소 {min(alphas.values()):.3g} µs, 최대 "
                   f"{max(alphas.values()):.3g} µs")
    return "\n".join(out)


# ---------------------------------------------------------------- experiment 7: the device's own copy rate

MEM_PROGRAM = "mem_bandwidth"
COLL_PROGRAM = "collectives_bench"


# --8<-- [start:ceiling]
def copy_ceiling(result) -> dict:
    """The fastest device-to-device copy of one mem_bandwidth file (bytes copied / time, over its sizes) and the
    copy at its largest size (a buffer far larger than any cache: the DRAM or HBM rate itself)."""
    d2d = result.measurements["device_to_device"]
    best = max(d2d["rows"], key=lambda r: r["GBps"])
    big = max(d2d["rows"], key=lambda r: r["bytes"])
    return {"memory": d2d["memory"], "GBps": best["GBps"], "at": best["bytes"], "largest_GBps": big["GBps"],
            "largest": big["bytes"], "by_size": {r["bytes"]: r["GBps"] for r in d2d["rows"]}}


def best_busbw(result) -> dict[str, dict]:
    """Per collective of one collectives_bench file: its largest measured busbw and the size it came at."""
    out = {}
    for m in result.measurements:
        if m["op"] not in out or m["busbw_GBps"] > out[m["op"]]["GBps"]:
            out[m["op"]] = {"GBps": m["busbw_GBps"], "at": m["bytes"]}
    return out
# --8<-- [end:ceiling]


def same_hardware(plat, program: str):
    """The Platform of `program`'s results on the hardware of `plat` (same kind, backend, GPU model), or None."""
    from snippets import results

    h = plat.runs[0].hardware
    key = (h["kind"], h["backend"], h.get("gpu_name"))
    try:
        others = results.platforms(results.experiment(program))
    except results.ResultsError:
        return None
    return next((p for p in others if (p.runs[0].hardware["kind"], p.runs[0].hardware["backend"],
                                       p.runs[0].hardware.get("gpu_name")) == key), None)


def same_size_ratios(ceiling: dict, coll_run) -> list[dict]:
    """At every size both files measured: each collective's busbw over the copy rate at that size."""
    return [{"op": m["op"], "bytes": m["bytes"], "ratio": m["busbw_GBps"] / ceiling["by_size"][m["bytes"]]}
            for m in coll_run.measurements if m["bytes"] in ceiling["by_size"]]


def ceiling_tab(plat) -> str:
    """Experiment 7 on one hardware: the copy rate by size, its maximum as the ceiling, and the collectives
    this page measured on the same hardware (collectives_bench, experiment 2) read against it."""
    from snippets import results

    run = plat.runs[0]
    c = copy_ceiling(run)
    coll = same_hardware(plat, COLL_PROGRAM)
    runs = timing_runs(coll) if coll else []
    ar = {m["bytes"]: m["busbw_GBps"] for m in measured(runs[0], "all_reduce")} if runs else {}
    n0 = f"N = {runs[0].hardware['world_size']}" if runs else ""
    rows = [[_size(r["bytes"]), f"{r['time_us_median']:,.2f}", f"{r['GBps']:,.2f}", f"{r['traffic_GBps']:,.2f}",
             f"{ar[r['bytes']]:,.3g}" if r["bytes"] in ar else "—",
             f"{ar[r['bytes']] / r['GBps']:.1%}" if r["bytes"] in ar else "—"]
            for r in run.measurements["device_to_device"]["rows"]]
    table = results.markdown_table(["S", "copy 시간 (µs, median)", "copy GB/s (bytes / 시간)", "읽기 + 쓰기 GB/s",
                                    f"all_reduce busbw, {n0 or '—'} (GB/s)", "busbw / copy"], rows)
    lines = [f"천장 (이 파일의 최댓값): **{c['GBps']:,.2f} GB/s** (S = {_size(c['at'])}); 가장 큰 크기 "
             f"{_size(c['largest'])} 의 복사: {c['largest_GBps']:,.2f} GB/s"]
    if not runs:
        lines.append(f"이 하드웨어에는 이 페이지의 collective 측정 (`{COLL_PROGRAM}`, 시간을 비교할 수 있는 N ≥ 2) 이 없어 "
                     "나란히 놓을 busbw 가 없습니다.")
    for r in runs:
        best = best_busbw(r)
        top = max(best, key=lambda op: best[op]["GBps"])
        near = max(same_size_ratios(c, r), key=lambda x: x["ratio"], default=None)
        lines.append(f"N = {r.hardware['world_size']} {_unit(coll)} ({r.hardware['backend']}): 가장 빠른 collective "
                     f"{top} 의 busbw {best[top]['GBps']:,.3g} GB/s (S = {_size(best[top]['at'])}) = 천장의 "
                     f"{best[top]['GBps'] / c['GBps']:.1%}; " + ", ".join(
                         f"{op} {b['GBps'] / c['GBps']:.1%}" for op, b in best.items() if op != top)
                     + f"; 천장을 넘은 collective {sum(b['GBps'] > c['GBps'] for b in best.values())} 개"
                     + ("" if near is None else f"; 같은 S 에서 복사 속도에 가장 가까운 점: {near['op']}, "
                        f"S = {_size(near['bytes'])}, busbw / copy = {near['ratio']:.1%}"))
    head = (f"{c['memory']} 안의 복사 (`Tensor.copy_`, uint8, torch threads {run.params['torch_threads']}); 복사가 "
            f"맞는지 검사: **{run.measurements['check']['ok']}**")
    return "\n\n".join([head, table, "\n".join(f"- {x}" for x in lines)])

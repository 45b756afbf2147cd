"""Ch1-05 Bandwidth vs Latency Bound: the code the page runs and the tests import.

Every collective cost here has the α-β form T = a(N)·α + b(N)·S·β: a(N) steps on the critical
path and b(N)·S bytes sent by the busiest rank. The AllReduce algorithms' costs live in
snippets/common/alphabeta.py; this module adds the per-collective (step, byte) models of what
gloo actually runs, the threshold S* where the two terms are equal, and the fits to the
committed gloo sweeps (gpu_runs/results/collectives_bench/).
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
        "all_reduce", "ring (reduce-scatter + all-gather)",
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

# The textbook ring reduce-scatter, which gloo does NOT run (half of a ring AllReduce).
RING_REDUCE_SCATTER = CollectiveModel(
    "reduce_scatter", "ring reduce-scatter (교과서)", lambda n: n - 1, lambda n: (n - 1) / n,
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
    return {"op": model.op, "n": n, "algorithm": model.algorithm, "alpha": alpha, "beta": beta,
            "bandwidth_GBps": 1 / beta / 1e9, "s_star": model.threshold(n, alpha, beta),
            "sizes": sizes, "seconds": secs, "predicted": model.time(n, sizes, alpha, beta),
            "rel_residuals": rel}


def fit_all(result, models=None) -> dict[str, dict]:
    """Fit every collective of one results file under `models` (default: what gloo runs)."""
    models = models or GLOO_MODELS
    n = result.hardware["world_size"]
    return {op: fit_collective(measured(result, op), models[op], n) for op in OPS}
# --8<-- [end:fit]


def fit_summary_rows(fits: dict[str, dict]) -> list[list]:
    rows = []
    for op, f in fits.items():
        m = GLOO_MODELS[op]
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


def oversubscription_rows(results_by_n: dict[int, object]) -> list[dict]:
    """Per collective: measured small-message ratio N=4 / N=2 against the step-count ratio a(4)/a(2)."""
    two, four = results_by_n[2], results_by_n[4]
    rows = []
    for op, m in GLOO_MODELS.items():
        t2, t4 = small_message_median_us(two, op), small_message_median_us(four, op)
        rows.append({"op": op, "t2": t2, "t4": t4, "measured_ratio": t4 / t2,
                     "step_ratio": m.steps(4) / m.steps(2)})
    return rows
# --8<-- [end:oversub]


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
        ax.loglog(s, [r["ds_shm"] for r in rows], "o-", label="DeepSpeed shm all-reduce busbw")
    ax.loglog(s, [r["gloo"] for r in rows], "s-", label="gloo all_reduce busbw")
    ax.set_xlabel("메시지 크기 S (bytes)")
    ax.set_ylabel("GB/s")
    ax.legend(fontsize=8)
    return figures.svg(fig)

"""Ch5-03 ZeRO-2 — Gradient Sharding 추가: the code the page runs and the tests import.

Formulas: snippets.common.zero_memory. Measurements: gpu_runs/zero_bench.py results, read with
the readers of the Ch5-02 module (same program, same files); every reader takes one hardware's runs.
"""
from __future__ import annotations

from snippets.common import figures
from snippets.common import zero_memory as zm
from snippets.ch5_zero_sharding.d02_zero_1 import ELEM, by_world, memory_rows, missing_worlds, record  # noqa: F401


# --8<-- [start:predict]
def predict_rows(models=((7e9, 8), (13e9, 16), (70e9, 16), (175e9, 64), (70e9, 1024))):
    """Stage 1 vs stage 2 per-rank model states (GB = 1e9 B) and what gradient sharding saves."""
    rows = []
    for psi, n in models:
        m1, m2 = (zm.zero_memory_bytes(psi, n, s) for s in (1, 2))
        b = zm.zero_memory_breakdown(psi, n, 2)
        rows.append({"psi": psi, "N": n, "stage1_GB": m1 / zm.GB, "stage2_GB": m2 / zm.GB,
                     "params_GB": b["params"] / zm.GB, "grads_GB": b["grads"] / zm.GB,
                     "optimizer_GB": b["optimizer"] / zm.GB, "saved_GB": (m1 - m2) / zm.GB,
                     "saved_formula_GB": zm.GRAD_BYTES * psi * (n - 1) / n / zm.GB,
                     "ratio_vs_dp": zm.zero_memory_bytes(psi, n, 0) / m2})
    return rows
# --8<-- [end:predict]


# --8<-- [start:peak]
def grad_peak_bounds(psi: int, n: int, bucket_elems: int, max_param_elems: int, stage: int) -> tuple[int, int]:
    """Bounds on the 16-bit gradient bytes DeepSpeed holds at once during backward.

    stage 2: the rank's partition buffer (2ψ/N) + one reduce bucket + at most one more parameter's
             gradient (the one whose arrival flushed the bucket; Lemma 5.3.4 for the algorithm of
             Definition 5.3.1, which DeepSpeed's measurements are checked against) — and never
             less than the partition itself;
    stage 1: every gradient stays until the end of backward (2ψ), and the partition buffer is
             allocated while some of them are still alive (at most 2ψ/N more)."""
    part = ELEM * psi // n
    if stage == 2:
        return part, part + ELEM * bucket_elems + ELEM * max_param_elems
    if stage == 1:
        return ELEM * psi, ELEM * psi + part
    raise ValueError(stage)
# --8<-- [end:peak]


# --8<-- [start:peak_rows]
def peak_rows(runs_) -> list[dict]:
    """Measured gradient peak (every rank) for stages 1 and 2 against grad_peak_bounds."""
    rows = []
    for run in by_world(runs_):
        p = run.params
        bucket, max_param = p["dim"] ** 2 + p["dim"], p["dim"] ** 2
        for stage in (1, 2):
            rec = record(run, stage)
            lo, hi = grad_peak_bounds(rec["psi"], rec["world_size"], bucket, max_param, stage)
            for r in rec["per_rank_bytes_all"]:
                rows.append({"N": rec["world_size"], "stage": stage, "rank": r["rank"], "peak": r["grads"],
                             "rest": r["grads_end_of_backward"], "low": lo, "high": hi,
                             "formula": zm.zero_memory_breakdown(rec["psi"], rec["world_size"], stage)["grads"]})
    return rows


def peak_split(runs_) -> list[str]:
    """The stage-2 peak taken apart, from one hardware's files: N = 2 (partition + bucket + one bias
    gradient) and N = 4 (the excess over partition + bucket = one bias + the piece of layer 1's weight
    past rank 0's partition boundary). A world size this hardware lacks is named, not assumed."""
    out, worlds = [], {r.hardware["world_size"]: r for r in runs_}
    if 2 in worlds:
        rec, h = record(worlds[2], 2), worlds[2].params["dim"]
        part, bucket, bias = rec["psi"], ELEM * (h * h + h), ELEM * h
        peak = rec["per_rank_bytes_all"][0]["grads"]
        out.append(f"$N=2$ stage 2 의 peak 분해: partition {part:,} + bucket {bucket:,} + bias gradient {bias:,} = "
                   f"{part + bucket + bias:,} (측정 {peak:,}, {'같음' if peak == part + bucket + bias else '다름'})")
    if 4 in worlds:
        rec, h = record(worlds[4], 2), worlds[4].params["dim"]
        bucket, bias = ELEM * (h * h + h), ELEM * h
        extra = max(r["grads"] - rec["psi"] // 2 - bucket for r in rec["per_rank_bytes_all"])
        piece = ELEM * (rec["psi"] // 4 - (h * h + h))  # layer 1 weight 중 rank 0 partition 경계 너머의 조각
        out.append(f"$N=4$ stage 2: peak − partition − bucket 의 최댓값 {extra:,} bytes; bias {bias:,} + 경계 조각 "
                   f"{piece:,} = {bias + piece:,}; 한 파라미터 $e\\,w$ = {ELEM * h * h:,} bytes")
    lack = missing_worlds(runs_, (2, 4))
    return out + ([lack] if lack else [])
# --8<-- [end:peak_rows]


# --8<-- [start:trace]
def trace_figure(runs_, n: int = 2, rank: int = 0) -> str:
    """Gradient bytes at each collective of backward, stage 1 vs stage 2 (one rank, N ranks), from one
    hardware's files; the smallest N > 1 it has when N = n is missing."""
    worlds = {r.hardware["world_size"]: r for r in runs_}
    if n not in worlds:
        n = min((w for w in worlds if w > 1), default=min(worlds))
    run = worlds[n]
    fig, ax = figures.new(7.0, 3.6)
    for stage, style in ((1, "o-"), (2, "s-")):
        rec = record(run, stage)
        tr = next(r for r in rec["per_rank_bytes_all"] if r["rank"] == rank)["grad_trace"]
        ax.plot(range(1, len(tr) + 1), [t[2] / 2**20 for t in tr], style, label=f"stage {stage}")
        labels = [t[1].replace("all_reduce", "AR").replace("end of backward", "end") for t in tr]
    psi = record(run, 2)["psi"]
    for y, name in ((ELEM * psi, "2ψ"), (ELEM * psi / n, "2ψ/N")):
        ax.axhline(y / 2**20, color="gray", ls=":", lw=1)
        ax.annotate(name, (len(labels) + 0.1, y / 2**20), fontsize=9, va="center")
    ax.set_xticks(range(1, len(labels) + 1), labels)
    ax.set_xlabel(f"backward 중 collective 호출 순서 (rank {rank}, N = {n})")
    ax.set_ylabel("16-bit gradient (MiB)")
    ax.legend()
    return figures.svg(fig)
# --8<-- [end:trace]

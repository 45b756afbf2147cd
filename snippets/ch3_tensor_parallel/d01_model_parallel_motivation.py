"""Ch3-01 Model parallelism: why data parallelism alone cannot hold a 70B model, and the naive layer split.

The memory side uses Chapter 5's shared formulas (snippets.common.zero_memory); the naive split
is simulated here and compared with the two-process run of gpu_runs/tp_bench.py (naive_split).
Notation (docs/notation.md): ψ parameters, p stages, b, s, h, e activation shape and element bytes.
"""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch3_tensor_parallel import missing
from snippets.common import figures
from snippets.common.zero_memory import GB, zero_memory_bytes

GPU_BYTES = 80 * GB  # an 80 GB accelerator (A100/H100 80 GB); a label, not a measurement
MODELS = ((7e9, "7B"), (13e9, "13B"), (70e9, "70B"), (175e9, "175B"))


# --8<-- [start:memory]
def dp_memory_rows(models=MODELS, gpu_bytes: float = GPU_BYTES, n: int = 64) -> list[dict]:
    """Per-rank model states under plain data parallelism (ZeRO stage 0): 16ψ, whatever N is.

    `min_devices` is how many devices the states need if they could be split evenly, the least
    any model-parallel or sharding scheme must use before a single activation is stored.
    """
    rows = []
    for psi, name in models:
        per_rank = zero_memory_bytes(psi, n, 0)
        rows.append({"name": name, "psi": psi, "per_rank_bytes": per_rank,
                     "per_rank_same_for_N1": per_rank == zero_memory_bytes(psi, 1, 0),
                     "fits": per_rank <= gpu_bytes, "min_devices": int(np.ceil(per_rank / gpu_bytes))})
    return rows
# --8<-- [end:memory]


# --8<-- [start:schedule]
def naive_schedule(f, b, c: float = 0.0) -> dict:
    """Naive layer split of one batch over p stages: forward 0→p−1, then backward p−1→0.

    f[k], b[k]: forward / backward seconds of stage k; c: seconds to move one activation (or its
    gradient) across a stage boundary. Returns each stage's busy intervals [(start, end, kind)],
    the step time and each stage's idle fraction. Nothing overlaps: stage k can start only when
    stage k−1 has finished (forward) or stage k+1 has finished (backward).
    """
    f, b = np.asarray(f, float), np.asarray(b, float)
    p = len(f)
    t, intervals = 0.0, [[] for _ in range(p)]
    for k in range(p):
        intervals[k].append((t, t + f[k], "F"))
        t += f[k] + (c if k < p - 1 else 0.0)
    for k in reversed(range(p)):
        intervals[k].append((t, t + b[k], "B"))
        t += b[k] + (c if k > 0 else 0.0)
    busy = f + b
    return {"intervals": intervals, "step": t, "busy": busy, "idle_fraction": 1 - busy / t}


def naive_idle_fraction(p):
    """Equal stages and free communication: every stage idles (p−1)/p of the step."""
    p = np.asarray(p, float)
    return (p - 1) / p
# --8<-- [end:schedule]


# --8<-- [start:boundary]
def boundary_bytes(b: int, s: int, h: int, e: int = 2) -> int:
    """Bytes crossing one stage boundary in one direction: the activation b·s·h of e bytes each."""
    return b * s * h * e


def naive_step_p2p_bytes(p: int, b: int, s: int, h: int, e: int = 2) -> int:
    """Per step: p−1 boundaries, each crossed once forward (activation) and once backward (gradient)."""
    return 2 * (p - 1) * boundary_bytes(b, s, h, e)
# --8<-- [end:boundary]


# --------------------------------------------------------------------------- measured

def naive_runs():
    """tp_bench results (every hardware) that contain the two-rank naive split (world size 2 only)."""
    return [r for r in results.experiment("tp_bench") if "naive_split" in r.measurements]


def tab_runs():
    """What the page's tabs show: per hardware its naive-split runs, or, where it has none (e.g. a run on
    8 GPUs only), all its tp_bench runs, so that its tab exists and says what is missing."""
    out = []
    for plat in results.platforms(results.experiment("tp_bench")):
        mine = [r for r in plat.runs if "naive_split" in r.measurements]
        out += mine or plat.runs
    return out


def naive_run(plat):
    return next((r for r in plat.runs if "naive_split" in r.measurements), None)


def measured_naive(r) -> dict:
    """Busy fractions, counted bytes and gradient agreement of the two-process naive split."""
    ranks = r.measurements["naive_split"]
    out = {"ranks": []}
    for k, n in enumerate(ranks):
        row = {"rank": k, "sent": n["comm"].get("send", {}).get("bytes", 0),
               "recv": n["comm"].get("recv", {}).get("bytes", 0),
               "sends": n["comm"].get("send", {}).get("calls", 0),
               "formula": n["boundary_bytes_formula"], "grad_diff": n["max_abs_grad_diff"]}
        if "step_s_median" in n:
            row.update(step=n["step_s_median"], busy=n["busy_s_median"], busy_fraction=n["busy_s_median"] / n["step_s_median"])
        out["ranks"].append(row)
    if all("timeline_median_step" in n for n in ranks):
        out["timelines"] = [n["timeline_median_step"] for n in ranks]
        # the same (median) iteration is not the same iteration on both ranks, so overlap is judged
        # on medians: summed busy time against the slower rank's step time
        out["busy_sum_over_step"] = sum(x["busy"] for x in out["ranks"]) / max(x["step"] for x in out["ranks"])
    return out


def timeline_figure(sim: dict, measured: list | None = None, hardware: str = "CPU, gloo") -> str:
    """Gantt chart: the simulated naive split (top) and, if given, the one measured on `hardware` (bottom)."""
    rows = [("시뮬레이션", sim["intervals"])]
    if measured:
        rows.append((f"측정 ({hardware})", [[(s, e, k) for k, s, e in tl] for tl in measured]))
    fig, axes = figures.new(7, 1.2 + 1.1 * len(rows) * len(sim["intervals"]) / 2, nrows=len(rows), squeeze=False)
    colors = {"F": "#4c78a8", "B": "#f58518"}
    for ax, (title, intervals) in zip(axes[:, 0], rows):
        for k, iv in enumerate(intervals):
            for s, e, kind in iv:
                ax.broken_barh([(s, e - s)], (k - 0.4, 0.8), color=colors[kind])
        ax.set_yticks(range(len(intervals)), [f"stage {k}" for k in range(len(intervals))])
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("시간 (s)" if title.startswith("측정") else "시간 (단위 시간)")
    from matplotlib.patches import Patch

    axes[0, 0].legend(handles=[Patch(color=colors["F"], label="forward"), Patch(color=colors["B"], label="backward")],
                      loc="upper right", fontsize=8)
    fig.tight_layout()
    return figures.svg(fig)


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def no_naive(plat) -> str:
    return missing(plat, "naive split 은 world size 2 에서만 돕니다: 이 하드웨어에는 N = 2 측정이 없습니다")


def step_table(m: dict) -> str:
    """Experiment 3's table: per rank, median step and compute time, their ratio, the gradient check."""
    return results.markdown_table(
        ["rank", "step (ms, median)", "계산 (ms, median)", "계산 비율", "reference 와의 gradient 차이"],
        [[x["rank"], f"{x['step'] * 1e3:.2f}", f"{x['busy'] * 1e3:.2f}", f"{x['busy_fraction']:.2f}",
          f"{x['grad_diff']:.1e}"] for x in m["ranks"]])


def untimed(plat) -> str:
    return missing(plat, "이 하드웨어의 N = 2 결과는 timeline 없이 (`--no-timing`) 잰 것입니다: 시간 측정이 없습니다")


def bytes_tab(plat) -> str:
    """Experiment 4 on one hardware: sends, bytes and the formula per rank, with the run's shape."""
    run = naive_run(plat)
    if run is None:
        return no_naive(plat)
    nc = run.measurements["naive_split"][0]
    m = measured_naive(run)
    return (f"rows = {nc['rows']}, width = {nc['width']}, fp32 ($e = {nc['elem_bytes']}$)\n\n" +
            results.markdown_table(["rank", "send 호출", "보낸 bytes", "받은 bytes", "rows·width·4"],
                                   [[x["rank"], x["sends"], x["sent"], x["recv"], x["formula"]] for x in m["ranks"]]))

"""Ch4-01 Naive pipeline bubble: the two bubble definitions, the naive pipeline in the simulator and on 2 processes."""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch4_pipeline_parallel import gantt, missing, the_run
from snippets.common import figures
from snippets.common import pipeline_sim as ps

PROGRAM = "pipeline_bench"


def runs() -> list[results.Result]:
    """Every results file of gpu_runs/pipeline_bench.py (2 ranks), on every hardware (CPU first)."""
    return results.experiment(PROGRAM)


def entry(run: results.Result, schedule: str, variant: str, m: int) -> dict:
    return next(e for e in run.measurements if (e["schedule"], e["variant"], e["m"]) == (schedule, variant, m))


# --8<-- [start:definitions]
def bubbles(busy, makespan) -> tuple[float, float]:
    """(fraction of total time, relative to ideal time) for per-rank busy times and a makespan."""
    return ps.bubble_fraction_of_total(busy, makespan), ps.bubble_relative_to_ideal(busy, makespan)


def naive_closed_form(stage_times) -> dict:
    """Theorem 4.1.3: one batch through p stages with per-stage (F+B) times c_i and no communication."""
    c = np.asarray(stage_times, dtype=float)
    total = c.sum()  # the only order the dependencies allow: F_0 ... F_{p-1} B_{p-1} ... B_0
    return {"makespan": total, "fraction": 1 - 1 / len(c), "relative": total / c.max() - 1}
# --8<-- [end:definitions]


def naive_table(ps_list=(1, 2, 4, 8, 16, 64)) -> list[list]:
    rows = []
    for p in ps_list:
        tl = ps.simulate("naive", p, 1)
        rows.append([p, f"{tl.bubble_fraction():.4f}", f"{float(ps.naive_bubble_fraction(p)):.4f}",
                     f"{tl.bubble_relative():.2f}", f"{p - 1:.2f}", f"{tl.makespan:.0f}"])
    return rows


def unbalanced_rows(cases) -> list[list]:
    """Simulated naive pipelines with unbalanced stages against naive_closed_form."""
    rows = []
    for cost in cases:
        tl = ps.simulate("naive", len(cost), 1, stage_cost=cost)
        cf = naive_closed_form(np.asarray(cost) * 3.0)  # T_F + T_B + T_W = 3 per unit of stage cost
        rows.append([" : ".join(f"{c:g}" for c in cost), f"{tl.makespan:g}", f"{cf['makespan']:g}",
                     f"{tl.bubble_fraction():.3f}", f"{cf['fraction']:.3f}",
                     f"{tl.bubble_relative():.3f}", f"{cf['relative']:.3f}"])
    return rows


def measured_row(e: dict) -> list:
    rows = ps.measured_rows(e)
    b = ps.measured_bubbles(rows)
    steps = e["step_stats"]
    fr = [s["bubble_fraction"] for s in steps]
    return [e["variant"], e["m"], f"{b['makespan'] * 1e3:.1f}", " / ".join(f"{x * 1e3:.1f}" for x in b["busy"]),
            f"{b['fraction']:.3f}", f"{min(fr):.3f}–{max(fr):.3f}", f"{b['relative']:.3f}",
            f"{ps.max_overlap(rows) * 1e3:.2f}"]


def gantt_figure(panels, width=7.5, unit=1.0, xlabel="time") -> str:
    """Stacked Gantt charts: panels = [(title, rows, unit)]."""
    fig, axes = figures.new(width, 1.0 + 1.1 * sum(len(r) for _, r, _ in panels) / 2,
                            nrows=len(panels), squeeze=False)
    for ax, (title, rows, u) in zip(axes[:, 0], panels):
        gantt(ax, rows, title, unit=u)
        ax.set_xlabel(xlabel if u == 1.0 else "ms")
    fig.subplots_adjust(hspace=1.2, left=0.09, right=0.99, top=0.9, bottom=0.15)  # fixed margins: tight_layout re-measures every label
    return figures.svg(fig)


def naive_gantt() -> str:
    tl = ps.simulate("naive", 4, 1)
    return gantt_figure([("시뮬레이터: naive pipeline, p = 4 (T_F = 1, backward = 2)", ps.timeline_rows(tl), 1.0)],
                        xlabel="시간 (T_F 단위)")


def measured_gantt(run, hardware: str) -> str:
    panels = [(f"측정 ({hardware}): GPipe m = 1 = naive, {v} 변형", ps.measured_rows(entry(run, "gpipe", v, 1)), 1e-3)
              for v in ("sleep", "real")]
    return gantt_figure(panels)


def op_spread(e: dict) -> dict:
    """Per op kind: (min, max) duration over all recorded calls in all measured steps' median timeline."""
    out = {}
    for op in ("F", "B"):
        d = [a["end"] - a["start"] for acts in ps.measured_rows(e) for a in acts if a["op"] == op]
        out[op] = (min(d), max(d))
    return out


# --8<-- [start:comm]
def naive_with_comm(p: int, t_stage: float, t_hop: float) -> dict:
    """Naive pipeline with a point-to-point hop of t_hop between stages (forward and backward)."""
    tl = ps.simulate("naive", p, 1, t_f=t_stage / 3, t_b=t_stage / 3, t_w=t_stage / 3, t_comm=t_hop)
    return {"makespan": tl.makespan, "fraction": tl.bubble_fraction(), "relative": tl.bubble_relative(),
            "formula_makespan": p * t_stage + 2 * (p - 1) * t_hop}
# --8<-- [end:comm]


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def measured_table(run) -> str:
    """Experiment 2's table: the naive pipeline (GPipe, m = 1) of both variants, measured."""
    rows = [measured_row(entry(run, "gpipe", v, 1)) for v in ("sleep", "real")]
    return results.markdown_table(["변형", "m", "makespan (ms)", "rank 0 / 1 일한 시간 (ms)", "𝓑_tot (median step)",
                                   "𝓑_tot (모든 step 의 범위)", "𝓑_ideal", "두 rank 가 동시에 계산한 시간 (ms)"], rows)


def hop_tab(plat) -> str:
    """Experiment 4's measured part on one hardware: T − ΣT_busy,r and the T_hop it implies, per variant."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    lines = []
    for v in ("sleep", "real"):
        b = ps.measured_bubbles(ps.measured_rows(entry(run, "gpipe", v, 1)))
        gap = b["makespan"] - sum(b["busy"])
        lines.append(f"- 측정 ({v}): T − ΣT_busy,r = {gap * 1e3:.2f} ms → 경계 하나당 T_hop ≈ "
                     f"{gap / 2 / (run.params['p'] - 1) * 1e3:.2f} ms (ΣT_busy,r = {sum(b['busy']) * 1e3:.1f} ms 의 "
                     f"{gap / sum(b['busy']):.1%})")
    return "\n".join(lines)

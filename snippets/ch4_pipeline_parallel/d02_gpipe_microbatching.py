"""Ch4-02 GPipe and micro-batching: bubble against both formulas, activation memory, the m ≥ 4p rule."""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.common import figures
from snippets.common import pipeline_sim as ps

PROGRAM = "pipeline_bench"


def bench() -> results.Result:
    return results.load(PROGRAM, kind="cpu")[0]


def entries(run, schedule: str, variant: str = "sleep") -> list[dict]:
    return sorted((e for e in run.measurements if e["schedule"] == schedule and e["variant"] == variant),
                  key=lambda e: e["m"])


def entry(run, schedule: str, variant: str, m: int) -> dict:
    return next(e for e in entries(run, schedule, variant) if e["m"] == m)


# --8<-- [start:gpipe_makespan]
def gpipe_start_times(p: int, m: int, t_f: float, t_b: float) -> tuple[np.ndarray, np.ndarray]:
    """Theorem 4.2.3's closed form: start of F(j) and B(j) on rank i, arrays [i, j]."""
    i, j = np.meshgrid(np.arange(p), np.arange(m), indexing="ij")
    f_start = (i + j) * t_f
    b_start = (m + p - 1) * t_f + (p - 1 - i + j) * t_b
    return f_start, b_start
# --8<-- [end:gpipe_makespan]


def closed_form_check(p: int, m: int, t_f: float = 1.0, t_b: float = 2.0) -> float:
    """Largest difference between the simulator's start times and Theorem 4.2.3's formulas."""
    tl = ps.simulate("gpipe", p, m, t_f=t_f, t_b=t_b / 2, t_w=t_b / 2)
    f, b = gpipe_start_times(p, m, t_f, t_b)
    err = 0.0
    for k in range(len(tl.start)):
        want = (f if tl.op[k] == 0 else b)[tl.rank[k], tl.mb[k]]
        err = max(err, abs(tl.start[k] - want))
    return err


def grid_rows(ps_list=(2, 4, 8), ms=(1, 4, 8, 32)) -> list[list]:
    rows = []
    for p in ps_list:
        for m in ms:
            tl = ps.simulate("gpipe", p, m)
            rows.append([p, m, f"{tl.bubble_fraction():.4f}", f"{float(ps.gpipe_bubble_fraction(p, m)):.4f}",
                         f"{tl.bubble_relative():.4f}", f"{float(ps.gpipe_bubble_relative(p, m)):.4f}",
                         f"{closed_form_check(p, m):.1e}"])
    return rows


# --8<-- [start:predict]
def op_means(e: dict) -> dict:
    """Mean duration of F and of B (whole backward) over the recorded calls of a run's median step."""
    rows = ps.measured_rows(e)
    out = {}
    for op in ("F", "B"):
        d = [a["end"] - a["start"] for acts in rows for a in acts if a["op"] == op]
        out[op] = float(np.mean(d))
    return out


def hop_estimate(naive: dict) -> float:
    """T_hop from a naive run (m = 1): no two ranks compute at once, so T − ΣT_busy = 2(p−1)T_hop (Theorem 4.1.6)."""
    b = ps.measured_bubbles(ps.measured_rows(naive))
    p = len(b["busy"])
    return (b["makespan"] - sum(b["busy"])) / (2 * (p - 1))


def predicted(e: dict, delta: float) -> ps.Timeline:
    """The simulator fed with this run's measured mean F and B times and the hop time T_hop."""
    t = op_means(e)
    p = len(e["timeline"])
    return ps.simulate("gpipe", p, e["m"], t_f=t["F"], t_b=t["B"], t_w=0.0, t_comm=delta)
# --8<-- [end:predict]


def sweep_rows(run, variant: str = "sleep") -> list[list]:
    es = entries(run, "gpipe", variant)
    delta = hop_estimate(next(e for e in es if e["m"] == 1))
    p = run.params["p"]
    rows = []
    for e in es:
        b = ps.measured_bubbles(ps.measured_rows(e))
        pr = predicted(e, delta)
        rows.append([e["m"], f"{b['fraction']:.3f}", f"{pr.bubble_fraction():.3f}",
                     f"{float(ps.gpipe_bubble_fraction(p, e['m'])):.3f}",
                     f"{b['relative']:.3f}", f"{pr.bubble_relative():.3f}", f"{float(ps.gpipe_bubble_relative(p, e['m'])):.3f}",
                     f"{b['makespan'] * 1e3:.0f}", f"{pr.makespan * 1e3:.0f}"])
    return rows


def sweep_figure(run) -> str:
    p = run.params["p"]
    es = entries(run, "gpipe", "sleep")
    ms = np.array([e["m"] for e in es])
    grid = np.arange(1, ms.max() + 1)
    fig, ax = figures.new(6.5, 3.6)
    ax.plot(grid, ps.gpipe_bubble_fraction(p, grid), "-", color="C0", label="(p−1)/(m+p−1): 총 시간 대비 공식")
    ax.plot(grid, ps.gpipe_bubble_relative(p, grid), "--", color="C1", label="(p−1)/m: 이상 시간 대비 공식")
    meas = [ps.measured_bubbles(ps.measured_rows(e)) for e in es]
    ax.plot(ms, [b["fraction"] for b in meas], "o", color="C0", label="측정 𝓑_tot (sleep, median step)")
    ax.plot(ms, [b["relative"] for b in meas], "s", color="C1", label="측정 𝓑_ideal")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batch 수 m")
    ax.set_ylabel("bubble")
    ax.set_title(f"GPipe, p = {p}: 측정 대 두 공식", fontsize=10)
    ax.legend(fontsize=8)
    return figures.svg(fig)


def gantt_panels(run, m: int) -> str:
    panels = [(f"시뮬레이터: GPipe p = 2, m = {m}", ps.timeline_rows(ps.simulate("gpipe", 2, m)), 1.0)]
    panels += [(f"측정 ({v}): ScheduleGPipe, m = {m}", ps.measured_rows(entry(run, "gpipe", v, m)), 1e-3)
               for v in ("sleep", "real")]
    fig, axes = figures.new(7.5, 4.6, nrows=3, squeeze=False)
    for ax, (title, rows, u) in zip(axes[:, 0], panels):
        ps.gantt(ax, rows, title, unit=u)
        ax.set_xlabel("T_F 단위" if u == 1.0 else "ms")
    fig.tight_layout()
    return figures.svg(fig)


def memory_rows(run) -> list[list]:
    rows = []
    for e in entries(run, "gpipe", "sleep") + entries(run, "gpipe", "real"):
        sim = ps.simulate("gpipe", 2, e["m"]).inflight()
        ratio = [a / b for a, b in zip(e["peak_saved_bytes"], e["per_mb_saved_bytes"])]
        rows.append([e["variant"], e["m"], " / ".join(map(str, e["peak_live_microbatches"])),
                     " / ".join(map(str, sim)), " / ".join(f"{x:.2f}" for x in ratio),
                     " / ".join(f"{x:,}" for x in e["peak_saved_bytes"])])
    return rows


def spread_rows(run, m: int) -> list[list]:
    """Per variant: min / max duration of the F and B calls of the median step, and the spread of 𝓑_tot over steps."""
    rows = []
    for v in ("sleep", "real"):
        e = entry(run, "gpipe", v, m)
        acts = [a for r in ps.measured_rows(e) for a in r]
        f = [a["end"] - a["start"] for a in acts if a["op"] == "F"]
        b = [a["end"] - a["start"] for a in acts if a["op"] == "B"]
        fr = [s["bubble_fraction"] for s in e["step_stats"]]
        rows.append([v, f"{min(f) * 1e3:.1f}–{max(f) * 1e3:.1f}", f"{max(f) / min(f):.2f}",
                     f"{min(b) * 1e3:.1f}–{max(b) * 1e3:.1f}", f"{max(b) / min(b):.2f}",
                     f"{min(fr):.3f}–{max(fr):.3f}"])
    return rows


def rule_of_thumb_rows(ps_list=(2, 4, 8, 16, 32, 64)) -> list[list]:
    rows = []
    for p in ps_list:
        m = 4 * p
        tl = ps.simulate("gpipe", p, m)
        need = next(k for k in range(1, 100 * p) if ps.gpipe_bubble_relative(p, k) < 0.2)
        rows.append([p, m, f"{tl.bubble_fraction():.2%}", f"{(p - 1) / (5 * p - 1):.2%}",
                     f"{tl.bubble_relative():.2%}", f"{(p - 1) / (4 * p):.2%}", need])
    return rows


# --8<-- [start:best_m]
def step_time(p: int, m, batch: float, a: float, c: float):
    """GPipe step time when one micro-batch of batch/m samples takes a + c·batch/m (fwd+bwd) per stage."""
    m = np.asarray(m, dtype=float)
    return (m + p - 1) * (a + c * batch / m)


def best_m(p: int, batch: float, a: float, c: float) -> float:
    """Minimiser of step_time over real m > 0: m* = sqrt((p−1)·c·batch / a)."""
    return float(np.sqrt((p - 1) * c * batch / a))
# --8<-- [end:best_m]


# --8<-- [start:lower_bound]
def path_lower_bound(rows: list[list[dict]]) -> float:
    """Lemma 4.2.4 for measured rows: max over r of ΣF_i^0 (i < r) + W_r + ΣB_i^(m−1) (i < r)."""
    best = 0.0
    for r in range(len(rows)):
        head = sum(next(a["end"] - a["start"] for a in rows[i] if a["op"] == "F" and a["mb"] == 0) for i in range(r))
        last = max(a["mb"] for a in rows[r])
        tail = sum(next(a["end"] - a["start"] for a in rows[i] if a["op"] == "B" and a["mb"] == last) for i in range(r))
        busy = sum(a["end"] - a["start"] for a in rows[r])
        best = max(best, head + busy + tail)
    return best
# --8<-- [end:lower_bound]


def bound_rows(run) -> list[list]:
    rows = []
    for v in ("sleep", "real"):
        for e in entries(run, "gpipe", v):
            r = ps.measured_rows(e)
            b = ps.measured_bubbles(r)
            lb = path_lower_bound(r)
            rows.append([v, e["m"], f"{b['makespan'] * 1e3:.1f}", f"{lb * 1e3:.1f}", f"{lb / b['makespan']:.3f}"])
    return rows

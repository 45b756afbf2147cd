"""Ch4-02 GPipe and micro-batching: bubble against both formulas, activation memory, the m ≥ 4p rule."""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch4_pipeline_parallel import gantt, hw_short, missing, preset_line, the_run
from snippets.common import figures
from snippets.common import pipeline_sim as ps

PROGRAM = "pipeline_bench"


def runs() -> list[results.Result]:
    """Every results file of gpu_runs/pipeline_bench.py (2 ranks), on every hardware (CPU first)."""
    return results.experiment(PROGRAM)


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


def agree(sim: str, formula: str) -> str:
    """One table cell for a simulated value and its formula: the value once when they agree, both when not."""
    return sim if sim == formula else f"{sim} ≠ {formula}"


def grid_markdown(ps_list=(2, 4, 8), ms=(1, 4, 8, 32)) -> str:
    """Experiment 1's table: both bubbles, simulator and Theorem 4.2.3 in one cell each, and the start-time check."""
    rows = [[p, m, agree(a, b), agree(c, d), e] for p, m, a, b, c, d, e in grid_rows(ps_list, ms)]
    return results.markdown_table(["p", "m", "𝓑_tot: 시뮬레이터 = (p−1)/(m+p−1)", "𝓑_ideal: 시뮬레이터 = (p−1)/m",
                                   "시작 시각 최대 차이"], rows)


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


def sweep_figure(run, hardware: str = "") -> str:
    p = run.params["p"]
    es = entries(run, "gpipe", "sleep")
    ms = np.array([e["m"] for e in es])
    grid = np.arange(1, ms.max() + 1)
    fig, ax = figures.new(6.5, 3.6)
    ax.plot(grid, ps.gpipe_bubble_fraction(p, grid), "-", color="C0", label="(p−1)/(m+p−1): 총 시간 대비 공식")
    ax.plot(grid, ps.gpipe_bubble_relative(p, grid), "--", color="C1", label="(p−1)/m: 이상 시간 대비 공식")
    meas = [ps.measured_bubbles(ps.measured_rows(e)) for e in es]
    ax.plot(ms, [b["fraction"] for b in meas], "o", color="C0", label=r"측정 $\mathcal{B}_\mathrm{tot}$ (sleep, median step)")
    ax.plot(ms, [b["relative"] for b in meas], "s", color="C1", label=r"측정 $\mathcal{B}_\mathrm{ideal}$")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batch 수 m")
    ax.set_ylabel("bubble")
    ax.set_title(f"GPipe, p = {p}: 측정 ({hardware}) 대 두 공식" if hardware else f"GPipe, p = {p}: 측정 대 두 공식",
                 fontsize=10)
    ax.legend(fontsize=8)
    return figures.svg(fig)


def gantt_panels(run, m: int, hardware: str = "") -> str:
    p = run.params["p"]
    where = f"{hardware}, " if hardware else ""
    panels = [(f"시뮬레이터: GPipe p = {p}, m = {m}", ps.timeline_rows(ps.simulate("gpipe", p, m)), 1.0)]
    panels += [(f"측정 ({where}{v}): ScheduleGPipe, m = {m}", ps.measured_rows(entry(run, "gpipe", v, m)), 1e-3)
               for v in ("sleep", "real")]
    fig, axes = figures.new(7.5, 4.6, nrows=3, squeeze=False)
    for ax, (title, rows, u) in zip(axes[:, 0], panels):
        gantt(ax, rows, title, unit=u)
        ax.set_xlabel("T_F 단위" if u == 1.0 else "ms")
    fig.subplots_adjust(hspace=1.2, left=0.09, right=0.99, top=0.94, bottom=0.09)  # fixed margins: tight_layout re-measures every label
    return figures.svg(fig, tight=False)  # one draw instead of two: ~100 micro-batch labels per panel


def memory_rows(run) -> list[list]:
    rows = []
    for e in entries(run, "gpipe", "sleep") + entries(run, "gpipe", "real"):
        sim = ps.simulate("gpipe", run.params["p"], e["m"]).inflight()
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


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def sweep_ends(run) -> str:
    """The sweep's two ends on this hardware (the reading the page's prose refers to)."""
    es = entries(run, "gpipe", "sleep")
    lo, hi = (ps.measured_bubbles(ps.measured_rows(e)) for e in (es[0], es[-1]))
    return (f"이 하드웨어에서 𝓑_tot 는 m = {es[0]['m']} 의 {lo['fraction']:.3f} 에서 m = {es[-1]['m']} 의 {hi['fraction']:.3f} 로, "
            f"𝓑_ideal 은 {lo['relative']:.3f} 에서 {hi['relative']:.3f} 로 변합니다.")


def sweep_tab(plat) -> str:
    """Experiment 2 on one hardware: measured, predicted (its own mean T_F, T_B and T_hop) and formula; figure."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    rows = sweep_rows(run)
    tot = results.markdown_table(["m", "𝓑_tot 측정", "𝓑_tot 예측", "(p−1)/(m+p−1)", "T 측정 (ms)", "T 예측 (ms)"],
                                 [[r[0], r[1], r[2], r[3], r[7], r[8]] for r in rows])
    ideal = results.markdown_table(["m", "𝓑_ideal 측정", "𝓑_ideal 예측", "(p−1)/m"], [[r[0], r[4], r[5], r[6]] for r in rows])
    return (preset_line(run) + "\n\n**총 시간 대비** (정의 4.1.2 의 𝓑_tot) 와 step 시간:\n\n" + tot
            + "\n\n**이상 시간 대비** (𝓑_ideal):\n\n" + ideal + "\n\n" + sweep_ends(run) + "\n\n"
            + sweep_figure(run, hw_short(plat)))


def bound_tab(plat) -> str:
    """Lemma 4.2.4 on one hardware's runs: the path lower bound never exceeds the measured T."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    rows = bound_rows(run)
    ok = all(path_lower_bound(ps.measured_rows(e)) <= ps.measured_bubbles(ps.measured_rows(e))["makespan"]
             for v in ("sleep", "real") for e in entries(run, "gpipe", v))
    return (results.markdown_table(["변형", "m", "측정 T (ms)", "경로 하한 (ms)", "하한 / T"], rows)
            + f"\n\n모든 행에서 하한 ≤ T: **{ok}**")


def memory_reading(run) -> str:
    """Theorem 4.2.5 (b) on this run: peak live micro-batches = m on both ranks, and the bytes ratios per rank."""
    es = entries(run, "gpipe", "sleep") + entries(run, "gpipe", "real")
    exact = all(all(x == e["m"] for x in e["peak_live_microbatches"]) for e in es)
    per_rank = [sorted({round(e["peak_saved_bytes"][r] / e["per_mb_saved_bytes"][r] / e["m"], 3) for e in es})
                for r in range(run.params["p"])]
    return (f"모든 행에서 두 rank 의 peak 가 정확히 m: **{exact}**. peak bytes / (m × micro-batch 하나의 bytes): "
            + ", ".join(f"rank {r} {' / '.join(f'{x:g}' for x in v)}" for r, v in enumerate(per_rank)))


def memory_tab(plat) -> str:
    run = the_run(plat)
    if run is None:
        return missing(plat)
    return (results.markdown_table(["변형", "m", "peak 살아 있는 micro-batch (rank 0 / 1, 측정)", "시뮬레이터",
                                    "peak saved bytes / micro-batch 하나의 bytes", "peak saved bytes"], memory_rows(run))
            + "\n\n" + memory_reading(run))


def jitter_tab(plat) -> str:
    """Experiment 4 on one hardware: GPipe at m = m_all, simulator beside both variants, and the spread of op times."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    m = run.params["m_all"]
    return (gantt_panels(run, m, hw_short(plat)) + "\n\n" + results.markdown_table(
        ["변형", "F 시간 범위 (ms)", "F 최대/최소", "B 시간 범위 (ms)", "B 최대/최소", "𝓑_tot 의 step 사이 범위"],
        spread_rows(run, m)))


def intuition_gantt(p: int = 4, m: int = 8) -> str:
    """📖: the same batch on p devices, as one batch (naive) and as m micro-batches (GPipe); a micro-batch's
    forward is the time unit, so the naive pipeline's bars are m units long."""
    from snippets.common.pipeline_sim import gantt as sim_gantt

    fig, axes = figures.new(7.5, 3.6, nrows=2, squeeze=False, sharex=True)
    naive = ps.simulate("naive", p, 1, t_f=m, t_b=m, t_w=m)
    gp = ps.simulate("gpipe", p, m)
    for ax, tl, title in zip(axes[:, 0], (naive, gp), (f"naive (m = 1): B_tot = {naive.bubble_fraction():.3f}",
                                                       f"GPipe (m = {m}): B_tot = {gp.bubble_fraction():.3f}")):
        sim_gantt(ax, ps.timeline_rows(tl), title, label_mb=tl is gp)
    axes[-1, 0].set_xlabel("시간 (micro-batch 하나의 forward = 1)")
    fig.subplots_adjust(hspace=0.45, left=0.09, right=0.99, top=0.92, bottom=0.14)
    return figures.svg(fig)


# --8<-- [start:holdings]
def holdings(tl: ps.Timeline, t: float) -> list[list[int]]:
    """Per rank, the micro-batches whose activations are alive at time t: F started before t, B not yet ended."""
    out = []
    for acts in ps.timeline_rows(tl):
        f = {a["mb"]: a for a in acts if a["op"] == "F"}
        b = {a["mb"]: a for a in acts if a["op"] == "B"}
        out.append([j for j in sorted(f) if f[j]["start"] < t and (j not in b or b[j]["end"] > t)])
    return out


def fullest_moment(tl: ps.Timeline) -> float:
    """The earliest action midpoint at which the ranks together hold the most activations."""
    mids = sorted({(a["start"] + a["end"]) / 2 for acts in ps.timeline_rows(tl) for a in acts})
    return max(mids, key=lambda t: (sum(map(len, holdings(tl, t))), -t))
# --8<-- [end:holdings]


def holdings_svg(schedule: str = "gpipe", p: int = 4, m: int = 8, layers_per_rank: int = 2) -> str:
    """📖 diagram of who holds what: p devices, each with its layers, the running action, and the stack of
    micro-batch activations it holds at the simulator's fullest moment; arrows for what crosses each boundary."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    tl = ps.simulate(schedule, p, m)
    t = fullest_moment(tl)
    held = holdings(tl, t)
    running = [next((f"{a['op']}{a['mb']}" for a in acts if a["start"] <= t < a["end"]), "대기")
               for acts in ps.timeline_rows(tl)]
    w, gap, cell = 1.5, 0.7, 0.32
    top = 1.0 + cell * max(map(len, held))
    fig, ax = figures.new(7.5, 1.2 + 1.6 * top / 2.2)
    for r in range(p):
        x = r * (w + gap)
        ax.add_patch(Rectangle((x, top - 1.0), w, 1.0, facecolor="#e8eef7", edgecolor="#4C72B0"))
        ax.text(x + w / 2, top - 0.3, f"rank {r}", ha="center", fontsize=9)
        ax.text(x + w / 2, top - 0.62, f"층 {r * layers_per_rank}–{(r + 1) * layers_per_rank - 1}", ha="center", fontsize=8)
        ax.text(x + w / 2, top - 0.9, f"지금: {running[r]}", ha="center", fontsize=8, color="#444444")
        for k, j in enumerate(held[r]):
            y = top - 1.0 - (k + 1) * cell
            ax.add_patch(Rectangle((x + 0.15, y + 0.03), w - 0.3, cell - 0.06, facecolor="#4C72B0", edgecolor="white"))
            ax.text(x + w / 2, y + cell / 2, f"mb {j}", ha="center", va="center", fontsize=7, color="white")
        ax.text(x + w / 2, top - 1.0 - (len(held[r]) + 1) * cell + 0.05, f"{len(held[r])} 개", ha="center", fontsize=8)
        if r < p - 1:
            ax.add_patch(FancyArrowPatch((x + w, top - 0.25), (x + w + gap, top - 0.25), arrowstyle="-|>",
                                         mutation_scale=10, color="#4C72B0"))
            ax.add_patch(FancyArrowPatch((x + w + gap, top - 0.75), (x + w, top - 0.75), arrowstyle="-|>",
                                         mutation_scale=10, color="#DD8452"))
    name = {"gpipe": "GPipe", "1f1b": "1F1B"}.get(schedule, schedule)
    ax.set_title(f"{name}, p = {p}, m = {m}: 시각 {t:g} (T_F 단위) 에 각 rank 가 들고 있는 activation "
                 "(파란 화살표: 경계 activation →, 주황: ← 그 gradient)", fontsize=9)
    ax.set_xlim(-0.2, p * (w + gap) - gap + 0.2), ax.set_ylim(-cell * 1.6, top + 0.1)
    ax.axis("off")
    return figures.svg(fig)

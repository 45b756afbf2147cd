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
    """Theorem 4.1.4: one batch through p stages with per-stage (F+B) times c_i and no communication."""
    c = np.asarray(stage_times, dtype=float)
    total = c.sum()  # the only order the dependencies allow: F_0 ... F_{p-1} B_{p-1} ... B_0
    return {"makespan": total, "fraction": 1 - 1 / len(c), "relative": total / c.max() - 1}
# --8<-- [end:definitions]


def agree(sim: str, formula: str) -> str:
    """One table cell for a simulated value and its formula: the value once when they agree, both when not."""
    return sim if sim == formula else f"{sim} ≠ {formula}"


def naive_table(ps_list=(1, 2, 4, 8, 16, 64)) -> list[list]:
    rows = []
    for p in ps_list:
        tl = ps.simulate("naive", p, 1)
        rows.append([p, f"{tl.bubble_fraction():.4f}", f"{float(ps.naive_bubble_fraction(p)):.4f}",
                     f"{tl.bubble_relative():.2f}", f"{p - 1:.2f}", f"{tl.makespan:.0f}"])
    return rows


def naive_markdown(ps_list=(1, 2, 4, 8, 16, 64)) -> str:
    """Experiment 1's table: simulator and Theorem 4.1.4 in one cell each (one value when they agree)."""
    rows = [[p, agree(a, b), agree(c, d), t] for p, a, b, c, d, t in naive_table(ps_list)]
    return results.markdown_table(["p", "𝓑_tot: 시뮬레이터 = (p−1)/p", "𝓑_ideal: 시뮬레이터 = p−1",
                                   "makespan (T_F 단위)"], rows)


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


def unbalanced_markdown(cases) -> str:
    """Experiment 3's table: each of Theorem 4.1.4's three quantities, simulator and theorem in one cell."""
    rows = [[r[0], agree(r[1], r[2]), agree(r[3], r[4]), agree(r[5], r[6])] for r in unbalanced_rows(cases)]
    return results.markdown_table(["stage 계산량 비", "T: 시뮬레이터 = 정리", "𝓑_tot: 시뮬레이터 = 정리",
                                   "𝓑_ideal: 시뮬레이터 = 정리"], rows)


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


def comm_markdown(cases=((2, 30.0, 1.0), (4, 30.0, 1.0), (8, 30.0, 1.0), (8, 30.0, 5.0))) -> str:
    """Experiment 4's table: Theorem 4.1.6's makespan against the simulator, and 𝓑_tot against (p−1)/p."""
    rows = []
    for p, c, d in cases:
        r = naive_with_comm(p, c, d)
        rows.append([p, f"{c:g} / {d:g}", agree(f"{r['makespan']:.1f}", f"{r['formula_makespan']:.1f}"),
                     f"{r['fraction']:.4f}", f"{(p - 1) / p:.4f}"])
    return results.markdown_table(["p", "c_i / T_hop (ms)", "T: 시뮬레이터 = Σc + 2(p−1)T_hop", "𝓑_tot (시뮬레이터)",
                                   "(p−1)/p"], rows)


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def measured_table(run) -> str:
    """Experiment 2's two tables (time, then bubble): the naive pipeline (GPipe, m = 1) of both variants, measured."""
    rows = [measured_row(entry(run, "gpipe", v, 1)) for v in ("sleep", "real")]
    time_ = results.markdown_table(["변형", "makespan (ms)", "rank 0 / 1 일한 시간 (ms)", "두 rank 가 동시에 계산한 시간 (ms)"],
                                   [[r[0], r[2], r[3], r[7]] for r in rows])
    bubble = results.markdown_table(["변형", "𝓑_tot (median step)", "𝓑_tot (모든 step 의 범위)", "𝓑_ideal (median step)"],
                                    [[r[0], r[4], r[5], r[6]] for r in rows])
    return time_ + "\n\n" + bubble


def crossing_gaps(e: dict) -> dict:
    """The naive run's idle gaps, one per kind (F, then B, on each rank in order; p = 2 in this file but written
    for any p): forward hops F_i → F_(i+1) (end of one to the start of the next), the last rank's turn from its F to its
    B, and backward hops B_(i+1) → B_i. Each gap is the time the dependent action waited after its input was done."""
    rows = ps.measured_rows(e)
    f = [next(a for a in acts if a["op"] == "F") for acts in rows]
    b = [next(a for a in acts if a["op"] == "B") for acts in rows]
    p = len(rows)
    return {"fwd": [f[i + 1]["start"] - f[i]["end"] for i in range(p - 1)],
            "turn": b[p - 1]["start"] - f[p - 1]["end"],
            "bwd": [b[i]["start"] - b[i + 1]["end"] for i in range(p - 1)]}


def hop_tab(plat) -> str:
    """Experiment 4's measured part on one hardware: T − ΣT_busy,r, its three parts (forward hop, the last rank's
    F → B turn, backward hop) and their sum over the 2(p−1) crossings (the turn is no crossing but is charged to
    them), the T_hop that Theorem 4.1.6 would attribute to one crossing."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    rows, spread = [], []
    for v in ("sleep", "real"):
        e = entry(run, "gpipe", v, 1)
        b = ps.measured_bubbles(ps.measured_rows(e))
        gap = b["makespan"] - sum(b["busy"])
        g = crossing_gaps(e)
        ms = lambda xs: " / ".join(f"{x * 1e3:.2f}" for x in xs)  # noqa: E731
        rows.append([v, f"{gap * 1e3:.2f}", ms(g["fwd"]), f"{g['turn'] * 1e3:.2f}", ms(g["bwd"]),
                     f"{gap / 2 / (run.params['p'] - 1) * 1e3:.2f}"])
        parts = [*g["fwd"], g["turn"], *g["bwd"]]
        spread.append(f"{v} {max(parts) / min(parts):.1f} 배 (가장 긴 조각: "
                      f"{'backward hop' if max(parts) in g['bwd'] else 'forward hop' if max(parts) in g['fwd'] else 'F→B'})")
    return (results.markdown_table(["변형", "T − ΣT_busy,r (ms)", "forward hop F→F (ms)", "마지막 rank 의 F→B (ms)",
                                   "backward hop B→B (ms)", "T_hop = 세 조각의 합 / 2(p−1) (ms)"], rows)
            + "\n\n가장 긴 조각 / 가장 짧은 조각: " + ", ".join(spread))


# --------------------------------------------------------------------------- the point-to-point message (experiment 5)

# --8<-- [start:p2p]
def boundary_bytes(b: int, s: int, h: int, e: int) -> int:
    """One micro-batch's activation at a stage boundary: b·s·h elements of e bytes (its gradient is the same size)."""
    return b * s * h * e


def layer_forward_flops(b: int, s: int, h: int) -> float:
    """Matmul FLOPs of one GPT layer's forward: 24·b·s·h² + 4·b·s²·h (Narayanan et al. 2021 §5.1, per layer and pass)."""
    return 24 * b * s * h**2 + 4 * b * s**2 * h


def p2p_vs_compute(b: int, s: int, h: int, e: int, layers_per_stage: int, alpha: float, bw: float, flops: float) -> dict:
    """The send of one boundary activation (α + S·β, β = 1/BW) against the stage's forward of one micro-batch
    (layers · FLOPs / F). With the send overlapped (torch's batched isend/irecv, Megatron's overlap_p2p_comm),
    it hides when ratio ≤ 1; the bandwidth part of the ratio, S·β / T_F = e·F / ((24h + 4s)·layers·BW),
    does not depend on b."""
    size = boundary_bytes(b, s, h, e)
    t_comm = alpha + size / bw
    t_fwd = layers_per_stage * layer_forward_flops(b, s, h) / flops
    return {"bytes": size, "t_comm": t_comm, "t_fwd": t_fwd, "ratio": t_comm / t_fwd}
# --8<-- [end:p2p]


def p2p_rows(cases, alpha: float, bw: float, flops: float) -> list[list]:
    rows = []
    for b, s, h, lps in cases:
        r = p2p_vs_compute(b, s, h, 2, lps, alpha, bw, flops)
        rows.append([f"b={b}, s={s}, h={h}, L/p={lps}", f"{r['bytes'] / 2**20:.2f} MiB", f"{r['t_comm'] * 1e3:.3f}",
                     f"{r['t_fwd'] * 1e3:.2f}", f"{r['ratio']:.3f}"])
    return rows


def ds_sent_line(plat) -> str:
    """One hardware's deepspeed_pipe file: what each SendActivation / SendGrad really carried, against b·s·h·e."""
    from snippets.ch4_pipeline_parallel import the_run as _the_run

    run = _the_run(plat)
    if run is None:
        return missing(plat)
    rows, d = run.params["rows"], run.params["d"]
    want = boundary_bytes(rows, 1, d, 4)
    lines = []
    for r in run.measurements["ranks"]:
        kinds = sorted({k for k, _, _ in r["sent"]})
        sizes = sorted({n for _, _, n in r["sent"]})
        shapes = sorted({tuple(sh) for _, sh, _ in r["sent"]})
        lines.append(f"- stage {r['stage_id']}: {', '.join(kinds)} {len(r['sent'])} 번, shape {', '.join(map(str, shapes))}, "
                     f"{' / '.join(map(str, sizes))} bytes; b·s·h·e = {rows}·1·{d}·4 = {want} bytes → 같음: "
                     f"**{sizes == [want]}**")
    return "\n".join(lines)


def stage_diagram(p: int = 4) -> str:
    """Who holds what and what moves where: p devices, each with a slice of the layers; the boundary activation
    goes right in the forward pass and its gradient comes back left in the backward pass."""
    from matplotlib.patches import FancyArrowPatch, Rectangle

    fig, ax = figures.new(7.5, 2.2)
    w, gap = 1.4, 0.6
    for r in range(p):
        x = r * (w + gap)
        ax.add_patch(Rectangle((x, 0), w, 1, facecolor="#e8eef7", edgecolor="#4C72B0"))
        ax.text(x + w / 2, 0.72, f"device {r}", ha="center", fontsize=9)
        ax.text(x + w / 2, 0.35, f"층 {r * 2}–{r * 2 + 1}" + ("\n+ loss" if r == p - 1 else ""), ha="center",
                va="center", fontsize=8)
        if r < p - 1:
            ax.add_patch(FancyArrowPatch((x + w, 0.8), (x + w + gap, 0.8), arrowstyle="-|>", mutation_scale=10,
                                         color="#4C72B0"))
            ax.add_patch(FancyArrowPatch((x + w + gap, 0.2), (x + w, 0.2), arrowstyle="-|>", mutation_scale=10,
                                         color="#DD8452"))
    ax.text(0, 1.2, "파란 화살표: forward 의 경계 activation (b·s·h 원소) · 주황 화살표: backward 의 그 gradient (같은 크기)",
            fontsize=8)
    ax.set_xlim(-0.2, p * (w + gap)), ax.set_ylim(-0.2, 1.45)
    ax.axis("off")
    return figures.svg(fig)

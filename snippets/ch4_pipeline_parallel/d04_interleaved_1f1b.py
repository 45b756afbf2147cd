"""Ch4-04 Interleaved 1F1B: bubble (p−1)/(v·m) relative to ideal, rank-0 memory pA(1+(p−1)/(pv)), P2P ×v."""
from __future__ import annotations

from snippets import results
from snippets.ch4_pipeline_parallel import gantt, hw_short, missing, preset_line, the_run
from snippets.common import figures
from snippets.common import pipeline_sim as ps


def runs() -> list[results.Result]:
    """Every results file of gpu_runs/pipeline_bench.py (2 ranks), on every hardware (CPU first)."""
    return results.experiment("pipeline_bench")


def entry(run, schedule: str, variant: str, m: int) -> dict:
    return next(e for e in run.measurements if (e["schedule"], e["variant"], e["m"]) == (schedule, variant, m))


# --8<-- [start:model]
def interleaved(p: int, m: int, v: int, t_f: float = 1.0, t_b: float = 2.0) -> ps.Timeline:
    """The same model (per-rank forward T_F, backward T_B) cut into v chunks per rank: each chunk takes 1/v."""
    return ps.simulate("interleaved", p, m, v, t_f=t_f / v, t_b=t_b / v, t_w=0.0)


def lower_bound(p: int, m: int, v: int, t_f: float = 1.0, t_b: float = 2.0) -> float:
    """Theorem 4.4.3's path: micro-batch 0 through chunk 0 of ranks 0..p−2, all of rank p−1's work,
    and micro-batch m−1's chunk-0 backward back through ranks p−2..0."""
    return (p - 1) * t_f / v + m * (t_f + t_b) + (p - 1) * t_b / v


def p2p_messages(p: int, v: int) -> int:
    """Activation sends per micro-batch in the forward pass: every stage boundary (p·v − 1 of them) crosses ranks."""
    return p * v - 1
# --8<-- [end:model]


def bubble_rows(grid=((2, 8), (4, 8), (4, 16), (8, 32)), vs=(1, 2, 4)) -> list[list]:
    rows = []
    for p, m in grid:
        for v in vs:
            tl = interleaved(p, m, v)
            rows.append([p, m, v, f"{tl.bubble_relative():.4f}", f"{float(ps.interleaved_bubble_relative(p, m, v)):.4f}",
                         f"{tl.makespan:g}", f"{lower_bound(p, m, v):g}", f"{tl.bubble_fraction():.4f}"])
    return rows


def memory_rows(p: int = 8, m: int = 32, vs=(2, 4, 8)) -> list[list]:
    """Rank 0's activation in units of A (one micro-batch through all of a rank's layers; a chunk holds A/v)."""
    one = ps.simulate("1f1b", p, m).inflight()[0]
    rows = [["1F1B (v = 1)", int(one), int(one), f"{one:.3f}", f"{p:.3f}", "1.000", f"{p:g}", p2p_messages(p, 1), "1.00"]]
    for v in vs:
        tl = interleaved(p, m, v)
        peak = tl.inflight()
        mem = peak[0] / v
        rows.append([v, int(peak[0]), int(ps.interleaved_peak_chunks(p, m, v, 0)), f"{mem:.3f}",
                     f"{float(ps.interleaved_first_rank_memory(p, v)):.3f}", f"{mem / one:.3f}",
                     f"{v * p:g}", p2p_messages(p, v), f"{p2p_messages(p, v) / p2p_messages(p, 1):.2f}"])
    return rows


def agree(sim: str, formula: str) -> str:
    """One table cell for a simulated value and its formula: the value once when they agree, both when not."""
    return sim if sim == formula else f"{sim} ≠ {formula}"


def bubble_markdown(grid=((2, 8), (4, 8), (4, 16), (8, 32)), vs=(1, 2, 4)) -> str:
    """Experiment 1's table: 𝓑_ideal (simulator = Megatron's formula) and T (simulator = the path bound)."""
    rows = [[p, m, v, agree(a, b), agree(t, lb), f] for p, m, v, a, b, t, lb, f in bubble_rows(grid, vs)]
    return results.markdown_table(["p", "m", "v", "𝓑_ideal: 시뮬레이터 = (p−1)/(v·m)", "T: 시뮬레이터 = 경로 하한",
                                   "𝓑_tot (시뮬레이터)"], rows)


def memory_markdown(p: int = 8, m: int = 32, vs=(2, 4, 8)) -> str:
    """Experiment 2's two tables: rank 0's memory (simulator = Theorem 4.4.4) against 1F1B and 'O(vp)', then the
    boundary crossings."""
    rows = memory_rows(p, m, vs)
    mem = results.markdown_table(
        ["v", "rank 0 peak chunk: 시뮬레이터 = 2(p−1)+(v−1)p+1", "rank 0 메모리 / A: 시뮬레이터 = pA(1+(p−1)/(pv))",
         "1F1B 대비", "O(vp) 라면 / A"],
        [[r[0], agree(str(r[1]), str(r[2])) if r[0] != rows[0][0] else f"{r[1]} (= p)", agree(r[3], r[4]), r[5], r[6]]
         for r in rows])
    comm = results.markdown_table(["v", "경계 통과 (forward, micro-batch 당) = pv − 1", "1F1B 대비"],
                                  [[r[0], r[7], r[8]] for r in rows])
    return mem + "\n\n" + comm


# --8<-- [start:delta]
def step_time_vs_v(delta: float, p: int = 4, m: int = 8, vs=(1, 2, 4)) -> list[float]:
    """Simulated step time of the same model (T_F = 1, T_B = 2 per rank) cut into v chunks, with T_hop = delta
    on every rank-crossing dependency (v = 1 is 1F1B)."""
    return [ps.simulate("1f1b" if v == 1 else "interleaved", p, m, v, t_f=1 / v, t_b=2 / v, t_w=0.0, t_comm=delta).makespan
            for v in vs]
# --8<-- [end:delta]


def delta_markdown(deltas=(0.0, 0.05, 0.2), vs=(1, 2, 4)) -> str:
    """Experiment 4's table: step time per v for each T_hop, and the fastest v."""
    rows = []
    for d in deltas:
        ts = step_time_vs_v(d, vs=vs)
        rows.append([f"{d:g}"] + [f"{t:.2f}" for t in ts] + [vs[min(range(len(vs)), key=ts.__getitem__)]])
    return results.markdown_table(["T_hop (T_F 단위)"] + [f"T, v = {v}" for v in vs] + ["가장 빠른 v"], rows)


def sim_gantt() -> str:
    fig, axes = figures.new(7.5, 3.8, nrows=2, squeeze=False)
    for ax, v in zip(axes[:, 0], (1, 2)):
        tl = ps.simulate("1f1b" if v == 1 else "interleaved", 4, 8, v, t_f=1 / v, t_b=2 / v, t_w=0.0)
        ps.gantt(ax, ps.timeline_rows(tl), f"시뮬레이터: p = 4, m = 8, v = {v} (chunk 1 은 빗금)", label_mb=False)
    axes[-1, 0].set_xlabel("T_F 단위 (rank 의 forward 하나 = 1)")
    fig.tight_layout()
    return figures.svg(fig)


def measured_rows(run) -> list[list]:
    p = run.params["p"]
    rows = []
    for v_name in ("sleep", "real"):
        for sched in ("1f1b", "interleaved", "looped_bfs"):
            e = entry(run, sched, v_name, run.params["m_all"])
            mr = ps.measured_rows(e)
            b = ps.measured_bubbles(mr)
            sim = ps.simulate(sched, p, e["m"], e["v"])
            rows.append([v_name, e["torch_class"], e["v"], f"{b['fraction']:.3f}", f"{b['relative']:.3f}",
                         f"{sim.bubble_relative():.3f}", " / ".join(map(str, e["peak_live_microbatches"])),
                         " / ".join(map(str, sim.inflight())), sum(len(a) for a in mr)])
    return rows


def measured_gantt(run, hardware: str = "") -> str:
    m = run.params["m_all"]
    where = f"{hardware}, " if hardware else ""
    fig, axes = figures.new(7.5, 3.2, nrows=2, squeeze=False, sharex=True)
    for ax, sched in zip(axes[:, 0], ("interleaved", "looped_bfs")):
        e = entry(run, sched, "sleep", m)
        gantt(ax, ps.measured_rows(e), f"측정 ({where}sleep): {e['torch_class']}, m = {m}, v = 2", unit=1e-3)
    axes[-1, 0].set_xlabel("ms")
    fig.subplots_adjust(hspace=0.45, left=0.09, right=0.99, top=0.93, bottom=0.14)  # fixed margins: tight_layout re-measures every label
    return figures.svg(fig)


def order_text(run, sched: str, rank: int) -> str:
    e = entry(run, sched, "sleep", run.params["m_all"])
    return " ".join(f"{a['op']}{a['mb']}.{a['chunk']}" for a in ps.measured_rows(e)[rank])


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def executed_order(e: dict, rank: int) -> list[tuple[str, int, int]]:
    """(op, micro-batch, chunk) in the order rank `rank` ran them (backward calls as B)."""
    return [(a["op"], a["mb"], a["chunk"]) for a in ps.measured_rows(e)[rank]]


def order_tab(plat) -> str:
    """Experiment 3's orders on one hardware, and whether each equals the simulator's (Definition 4.4.2)."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    m, p = run.params["m_all"], run.params["p"]
    lines = []
    for sched in ("interleaved", "looped_bfs"):
        e = entry(run, sched, "sleep", m)
        for r in range(p):
            same = executed_order(e, r) == ps.rank_order(sched, r, p, m, e["v"])
            lines.append(f"- `{sched}` rank {r}: `{order_text(run, sched, r)}` — 시뮬레이터의 순서와 같음: **{same}**")
    return "\n".join(lines)


def interleave_tab(plat) -> str:
    """Experiment 3's table and Gantt chart on one hardware, with the live-chunk check against the simulator."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    rows = measured_rows(run)
    live = all(r[6] == r[7] for r in rows)
    bubble = results.markdown_table(["변형", "schedule", "𝓑_tot 측정", "𝓑_ideal 측정", "𝓑_ideal 시뮬레이터"],
                                    [[r[0], r[1], r[3], r[4], r[5]] for r in rows])
    memory = results.markdown_table(["변형", "schedule", "v", "peak 살아 있는 chunk (측정, rank 0 / 1)", "시뮬레이터",
                                    "기록된 action 수"], [[r[0], r[1], r[2], r[6], r[7], r[8]] for r in rows])
    return (preset_line(run) + "\n\n**Bubble**:\n\n" + bubble + "\n\n**살아 있는 chunk 와 action 수**:\n\n" + memory
            + f"\n\n살아 있는 chunk 의 측정 = 시뮬레이터, 모든 행에서: **{live}**\n\n"
            + measured_gantt(run, hw_short(plat)))

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


def placement_svg(p: int = 4, v: int = 2, layers: int = 16) -> str:
    """Who holds what: the model's layers cut into p·v chunks, chunk c (model stage c) on rank c mod p, with the
    forward path of one micro-batch (stage c → c + 1, a rank crossing at every chunk boundary)."""
    n = p * v
    per = layers // n
    fig, ax = figures.new(7.5, 2.6)
    for c in range(n):
        r = c % p
        x = c * per
        ax.add_patch(__import__("matplotlib").patches.Rectangle((x, p - 1 - r), per, 0.8, color=f"C{r}",
                                                                   alpha=0.85 if c < p else 0.45,
                                                                   hatch=None if c < p else "//"))
        ax.text(x + per / 2, p - 1 - r + 0.4, f"chunk {c // p}\n층 {x}–{x + per - 1}", ha="center", va="center", fontsize=7)
        if c + 1 < n:
            ax.annotate("", xy=(x + per + 0.05, p - 1 - (c + 1) % p + 0.4), xytext=(x + per - 0.05, p - 1 - r + 0.4),
                        arrowprops=dict(arrowstyle="->", color="0.3", lw=0.8))
    ax.set_xlim(0, layers)
    ax.set_ylim(-0.1, p)
    ax.set_yticks([p - 1 - r + 0.4 for r in range(p)], [f"rank {r}" for r in range(p)])
    ax.set_xlabel(f"모델의 층 (0 … {layers - 1}); 화살표 = micro-batch 하나의 forward 가 건너는 경계 ({n - 1} 번)")
    ax.set_title(f"p = {p}, v = {v}: 모델 stage c 는 rank c mod p 에 (chunk 1 은 빗금)", fontsize=10)
    fig.tight_layout()
    return figures.svg(fig)


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


def real_reading_numbers(run) -> dict:
    """Experiment 3's real variant at m_all, read from the results file: measured 𝓑_tot, busy time, makespan and
    action count per schedule, and the simulator fed with the real variant's own mean F, B and T_hop (from the real
    variant's m = 1 GPipe run, Ch4-02 실험 2; the sleep variant's hop is another program's)."""
    from snippets.ch4_pipeline_parallel import d02_gpipe_microbatching as d02

    p, m = run.params["p"], run.params["m_all"]
    hop = d02.hop_estimate(next(e for e in d02.entries(run, "gpipe", "real") if e["m"] == 1))
    out = {"hop": hop}
    for sched in ("1f1b", "interleaved", "looped_bfs"):
        e = entry(run, sched, "real", m)
        mr = ps.measured_rows(e)
        b = ps.measured_bubbles(mr)
        t = d02.op_means(e)
        sim = ps.simulate(sched, p, m, e["v"], t_f=t["F"], t_b=t["B"], t_w=0.0, t_comm=hop)
        out[sched] = {"tot": b["fraction"], "busy": sum(b["busy"]), "span": b["makespan"],
                      "actions": sum(len(a) for a in mr), "sim": sim.bubble_fraction()}
    return out


def real_reading(run) -> str:
    n = real_reading_numbers(run)
    o, i, l = n["1f1b"], n["interleaved"], n["looped_bfs"]
    worse = i["tot"] > o["tot"]
    extra = (i["span"] - o["span"]) * 2 / max(i["actions"] - o["actions"], 1)
    line = (f"Real 변형 (m = {run.params['m_all']}) 의 𝓑_tot: 1F1B {o['tot']:.3f}, interleaved 1F1B {i['tot']:.3f}, looped BFS {l['tot']:.3f}. "
            f"Interleaving 이 이 하드웨어에서는 {'**오히려 나쁩니다**' if worse else '이득입니다'}. ")
    if worse:
        line += (f"두 rank 의 계산 시간 합은 거의 같고 ({o['busy'] * 1e3:.1f} 대 {i['busy'] * 1e3:.1f} ms), step 이 "
                 f"{(i['span'] - o['span']) * 1e3:.1f} ms 길어졌습니다. Action 이 {i['actions'] - o['actions']} 개 더 많으니 (경계를 건너는 횟수도 "
                 f"micro-batch 마다 {p2p_messages(run.params['p'], 1)} 에서 {p2p_messages(run.params['p'], 2)} 로 늘어남) rank 의 action 하나에 약 "
                 f"{extra * 1e3:.2f} ms 입니다. real 변형의 m = 1 실행에서 추정한 T_hop ({n['hop'] * 1e3:.2f} ms) 만 넣은 시뮬레이터는 interleaved "
                 f"{i['sim']:.3f}, 1F1B {o['sim']:.3f} 로 {'여전히 interleaved 가 낫다고' if i['sim'] < o['sim'] else '같은 역전을'} 예측합니다. "
                 + ("그러니 늘어난 시간은 경계 hop 만이 아니라 action 마다의 고정 비용 (schedule 의 Python 처리와 send/recv 준비, 2 개의 core 를 "
                    "나눠 쓰는 두 process) 이고, 계산이 이 비용보다 충분히 커야 interleaving 이 이깁니다."
                    if i["sim"] < o["sim"] else "경계 hop 의 비용이 늘어난 건너기 횟수만큼 더해진 것입니다."))
    return line


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
            + f"\n\n살아 있는 chunk 의 측정 = 시뮬레이터, 모든 행에서: **{live}**\n\n" + real_reading(run) + "\n\n"
            + measured_gantt(run, hw_short(plat)))

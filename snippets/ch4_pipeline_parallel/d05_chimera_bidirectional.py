"""Ch4-05 Chimera, zero bubble, 2D/3D: B/W split, ZB-H1 / ZB-H2 / ZBV, per-step vs steady-state bubble, DualPipeV's
overlapped pairs, live activations measured by weak references, bidirectional pipelines."""
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


# --8<-- [start:zb_h1]
def zb_h1_path_bound(p: int, m: int, t_f: float, t_b: float, t_w: float) -> float:
    """Theorem 4.5.5's path: micro-batch 0's F down ranks 0..p−2, rank p−1's work up to its last B
    (all F and B, and the m − p weight passes it has not deferred), micro-batch m−1's B back up to
    rank 0, and rank 0's last W."""
    return (p - 1) * t_f + m * (t_f + t_b) + max(m - p, 0) * t_w + (p - 1) * t_b + t_w
# --8<-- [end:zb_h1]


def zb_rows(grid=((2, 8), (4, 8), (4, 16), (8, 32), (8, 64)), times=((1, 1, 1), (1, 1.5, 0.5), (1, 2, 1))) -> list[list]:
    rows = []
    for p, m in grid:
        for tf, tb, tw in times:
            z = ps.simulate("zb_h1", p, m, t_f=tf, t_b=tb, t_w=tw)
            o = ps.simulate("1f1b", p, m, t_f=tf, t_b=tb, t_w=tw)
            rows.append([p, m, f"{tf:g}:{tb:g}:{tw:g}", f"{z.bubble_relative():.4f}",
                         f"{float(ps.zb_h1_bubble_relative(p, m, tf, tb, tw)):.4f}", f"{o.bubble_relative():.4f}"])
    return rows


def zb_gantt() -> str:
    fig, axes = figures.new(7.5, 3.8, nrows=2, squeeze=False)
    for ax, sched in zip(axes[:, 0], ("1f1b", "zb_h1")):
        ps.gantt(ax, ps.timeline_rows(ps.simulate(sched, 4, 8)), f"시뮬레이터: {sched}, p = 4, m = 8, T_F = T_B = T_W = 1",
                 label_mb=False)
    axes[-1, 0].set_xlabel("T_F 단위")
    fig.tight_layout()
    return figures.svg(fig)


MEASURED = ("gpipe", "1f1b", "interleaved", "looped_bfs", "interleaved_zb", "zbv", "dualpipev")


def backward_calls(e: dict) -> dict:
    """Recorded backward calls of one run: B (whole backward), I (input grad), W (weight grad)."""
    ops: dict = {}
    for acts in e["timeline"]:
        for a in acts:
            if a["op"] != "F":
                k = "W" if a["op"] == "W" else ("B" if a.get("full", True) else "I")
                ops[k] = ops.get(k, 0) + 1
    return ops


# --8<-- [start:live_vs_sim]
def live_vs_simulator(e: dict) -> dict:
    """One measured run: the live pairs counted by weakref and under the holding hooks, against the simulator's
    in-flight count along the book's construction of the same order (pipeline_sim.orders_of, peak_live)."""
    orders, _, _ = ps.orders_of(e["schedule"], len(e["timeline"]), e["m"])
    return {"weakref": e["peak_live_microbatches"], "hooks": e["peak_live_microbatches_hooked"],
            "simulator": [ps.peak_live(o) for o in orders]}
# --8<-- [end:live_vs_sim]


def measured_rows(run) -> list[list]:
    rows = []
    m = run.params["m_all"]
    for v in ("sleep", "real"):
        for sched in MEASURED:
            e = entry(run, sched, v, m)
            b = ps.measured_bubbles(ps.measured_rows(e))
            live, ops = live_vs_simulator(e), backward_calls(e)
            rows.append([f"{v}: {e['torch_class']}", f"{b['fraction']:.3f}",
                         " / ".join(map(str, live["weakref"])), " / ".join(map(str, live["hooks"])),
                         " / ".join(map(str, live["simulator"])),
                         ", ".join(f"{k} {ops[k]}" for k in ("B", "I", "W") if k in ops)])
    return rows


def live_agreement(run) -> tuple[int, int, list[str]]:
    """(runs whose weakref count equals the simulator, runs, schedules where the hooks count more)."""
    es = run.measurements
    same = sum(live_vs_simulator(e)["weakref"] == live_vs_simulator(e)["simulator"] for e in es)
    more = sorted({e["torch_class"] for e in es if e["peak_live_microbatches_hooked"] != e["peak_live_microbatches"]})
    return same, len(es), more


def first_stage_split(run, sched: str = "zbv") -> list[list]:
    """Mean duration of the input-grad (I) and weight-grad (W) calls, per stage, sleep variant."""
    e = entry(run, sched, "sleep", run.params["m_all"])
    out = {}
    for acts in e["timeline"]:
        for a in acts:
            if a["op"] == "W" or not a.get("full", True):
                key = (a["stage"], "W" if a["op"] == "W" else "I")
                out.setdefault(key, []).append(a["end"] - a["start"])
    stages = sorted({s for s, _ in out})
    return [[s, f"{1e3 * sum(out[(s, 'I')]) / len(out[(s, 'I')]):.1f}", f"{1e3 * sum(out[(s, 'W')]) / len(out[(s, 'W')]):.1f}"]
            for s in stages if (s, "I") in out and (s, "W") in out]


def zbv_crossings(p: int) -> int:
    """Forward rank crossings per micro-batch in the V placement: 2p − 1 boundaries, the V's bottom
    (stage p−1 → p) stays on rank p−1."""
    return sum(1 for s in range(2 * p - 1) if (s if s < p else 2 * p - 1 - s) != (s + 1 if s + 1 < p else 2 * p - 2 - s))


def interleaved_crossings(p: int, v: int = 2) -> int:
    """Forward rank crossings per micro-batch in the looped placement (stage s on rank s mod p): every one of
    the p·v − 1 boundaries changes rank when p > 1."""
    return sum(1 for s in range(p * v - 1) if s % p != (s + 1) % p)


def zbv_rows(grid=((2, 8), (4, 8), (4, 16), (8, 32), (8, 64))) -> list[list]:
    """ZBV against ZB-H1 (one step, T_F = T_B = T_W = 1 per chunk): bubble, memory of the busiest rank in
    units of A (chunk = A/2), forward crossings per micro-batch of ZBV / interleaved v = 2 / 1F1B."""
    rows = []
    for p, m in grid:
        z = ps.simulate("zbv", p, m)
        h = ps.simulate("zb_h1", p, m)
        rows.append([p, m, f"{z.bubble_relative():.4f}", f"{h.bubble_relative():.4f}",
                     f"{z.inflight('W').max() / 2:g} / {h.inflight('W').max():g}",
                     f"{zbv_crossings(p)} / {interleaved_crossings(p)} / {p - 1}"])
    return rows


# --8<-- [start:dualpipev_counts]
def dualpipev_counts(p: int, m: int) -> list[dict]:
    """Per rank, from the book's construction of DualPipeV (pipeline_sim.order_dualpipev): slots, overlapped
    F/B pairs, and how many of the rank's 2m forwards and 2m backwards sit inside a pair."""
    out = []
    for r in range(p):
        slots = ps.order_dualpipev(r, p, m)
        pairs = [s for s in slots if s[0] == "OVERLAP"]
        out.append({"rank": r, "slots": len(slots), "overlap": len(pairs),
                    "slots_without_w": sum(1 for s in slots if s[0] != "W"), "forwards": 2 * m, "backwards": 2 * m})
    return out
# --8<-- [end:dualpipev_counts]


def dualpipev_rows(grid=((2, 8), (4, 16), (8, 32))) -> list[list]:
    rows = []
    for p, m in grid:
        c = dualpipev_counts(p, m)
        ov = sum(x["overlap"] for x in c)
        rows.append([p, m, " / ".join(str(x["overlap"]) for x in c), ov, sum(x["slots_without_w"] for x in c),
                     f"{ov} / {sum(x['forwards'] for x in c)}"])
    return rows


# --8<-- [start:steps]
STEADY = ("1f1b", "zb_h1", "interleaved_zb", "dualpipev", "zb_h2", "zbv")


def steady_rows(grid=((4, 16), (8, 32)), steps: int = 4) -> list[list]:
    """Several steps back to back, T_F = T_B = T_W = 1 per chunk: the bubble of one step with a per-step
    synchronisation, the steady-state bubble without it (post-validation), the idle inside rank 0's own busy
    span, and the peak live pairs of the busiest rank."""
    rows = []
    for p, m in grid:
        for sched in STEADY:
            sync = ps.simulate_steps(sched, p, m, steps=steps, sync=True)
            post = ps.simulate_steps(sched, p, m, steps=steps, sync=False)
            orders, _, _ = ps.orders_of(sched, p, m)
            rows.append([f"{sched} (p = {p}, m = {m})", f"{sync['bubble_first']:.4f}", f"{post['bubble_steady']:.4f}",
                         f"{ps.span_idle(sched, p, m)[0]:g}", max(ps.peak_live(o) for o in orders)])
    return rows
# --8<-- [end:steps]


def steps_gantt(p: int = 4, m: int = 8, steps: int = 3) -> str:
    """ZB-H1 and ZB-H2 over three steps, with and without the per-step synchronisation (hatched: odd steps)."""
    fig, axes = figures.new(7.5, 6.4, nrows=4, squeeze=False, sharex=True)
    for ax, (sched, sync) in zip(axes[:, 0], [("zb_h1", True), ("zb_h1", False), ("zb_h2", True), ("zb_h2", False)]):
        tl = ps.simulate_steps(sched, p, m, steps=steps, sync=sync)
        gantt(ax, tl["rows"], f"{sched}, p = {p}, m = {m}, step {steps} 개, " + ("step 마다 동기화" if sync else "post-validation (동기화 없음)"),
                 label_mb=False)
        for t in tl["step_end"]:
            ax.axvline(t, color="black", lw=0.8, ls=":")
    axes[-1, 0].set_xlabel("T_F 단위 (점선: step 의 끝; 빗금: 홀수 번째 step)")
    fig.subplots_adjust(hspace=0.5, left=0.09, right=0.99, top=0.95, bottom=0.08)
    return figures.svg(fig)


def mechanism_svg(p: int = 4) -> str:
    """Who holds which stage and which way a micro-batch moves: 1F1B, the V placement (ZBV, DualPipeV) and
    the two pipelines of Chimera, p ranks as rows, stages as numbered boxes, arrows in forward order."""
    fig, axes = figures.new(7.5, 2.9, ncols=3, squeeze=False)
    panels = [("1F1B: stage s 는 rank s", [[(s, s) for s in range(p)]], ["#4C72B0"]),
              ("V 배치: rank r 은 stage r, 2p−1−r", [[(s, s if s < p else 2 * p - 1 - s) for s in range(2 * p)]], ["#4C72B0"]),
              ("Chimera: 두 pipeline (아래로 / 위로)", [[(s, s) for s in range(p)], [(s, p - 1 - s) for s in range(p)]],
               ["#4C72B0", "#C44E52"])]
    for ax, (title, paths, colours) in zip(axes[0], panels):
        for k, (path, col) in enumerate(zip(paths, colours)):
            xs = [(i if len(path) <= p else i) + 0.15 * k for i, _ in enumerate(path)]
            ys = [r for _, r in path]
            ax.plot(xs, ys, "-", color=col, lw=1.2, alpha=0.7)
            for i in range(len(path) - 1):
                ax.annotate("", (xs[i + 1], ys[i + 1]), (xs[i], ys[i]),
                            arrowprops={"arrowstyle": "->", "color": col, "lw": 1.2})
            for x, (s, r) in zip(xs, path):
                ax.text(x, r, str(s), ha="center", va="center", fontsize=8, color="white",
                        bbox={"boxstyle": "round,pad=0.25", "fc": col, "ec": "none"})
        ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
        ax.set_ylim(p - 0.4, -0.6)
        ax.set_xticks([])
        ax.set_xlabel("forward 의 순서 →", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(False)
    fig.subplots_adjust(wspace=0.35, left=0.08, right=0.99, top=0.88, bottom=0.12)
    return figures.svg(fig)


def measured_gantt(run, hardware: str = "") -> str:
    m = run.params["m_all"]
    where = f"{hardware}, " if hardware else ""
    fig, axes = figures.new(7.5, 4.6, nrows=3, squeeze=False, sharex=True)
    for ax, sched in zip(axes[:, 0], ("interleaved_zb", "zbv", "dualpipev")):
        e = entry(run, sched, "sleep", m)
        gantt(ax, ps.measured_rows(e), f"측정 ({where}sleep): {e['torch_class']}, m = {m}", unit=1e-3, label_mb=False)
    axes[-1, 0].set_xlabel("ms (파랑 F, 주황 B 또는 input-grad, 초록 W; 빗금은 두 번째 chunk)")
    fig.subplots_adjust(hspace=0.45, left=0.09, right=0.99, top=0.93, bottom=0.1)  # fixed margins: tight_layout re-measures every label
    return figures.svg(fig)


# --8<-- [start:chimera]
CHIMERA_GRID = tuple((p, m) for p in (2, 4, 8) for m in (p, 2 * p, 4 * p, 8 * p))


def chimera_rows(grid=CHIMERA_GRID, backward=(1.0, 2.0)) -> list[list]:
    """Bidirectional (this book's list schedule) vs 1F1B, T_F = 1, whole backward = `backward` (T_W = 0),
    both bubbles as a fraction of total time, and which of the two is smaller."""
    rows = []
    for bwd in backward:
        for p, m in grid:
            c = ps.simulate("chimera", p, m, t_f=1.0, t_b=bwd, t_w=0.0).bubble_fraction()
            o = ps.simulate("1f1b", p, m, t_f=1.0, t_b=bwd, t_w=0.0).bubble_fraction()
            rows.append([f"{bwd:g}", f"p = {p}, m = {m}", f"{c:.3f}", f"{(p - 2) / (2 * m + p - 2):.3f}",
                         f"{o:.3f}", "양방향" if c < o else "1F1B"])
    return rows
# --8<-- [end:chimera]


def chimera_wins(backward: float = 2.0) -> dict:
    """Where the bidirectional construction beats 1F1B on the grid, and where it loses."""
    rows = [r for r in chimera_rows(backward=(backward,))]
    return {"wins": [r[1] for r in rows if r[5] == "양방향"], "loses": [r[1] for r in rows if r[5] == "1F1B"]}


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def zero_bubble_tab(plat) -> str:
    """Experiment 6 on one hardware: the zero-bubble family beside 1F1B, their gradients, the Gantt chart."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    m = run.params["m_all"]
    worst = max(entry(run, s, v, m)["grad_max_err"] for s in MEASURED for v in ("sleep", "real"))
    table = results.markdown_table(["변형: schedule", "𝓑_tot 측정", "live: weakref", "live: hook",
                                    "live: 시뮬레이터", "backward 호출"], measured_rows(run))
    same, n, more = live_agreement(run)
    reading = (f"weakref 로 센 peak live 가 시뮬레이터와 같은 실행: **{same} / {n}** (이 파일의 모든 실행, m 을 바꾼 실행 포함). "
               f"hook 으로 센 값이 더 큰 schedule: {', '.join(f'`{c}`' for c in more) or '없음'}.")
    return (preset_line(run) + "\n\n" + table + "\n\n" + reading
            + f"\n\npipeline 없이 계산한 gradient 와의 최대 차이 (모든 행): {worst:.1e}\n\n"
            + measured_gantt(run, hw_short(plat)))


def split_tab(plat) -> str:
    """Mean input-grad and weight-grad call times per stage (sleep variant) on one hardware."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    out = []
    for sched in ("zbv", "interleaved_zb"):
        out.append(f"`{sched}`:\n\n" + results.markdown_table(["stage", "input-grad 평균 (ms)", "weight-grad 평균 (ms)"],
                                                               first_stage_split(run, sched)))
    return "\n\n".join(out)


def chimera_gantt(p: int = 4, m: int = 4) -> str:
    fig, axes = figures.new(7.5, 3.6, nrows=2, squeeze=False)
    for ax, sched in zip(axes[:, 0], ("1f1b", "chimera")):
        ps.gantt(ax, ps.timeline_rows(ps.simulate(sched, p, m, t_f=1.0, t_b=1.0, t_w=0.0)),
                 f"시뮬레이터: {sched}, p = {p}, m = {m}, T_F = backward = 1" + (" (빗금: 위로 흐르는 pipeline)" if sched == "chimera" else ""))
    axes[-1, 0].set_xlabel("T_F 단위")
    fig.tight_layout()
    return figures.svg(fig)


# --------------------------------------------------------------------------- experiment 2: measured F / B / W

ANATOMY = "step_anatomy"


# --8<-- [start:fbw]
def measured_fbw(run) -> dict:
    """The simulator's inputs from one step_anatomy file: T_F, T_B (input-grad), T_W (weight-grad) and the
    unsplit backward T_BW, each the mean over the stages of the per-stage medians (ms). The stages are equal
    by construction (the same number of identical blocks), so their spread is measurement noise."""
    st = run.measurements["stages"]
    mean = lambda k: sum(s[f"{k}_ms_median"] for s in st) / len(st)  # noqa: E731
    return {"p": len(st), "F": mean("F"), "B": mean("B"), "W": mean("W"), "BW": mean("BW")}


def simulate_measured(fbw: dict, m: int) -> dict:
    """ZB-H1 with the measured F, B, W against 1F1B with the measured F and the unsplit backward BW."""
    p = fbw["p"]
    zb = ps.simulate("zb_h1", p, m, t_f=fbw["F"], t_b=fbw["B"], t_w=fbw["W"])
    one = ps.simulate("1f1b", p, m, t_f=fbw["F"], t_b=fbw["BW"], t_w=0.0)
    return {"zb_h1": zb, "1f1b": one,
            "zb_h1_formula": float(ps.zb_h1_bubble_relative(p, m, fbw["F"], fbw["B"], fbw["W"]))}
# --8<-- [end:fbw]


def fbw_tab(plat) -> str:
    """Experiment 2 on one hardware: the per-stage F / B / W times one device measured, the split's check, and
    what the ZB-H1 simulator predicts with them (against 1F1B with the unsplit backward)."""
    run = plat.by_world.get(1)
    if run is None:
        return missing(plat, "이 프로그램은 장치 하나 (world size 1) 에서만 돕니다: 이 하드웨어에는 그 측정이 없습니다")
    p, st, chk = run.params, run.measurements["stages"], run.measurements["stages_check"]
    f = measured_fbw(run)
    stages = results.markdown_table(
        ["stage", "F (ms)", "B: input-grad (ms)", "W: weight-grad (ms)", "B + W (ms)", "나누지 않은 backward (ms)"],
        [[s["stage"], f"{s['F_ms_median']:.3g}", f"{s['B_ms_median']:.3g}", f"{s['W_ms_median']:.3g}",
          f"{s['B_plus_W_ms']:.3g}", f"{s['BW_ms_median']:.3g}"] for s in st])
    tot = [s["F_ms_median"] + s["B_plus_W_ms"] for s in st]
    fl = chk["flops_counted_stage0"]
    lines = [f"preset `{p['preset']}`: 블록 {p['layers']} 개를 stage {p['stages']} 개로 (stage 마다 {st[0]['blocks']} 개), "
             f"h = {p['h']}, token {p['tokens']}, {p['dtype']}; step {p['steps']} 개의 median",
             f"FLOPs (FlopCounterMode, stage 0): F {fl['F']:,}, B {fl['B']:,}, W {fl['W']:,}; 공식 2·(2·T·h·4h)·블록 = "
             f"{chk['flops_formula_each']:,} (같음: **{chk['flops_match']}**)",
             f"나눈 gradient 와 나누지 않은 backward 의 gradient: 최대 상대 차이 {chk['max_rel_err_vs_BW']:.1e} (허용 {chk['tol']:g}, "
             f"bit 까지 같음: {chk['bitwise_equal']})",
             f"시뮬레이터의 입력 (stage 평균): T_F = {f['F']:.3g} ms, T_B = {f['B']:.3g} ms, T_W = {f['W']:.3g} ms "
             f"(T_F : T_B : T_W = 1 : {f['B'] / f['F']:.2f} : {f['W'] / f['F']:.2f}); stage 마다의 F + B + W 는 평균에서 최대 "
             f"{max(abs(t / (sum(tot) / len(tot)) - 1) for t in tot):.0%} 떨어짐",
             f"나누는 비용: stage 평균 (B + W) / 나누지 않은 backward = {(f['B'] + f['W']) / f['BW']:.2f}"]
    rows = []
    for m in (f["p"], 4 * f["p"]):
        sim = simulate_measured(f, m)
        rows += [[m, "ZB-H1", f"F {f['F']:.3g}, B {f['B']:.3g}, W {f['W']:.3g}", f"{sim['zb_h1'].bubble_relative():.4f}",
                  f"{sim['zb_h1_formula']:.4f}", f"{sim['zb_h1'].makespan:,.4g}"],
                 [m, "1F1B", f"F {f['F']:.3g}, backward {f['BW']:.3g}", f"{sim['1f1b'].bubble_relative():.4f}",
                  f"{(f['p'] - 1) / m:.4f}", f"{sim['1f1b'].makespan:,.4g}"]]
    table = results.markdown_table(["m", "schedule", "시간 입력 (ms)", "𝓑_ideal (시뮬레이터)", "𝓑_ideal (공식)",
                                    "makespan (ms, 시뮬레이터)"], rows)
    m4 = simulate_measured(f, 4 * f["p"])
    faster = "ZB-H1" if m4["zb_h1"].makespan < m4["1f1b"].makespan else "1F1B"
    closing = (f"p = {f['p']}, m = {4 * f['p']} 에서 makespan 이 짧은 쪽: **{faster}** "
               f"(ZB-H1 / 1F1B = {m4['zb_h1'].makespan / m4['1f1b'].makespan:.2f}); 시뮬레이터의 ZB-H1 bubble 이 공식 (정리 4.5.5 의 "
               f"하한) 과 같은 행: {sum(abs(float(r[3]) - float(r[4])) < 5e-5 for r in rows if r[1] == 'ZB-H1')} / 2")
    return "\n\n".join(["\n".join(f"- {x}" for x in lines), stages, table, closing])

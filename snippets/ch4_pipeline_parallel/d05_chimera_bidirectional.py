"""Ch4-05 Chimera, zero bubble, 2D/3D: B/W split, ZB-H1 (p−1)/(3m), ZBV / DualPipeV measured, bidirectional pipelines."""
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
    """Theorem 4.5.4's path: micro-batch 0's F down ranks 0..p−2, rank p−1's work up to its last B
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
                         f"{float(ps.zb_h1_bubble_relative(p, m, tf, tb, tw)):.4f}", f"{o.bubble_relative():.4f}",
                         f"{z.makespan:g}", f"{zb_h1_path_bound(p, m, tf, tb, tw):g}",
                         " ".join(map(str, z.inflight("B"))), " ".join(map(str, o.inflight()))])
    return rows


def zb_gantt() -> str:
    fig, axes = figures.new(7.5, 3.8, nrows=2, squeeze=False)
    for ax, sched in zip(axes[:, 0], ("1f1b", "zb_h1")):
        ps.gantt(ax, ps.timeline_rows(ps.simulate(sched, 4, 8)), f"시뮬레이터: {sched}, p = 4, m = 8, T_F = T_B = T_W = 1",
                 label_mb=False)
    axes[-1, 0].set_xlabel("T_F 단위")
    fig.tight_layout()
    return figures.svg(fig)


MEASURED = ("1f1b", "interleaved", "interleaved_zb", "zbv", "dualpipev")


def measured_rows(run) -> list[list]:
    rows = []
    m = run.params["m_all"]
    for v in ("sleep", "real"):
        for sched in MEASURED:
            e = entry(run, sched, v, m)
            b = ps.measured_bubbles(ps.measured_rows(e))
            ops = {}
            for acts in e["timeline"]:
                for a in acts:
                    if a["op"] == "F":
                        continue
                    k = "W" if a["op"] == "W" else ("B" if a.get("full", True) else "I")
                    ops[k] = ops.get(k, 0) + 1
            rows.append([v, e["torch_class"], " / ".join(",".join(map(str, s)) for s in e["stages_per_rank"]),
                         f"{b['fraction']:.3f}", f"{b['relative']:.3f}",
                         " / ".join(map(str, e["peak_live_microbatches"])),
                         ", ".join(f"{k} {ops[k]}" for k in ("B", "I", "W") if k in ops)])
    return rows


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


def zbv_rows(grid=((2, 8), (4, 8), (4, 16), (8, 32), (8, 64))) -> list[list]:
    rows = []
    for p, m in grid:
        z = ps.simulate("zbv", p, m)
        h = ps.simulate("zb_h1", p, m)
        rows.append([p, m, f"{z.bubble_relative():.4f}", f"{h.bubble_relative():.4f}",
                     f"{float(ps.zb_h1_bubble_relative(p, m)):.4f}",
                     " ".join(map(str, z.inflight("W"))), " ".join(map(str, h.inflight("W"))),
                     f"{z.inflight('W').max() / 2:g}", zbv_crossings(p), p - 1])
    return rows


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
def chimera_rows(grid=((2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16)), backward=(1.0, 2.0)) -> list[list]:
    """Bidirectional (this book's list schedule) vs 1F1B, T_F = 1, whole backward = `backward` (T_W = 0)."""
    rows = []
    for bwd in backward:
        for p, m in grid:
            c = ps.simulate("chimera", p, m, t_f=1.0, t_b=bwd, t_w=0.0)
            o = ps.simulate("1f1b", p, m, t_f=1.0, t_b=bwd, t_w=0.0)
            rows.append([f"{bwd:g}", p, m, f"{c.bubble_fraction():.3f}", f"{(p - 2) / (2 * m + p - 2):.3f}",
                         f"{o.bubble_fraction():.3f}",
                         f"{1 - c.bubble_fraction() / o.bubble_fraction():.0%}" if o.bubble_fraction() else "—",
                         " ".join(map(str, c.inflight())), " ".join(map(str, o.inflight())), p + 1])
    return rows
# --8<-- [end:chimera]


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def zero_bubble_tab(plat) -> str:
    """Experiment 2 on one hardware: the zero-bubble family beside 1F1B, their gradients, the Gantt chart."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    m = run.params["m_all"]
    worst = max(entry(run, s, v, m)["grad_max_err"] for s in MEASURED for v in ("sleep", "real"))
    table = results.markdown_table(["변형", "schedule", "stage 배치 (rank 0 / 1)", "𝓑_tot 측정", "𝓑_ideal 측정",
                                    "peak 살아 있는 (rank 0 / 1)", "backward 호출"], measured_rows(run))
    return (preset_line(run) + "\n\n" + table + f"\n\npipeline 없이 계산한 gradient 와의 최대 차이 (모든 행): {worst:.1e}\n\n"
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


# --------------------------------------------------------------------------- experiment 5: measured F / B / W

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
    """Experiment 5 on one hardware: the per-stage F / B / W times one device measured, the split's check, and
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
               f"(ZB-H1 / 1F1B = {m4['zb_h1'].makespan / m4['1f1b'].makespan:.2f}); 시뮬레이터의 ZB-H1 bubble 이 공식 (정리 4.5.4 의 "
               f"하한) 과 같은 행: {sum(abs(float(r[3]) - float(r[4])) < 5e-5 for r in rows if r[1] == 'ZB-H1')} / 2")
    return "\n\n".join(["\n".join(f"- {x}" for x in lines), stages, table, closing])

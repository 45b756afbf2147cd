"""Ch4-03 1F1B (PipeDream-Flush): same bubble as GPipe, at most p − r micro-batches in flight on rank r."""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch4_pipeline_parallel import gantt, hw_short, missing, preset_line, the_run
from snippets.common import figures
from snippets.common import pipeline_sim as ps


def runs() -> list[results.Result]:
    """Every results file of gpu_runs/pipeline_bench.py (2 ranks), on every hardware (CPU first)."""
    return results.experiment("pipeline_bench")


def deepspeed_runs() -> list[results.Result]:
    """Every results file of gpu_runs/deepspeed_pipe.py (2 ranks), on every hardware (CPU first)."""
    return results.experiment("deepspeed_pipe")


def entries(run, schedule: str, variant: str = "sleep") -> list[dict]:
    return sorted((e for e in run.measurements if e["schedule"] == schedule and e["variant"] == variant),
                  key=lambda e: e["m"])


# --8<-- [start:order]
def one_f_one_b_order(r: int, p: int, m: int) -> list[str]:
    """Rank r's 1F1B order as text: min(p−1−r, m) warm-up forwards, then F/B pairs, then the remaining B."""
    return [f"{op}{i}" for op, i, _ in ps.rank_order("1f1b", r, p, m)]


def inflight_from_order(order: list[str]) -> int:
    """Peak of (#F started − #B finished) along a rank's order: depends on the order only, not on times."""
    alive = peak = 0
    for a in order:
        alive += 1 if a[0] == "F" else -1
        peak = max(peak, alive)
    return peak
# --8<-- [end:order]


def compare_rows(grid=((2, 8), (4, 4), (4, 8), (4, 16), (8, 32), (8, 4))) -> list[list]:
    rows = []
    for p, m in grid:
        g, o = ps.simulate("gpipe", p, m), ps.simulate("1f1b", p, m)
        rows.append([p, m, f"{g.makespan:g}", f"{o.makespan:g}", f"{o.bubble_fraction():.4f}",
                     f"{o.bubble_relative():.4f}", " ".join(map(str, g.inflight())), " ".join(map(str, o.inflight())),
                     " ".join(str(inflight_from_order(one_f_one_b_order(r, p, m))) for r in range(p))])
    return rows


def sim_gantt() -> str:
    fig, axes = figures.new(7.5, 3.6, nrows=2, squeeze=False)
    for ax, sched in zip(axes[:, 0], ("gpipe", "1f1b")):
        ps.gantt(ax, ps.timeline_rows(ps.simulate(sched, 4, 8, t_f=1, t_b=1, t_w=1)),
                 f"시뮬레이터: {sched}, p = 4, m = 8 (T_F = 1, backward = 2)")
    axes[-1, 0].set_xlabel("T_F 단위")
    fig.tight_layout()
    return figures.svg(fig)


def measured_rows_table(run) -> list[list]:
    p = run.params["p"]
    out = []
    for g in entries(run, "gpipe"):
        one = next((e for e in entries(run, "1f1b") if e["m"] == g["m"]), None)
        if one is None:
            continue
        bg, bo = (ps.measured_bubbles(ps.measured_rows(e)) for e in (g, one))
        out.append([g["m"], f"{bg['fraction']:.3f}", f"{bo['fraction']:.3f}", f"{float(ps.gpipe_bubble_fraction(p, g['m'])):.3f}",
                    f"{bg['relative']:.3f}", f"{bo['relative']:.3f}", f"{float(ps.gpipe_bubble_relative(p, g['m'])):.3f}"])
    return out


def measured_gantt(run, m: int, hardware: str = "") -> str:
    where = f"{hardware}, " if hardware else ""
    fig, axes = figures.new(7.5, 3.2, nrows=2, squeeze=False, sharex=True)
    for ax, sched in zip(axes[:, 0], ("gpipe", "1f1b")):
        e = next(x for x in entries(run, sched) if x["m"] == m)
        gantt(ax, ps.measured_rows(e), f"측정 ({where}sleep): {e['torch_class']}, m = {m}", unit=1e-3)
    axes[-1, 0].set_xlabel("ms")
    fig.subplots_adjust(hspace=0.45, left=0.09, right=0.99, top=0.93, bottom=0.14)  # fixed margins: tight_layout re-measures every label
    return figures.svg(fig)


def memory_rows(run) -> list[list]:
    rows = []
    for v in ("sleep", "real"):
        for sched in ("gpipe", "1f1b"):
            for e in entries(run, sched, v):
                p = len(e["timeline"])
                want = [m for m in ps.simulate(sched, p, e["m"]).inflight()]
                rows.append([v, e["torch_class"], e["m"], " / ".join(map(str, e["peak_live_microbatches"])),
                             " / ".join(map(str, want)),
                             " / ".join(f"{a / b:.2f}" for a, b in zip(e["peak_saved_bytes"], e["per_mb_saved_bytes"]))])
    return rows


# --8<-- [start:deepspeed_view]
def deepspeed_steps(rank: dict) -> list[str]:
    """TrainSchedule's planned instructions per step, as text ('·' for an empty step)."""
    return [" ".join(f"{n}({b})" if b is not None else n for n, b in step) or "·" for step in rank["planned"]]


def deepspeed_fb(rank: dict) -> list[str]:
    """The executed ForwardPass / BackwardPass, numbered in order (the k-th pass is micro-batch k)."""
    out, nf, nb = [], 0, 0
    for name, _ in rank["executed"]:
        if name == "ForwardPass":
            out.append(f"F{nf}")
            nf += 1
        elif name == "BackwardPass":
            out.append(f"B{nb}")
            nb += 1
    return out
# --8<-- [end:deepspeed_view]


def deepspeed_rows(ds) -> list[list]:
    ranks = ds.measurements["ranks"]
    n = max(len(r["planned"]) for r in ranks)
    steps = [deepspeed_steps(r) for r in ranks]
    return [[k] + [s[k] if k < len(s) else "" for s in steps] for k in range(n)]


def pipedream_weight_versions(p: int) -> dict:
    """Weight copies per stage: PipeDream (stashing, one per in-flight minibatch: p − r), 2BW (2), Flush (1)."""
    r = np.arange(p)
    return {"pipedream": (p - r).tolist(), "2bw": [2] * p, "flush": [1] * p}


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def compare_tab(plat) -> str:
    """Experiment 2 on one hardware: GPipe and 1F1B measured at the same m, the common formulas, the Gantt at m_all."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    table = results.markdown_table(["m", "𝓑_tot GPipe", "𝓑_tot 1F1B", "(p−1)/(m+p−1)", "𝓑_ideal GPipe", "𝓑_ideal 1F1B",
                                    "(p−1)/m"], measured_rows_table(run))
    return preset_line(run) + "\n\n" + table + "\n\n" + measured_gantt(run, run.params["m_all"], hw_short(plat))


def memory_reading(run) -> str:
    """Theorems 4.2.5 / 4.3.4 on this run: every measured peak equals the simulator's (m for GPipe, p − r for 1F1B)."""
    ok = {}
    for sched in ("gpipe", "1f1b"):
        es = entries(run, sched, "sleep") + entries(run, sched, "real")
        ok[sched] = all(list(e["peak_live_microbatches"]) == [int(x) for x in ps.simulate(sched, len(e["timeline"]), e["m"]).inflight()]
                        for e in es)
    return f"측정 = 정리, 모든 행에서: GPipe **{ok['gpipe']}**, 1F1B **{ok['1f1b']}**"


def memory_tab(plat) -> str:
    run = the_run(plat)
    if run is None:
        return missing(plat)
    return (results.markdown_table(["변형", "schedule", "m", "peak 살아 있는 micro-batch (rank 0 / 1, 측정)", "정리 4.3.4 / 4.2.5",
                                    "peak bytes / micro-batch bytes"], memory_rows(run)) + "\n\n" + memory_reading(run))


def deepspeed_tab(plat) -> str:
    """Experiment 4 on one hardware: TrainSchedule's instruction stream per step, what ran, buffers and the loss."""
    ds = the_run(plat)
    if ds is None:
        return missing(plat)
    lines = [results.markdown_table(["step", "rank 0 (stage 0) 명령", "rank 1 (stage 1) 명령"], deepspeed_rows(ds)), ""]
    for r in ds.measurements["ranks"]:
        same = r["executed"] == [c for step in r["planned"] for c in step]
        lines.append(f"- stage {r['stage_id']}: 실행된 F/B = {' '.join(deepspeed_fb(r))}; 계획 = 실행: **{same}**; "
                     f"`num_pipe_buffers()` = {r['num_pipe_buffers']}; 손실 {r['loss']:.8f}")
    lines.append(f"- pipeline 없이 계산한 같은 모델의 손실: {ds.measurements['ref_loss']:.8f}")
    return "\n".join(lines)

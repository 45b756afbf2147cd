"""Ch4-05 Chimera, zero bubble, 2D/3D: B/W split, ZB-H1 (p−1)/(3m), ZBV / DualPipeV measured, bidirectional pipelines."""
from __future__ import annotations

from snippets import results
from snippets.common import figures
from snippets.common import pipeline_sim as ps


def bench() -> results.Result:
    return results.load("pipeline_bench", kind="cpu")[0]


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


def measured_gantt(run) -> str:
    m = run.params["m_all"]
    fig, axes = figures.new(7.5, 4.6, nrows=3, squeeze=False)
    for ax, sched in zip(axes[:, 0], ("interleaved_zb", "zbv", "dualpipev")):
        e = entry(run, sched, "sleep", m)
        ps.gantt(ax, ps.measured_rows(e), f"측정 (sleep): {e['torch_class']}, m = {m}", unit=1e-3, label_mb=False)
    axes[-1, 0].set_xlabel("ms (파랑 F, 주황 B 또는 input-grad, 초록 W; 빗금은 두 번째 chunk)")
    fig.tight_layout()
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


def chimera_gantt(p: int = 4, m: int = 4) -> str:
    fig, axes = figures.new(7.5, 3.6, nrows=2, squeeze=False)
    for ax, sched in zip(axes[:, 0], ("1f1b", "chimera")):
        ps.gantt(ax, ps.timeline_rows(ps.simulate(sched, p, m, t_f=1.0, t_b=1.0, t_w=0.0)),
                 f"시뮬레이터: {sched}, p = {p}, m = {m}, T_F = backward = 1" + (" (빗금: 위로 흐르는 pipeline)" if sched == "chimera" else ""))
    axes[-1, 0].set_xlabel("T_F 단위")
    fig.tight_layout()
    return figures.svg(fig)

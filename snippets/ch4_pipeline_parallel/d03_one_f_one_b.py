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


def one_f_one_b_order(r: int, p: int, m: int) -> list[str]:
    """Rank r's 1F1B order as text (pipeline_sim.order_1f1b, shown on the page): F0 F1 … B0 …"""
    return [f"{op}{i}" for op, i, _ in ps.rank_order("1f1b", r, p, m)]


# --8<-- [start:order]
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
        t = f"{o.makespan:g}" if g.makespan == o.makespan else f"{g.makespan:g} ≠ {o.makespan:g}"
        timed = " ".join(map(str, o.inflight()))
        counted = " ".join(str(inflight_from_order(one_f_one_b_order(r, p, m))) for r in range(p))
        rows.append([p, m, t, f"{o.bubble_fraction():.4f} / {o.bubble_relative():.4f}", " ".join(map(str, g.inflight())),
                     timed if timed == counted else f"{timed} ≠ {counted}"])
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

def hop_values(run) -> tuple[list[dict], float]:
    """Experiment 2's gap, computed and left unrounded: the simulator fed with each run's own mean T_F, T_B and the
    boundary time T_hop estimated from the m = 1 run (Ch4-02 실험 2: T − ΣT_busy = 2(p−1)T_hop), for both schedules
    at every shared m, with the measured 𝓑_tot and GPipe's spread (max − min) of 𝓑_tot over its measured steps."""
    from snippets.ch4_pipeline_parallel import d02_gpipe_microbatching as d02

    delta = d02.hop_estimate(next(e for e in entries(run, "gpipe") if e["m"] == 1))
    g, o = ({e["m"]: e for e in entries(run, s)} for s in ("gpipe", "1f1b"))
    out = []
    for m in sorted(set(g) & set(o)):
        row = {"m": m}
        for e, sched in ((g[m], "gpipe"), (o[m], "1f1b")):
            t = d02.op_means(e)
            pr = ps.simulate(sched, len(e["timeline"]), m, t_f=t["F"], t_b=t["B"], t_w=0.0, t_comm=delta)
            row[sched] = ps.measured_bubbles(ps.measured_rows(e))["fraction"]
            row[sched + "_pred"] = pr.bubble_fraction()
        fr = [st["bubble_fraction"] for st in g[m]["step_stats"]]
        row["gap"] = row["1f1b"] - row["gpipe"]  # measured 1F1B − GPipe
        row["spread"] = max(fr) - min(fr)
        row["error"] = row["1f1b_pred"] - row["1f1b"]  # the model's error on 1F1B
        out.append(row)
    return out, delta


def hop_rows(run, computed=None) -> tuple[list[list], float]:
    """The prediction table: measured and predicted 𝓑_tot of both schedules per m (formatted only here)."""
    vals, delta = computed or hop_values(run)
    return [[v["m"]] + [f"{v[k]:.3f}" for k in ("gpipe", "gpipe_pred", "1f1b", "1f1b_pred")] for v in vals], delta


def message_waits(e: dict) -> list[float]:
    """Every cross-rank wait of one measured run: for each dependency on another rank (F_r^j → F_(r+1)^j,
    B_(r+1)^j → B_r^j) whose input finished after the receiving rank's previous action (so the receiver was waiting
    for it), the time from the input's end to the dependent action's start."""
    rows = ps.measured_rows(e)
    at = {(r, a["op"], a["mb"]): a for r, acts in enumerate(rows) for a in acts}
    prev = {(r, a["op"], a["mb"]): (acts[k - 1]["end"] if k else -np.inf)
            for r, acts in enumerate(rows) for k, a in enumerate(acts)}
    out = []
    for (r, op, j), a in at.items():
        src = at.get((r - 1, "F", j)) if op == "F" else at.get((r + 1, "B", j))
        if src is not None and src["end"] >= prev[(r, op, j)]:
            out.append(a["start"] - src["end"])
    return out


def gap_rows(run, computed=None) -> list[list]:
    """Per shared m: the measured 1F1B − GPipe 𝓑_tot, the spread (max − min) of GPipe's 𝓑_tot over the measured
    steps, and the T_hop model's error on 1F1B (predicted − measured), each from unrounded values."""
    return [[v["m"], f"{v['gap']:+.3f}", f"{v['spread']:.3f}", f"{v['error']:+.3f}"] for v in (computed or hop_values(run))[0]]


def hop_reading(run, computed=None) -> str:
    """Experiment 2's reading, computed from the results file: does the T_hop model get the direction, and the size?"""
    from snippets.ch4_pipeline_parallel import d01_naive_pipeline_bubble as d01

    vals, delta = computed or hop_values(run)
    same = sum((v["1f1b"] > v["gpipe"]) == (v["1f1b_pred"] > v["gpipe_pred"]) for v in vals)
    below = sum(abs(v["gap"]) < v["spread"] for v in vals)
    err = [abs(v["error"]) for v in vals]
    diff = [abs(v["gap"]) for v in vals]
    ratio = max(e / max(d, 1e-9) for e, d in zip(err, diff))
    naive = d01.crossing_gaps(next(e for e in entries(run, "gpipe") if e["m"] == 1))
    p = run.params["p"]
    m_all = run.params["m_all"]
    waits = message_waits(next(e for e in entries(run, "1f1b") if e["m"] == m_all))
    ms = lambda xs: " / ".join(f"{x * 1e3:.2f}" for x in xs)  # noqa: E731
    return (f"방향: T_hop = {delta * 1e3:.2f} ms 를 넣은 시뮬레이터는 {len(vals)} 개의 m 중 {same} 개에서 측정과 같은 쪽 (어느 schedule 의 "
            f"𝓑_tot 가 큰지) 을 예측합니다. 크기: 측정된 1F1B − GPipe 차이 ({min(diff):.3f}–{max(diff):.3f}) 는 {len(vals)} 개의 m 중 "
            f"{below} 개에서 GPipe 자신의 step 사이 흔들림보다 작고, 모델의 1F1B 오차 ({min(err):.3f}–{max(err):.3f}) 는 같은 m 의 그 차이의 "
            f"최대 {ratio:.1f} 배입니다. "
            + ("그러니 이 모델은 차이의 크기를 설명하지 못합니다. " if ratio > 1 else "모델의 오차가 차이보다 작습니다. ")
            + f"이유 하나는 입력인 "
            f"T_hop 자체입니다: m = 1 실행의 {delta * 1e3:.2f} ms 는 forward hop {ms(naive['fwd'])} ms, 마지막 rank 의 F→B 전환 "
            f"{naive['turn'] * 1e3:.2f} ms, backward hop {ms(naive['bwd'])} ms 의 합을 경계 통과 수 2(p−1) = {2 * (p - 1)} 로 나눈 값이고 "
            f"(F→B 전환은 경계 통과가 아니지만 이 값에 들어갑니다; [Ch4-01 실험 4](../01-naive-pipeline-bubble/#실험-4-stage-경계를-건너는-시간)), "
            f"m = {m_all} 의 1F1B 실행에서 rank 가 다른 rank 의 결과를 기다린 간격은 {min(waits) * 1e3:.2f}–{max(waits) * 1e3:.2f} ms 입니다. "
            "구조적인 이유는 남습니다: 1F1B 의 steady state 에서는 rank 0 이 B 를 하려면 rank 1 의 B 를, rank 1 이 F 를 하려면 rank 0 의 F 를 "
            "기다리므로 경계의 왕복이 F/B 한 쌍마다 critical path 위에 놓이고, GPipe 는 forward 를 모두 먼저 흘려 보내 그 왕복을 가립니다.")


def compare_tab(plat) -> str:
    """Experiment 2 on one hardware: GPipe and 1F1B measured at the same m, the common formulas, the Gantt at m_all."""
    run = the_run(plat)
    if run is None:
        return missing(plat)
    rows = measured_rows_table(run)
    hv = hop_values(run)
    tot = results.markdown_table(["m", "𝓑_tot GPipe", "𝓑_tot 1F1B", "(p−1)/(m+p−1)"], [r[:4] for r in rows])
    ideal = results.markdown_table(["m", "𝓑_ideal GPipe", "𝓑_ideal 1F1B", "(p−1)/m"], [[r[0], *r[4:7]] for r in rows])
    return (preset_line(run) + "\n\n**총 시간 대비** (𝓑_tot):\n\n" + tot + "\n\n**이상 시간 대비** (𝓑_ideal):\n\n" + ideal
            + "\n\n**경계 시간을 넣은 예측** (𝓑_tot):\n\n"
            + results.markdown_table(["m", "GPipe 측정", "GPipe 예측", "1F1B 측정", "1F1B 예측"], hop_rows(run, hv)[0])
            + "\n\n**차이의 크기** (𝓑_tot):\n\n"
            + results.markdown_table(["m", "1F1B − GPipe (측정)", "GPipe 의 step 사이 범위", "1F1B 예측 − 측정"], gap_rows(run, hv))
            + "\n\n" + hop_reading(run, hv)
            + "\n\n" + measured_gantt(run, run.params["m_all"], hw_short(plat)))


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


# --------------------------------------------------------------------------- memory budget and stage balancing (experiment 5)

# --8<-- [start:budget]
def stage_budget(layers: list[int], p: int, m: int, *, h: int, s: int, b: int, a: int, vocab: int) -> list[dict]:
    """Per stage of a 1F1B pipeline of a GPT: the embedding (vocab·h) on stage 0, the LM head on the last stage
    (tied: a second copy of the same vocab·h weight, with its own gradient and optimizer state), layers[r]
    transformer layers of 12h² parameters on stage r. Model states: (2 + 2 + K)ψ_r bytes (mixed-precision Adam,
    zero_memory_bytes with N = 1); activations: min(p − r, m) in flight (Theorem 4.3.4) × layers[r] × sbh(34 + 5as/h)
    (Korthikanti et al., no recomputation). Forward FLOPs per micro-batch: the layers, plus 2·b·s·h·vocab for the head."""
    from snippets.common.activation_memory import no_parallel
    from snippets.common.zero_memory import zero_memory_bytes

    out = []
    for r, n in enumerate(layers):
        psi = n * 12 * h * h + vocab * h * ((r == 0) + (r == p - 1))
        flops = n * (24 * b * s * h * h + 4 * b * s * s * h) + (2 * b * s * h * vocab if r == p - 1 else 0)
        out.append({"psi": psi, "states": zero_memory_bytes(psi, 1, 0), "flops": flops,
                    "act": min(p - r, m) * n * no_parallel(s, b, h, a)})
    return out
# --8<-- [end:budget]


def balanced_split(weights, parts: int) -> list[int]:
    """Contiguous split of `weights` into `parts` groups minimising the largest group sum (exhaustive over the
    p − 1 cut points; small cases only). Returns the boundaries [0, …, len(weights)]."""
    from itertools import combinations

    w = np.concatenate([[0.0], np.cumsum(np.asarray(weights, dtype=float))])
    n = len(weights)
    best, cut = None, None
    for c in combinations(range(1, n), parts - 1):
        b = (0, *c, n)
        worst = max(w[b[i + 1]] - w[b[i]] for i in range(parts))
        if best is None or worst < best - 1e-9:
            best, cut = worst, list(b)
    return cut


def layers_from_split(bounds: list[int]) -> list[int]:
    """Transformer layers per stage when the embedding is item 0 and the head the last item of the split."""
    n = bounds[-1]
    return [sum(1 for k in range(bounds[i], bounds[i + 1]) if 0 < k < n - 1) for i in range(len(bounds) - 1)]


def budget_rows(layers_per_split: dict, p: int, m: int, **model) -> list[list]:
    rows = []
    for name, layers in layers_per_split.items():
        st = stage_budget(layers, p, m, **model)
        fl = np.array([x["flops"] for x in st])
        mem = np.array([x["states"] + x["act"] for x in st]) / 2**30
        rows.append([name, " / ".join(map(str, layers)), " / ".join(f"{x:.1f}" for x in mem),
                     f"{mem.argmax()}", f"{fl.max() / fl.mean():.3f}"])
    return rows


def tied_lines(plat) -> str:
    """One hardware's deepspeed_pipe file: parameters per stage against the formula, the tied gradient before and
    after ReduceTiedGrads against one process, the two copies after the step, and the clip norm."""
    ds = the_run(plat)
    if ds is None:
        return missing(plat)
    pr, mm = ds.params, ds.measurements
    d, V, L = pr["d"], pr["vocab"], pr["layers"]
    lines = []
    for r in mm["ranks"]:
        want = V * d + (L // 2) * (d * d + d)
        lines.append(f"- stage {r['stage_id']}: parameter {r['params']:,} 개 (V·d + (L/2)(d² + d) = {V}·{d} + {L // 2}·"
                     f"{d * d + d} = {want:,}: **{r['params'] == want}**); tied gradient 의 norm: ReduceTiedGrads 전 "
                     f"{r['tied_grad_before_norm']:.5f} (이 stage 의 사용분, 한 process 와 최대 차이 {r['tied_grad_before_err']:.1e}), "
                     f"후 {r['tied_grad_after_norm']:.5f} (두 사용의 합과 최대 차이 {r['tied_grad_after_err']:.1e})")
    lines.append(f"- step 뒤 두 stage 의 E 사본의 최대 차이: {mm['copies_max_diff']:.1e}; 한 process 의 SGD step 과의 최대 차이: "
                 f"{max(r['tied_weight_err'] for r in mm['ranks']):.1e}")
    clip, local = mm["ranks"][0]["clip_norms"][0][0], [r["clip_norms"][0][1] for r in mm["ranks"]]
    lines.append(f"- `clip_grad_norm_` 이 쓴 norm: {clip:.5f}; stage 별 자기 gradient norm {' / '.join(f'{x:.5f}' for x in local)}; "
                 f"한 process 의 전체 norm {mm['ref_norm_once']:.5f} (tied weight 한 번), {mm['ref_norm_twice']:.5f} (두 번). "
                 f"clip 의 norm = stage 0 의 norm: **{abs(clip - local[0]) <= 1e-5 * local[0]}**, "
                 f"한 process 의 전체 norm 보다 작음: **{clip < mm['ref_norm_once']}**")
    return "\n".join(lines)


# --8<-- [start:rebalance]
def memory_balanced_layers(total: int, p: int, m: int, **model) -> list[int]:
    """Layers per stage (each ≥ 1, summing to `total`) that minimise the largest stage's memory
    (model states + 1F1B activations); exhaustive over the compositions of `total` into p parts."""
    from itertools import combinations

    best, out = None, None
    for c in combinations(range(1, total), p - 1):
        layers = [b - a for a, b in zip((0, *c), (*c, total))]
        worst = max(x["states"] + x["act"] for x in stage_budget(layers, p, m, **model))
        if best is None or worst < best:
            best, out = worst, layers
    return out


def layer_capacity(cap: float, p: int, m: int, **model) -> list[int]:
    """Per stage, the most transformer layers that fit in `cap` bytes: (cap − the stage's fixed embedding / head
    states) // (one layer's states + its in-flight activations), both read off stage_budget, which is linear in
    the layer count. No split can place more than the sum of these."""
    zero = stage_budget([0] * p, p, m, **model)
    one = stage_budget([1] * p, p, m, **model)
    out = []
    for z, o in zip(zero, one):
        fixed = z["states"] + z["act"]
        out.append(int((cap - fixed) // (o["states"] + o["act"] - fixed)))
    return out
# --8<-- [end:rebalance]


def holdings_svg(p: int = 4, m: int = 8) -> str:
    """📖: who holds what under 1F1B at the simulator's fullest moment (Ch4-02's diagram, same code)."""
    from snippets.ch4_pipeline_parallel import d02_gpipe_microbatching as d02

    return d02.holdings_svg("1f1b", p, m)

"""Ch2-03 Gradient Bucket 과 Backward Overlap: the Reducer's buckets, measured and predicted.

Reads the committed results of gpu_runs/ddp_bench.py, one tab per hardware; the bucket rule and the α-β overlap model
come from snippets/common/ddp_buckets.py, the ring cost from snippets/common/alphabeta.py.
"""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.common import figures
from snippets.common.alphabeta import fit_alpha_beta, ring_allreduce_time
from snippets.common.ddp_buckets import (MIB, assign_buckets, bucket_pipeline, bucket_ready_times,
                                         ddp_limits)

PROGRAM = "ddp_bench"


def _unit(plat) -> str:
    return "GPUs" if plat.is_gpu else "processes"


def timing_runs(plat) -> list:
    """The runs of one hardware that carry the timing section (the program writes it only with timing on:
    on CPU only as many processes as cores, GUIDE)."""
    return [r for r in plat.runs if r.measurements.get("timing")]


def model_line(run) -> str:
    p = run.params
    return (f"모델: `head`, `embed`, `Linear({p['d']}, {p['d']})` {p['layers']} 개 (preset `{p['preset']}`); weight 하나 "
            f"{p['d'] * p['d'] * 4 / MIB:g} MiB")


def short(names: list[str]) -> str:
    """`blocks.3.weight, blocks.3.bias` → `blocks.3.{bias,weight}` style compaction for tables."""
    groups: dict[str, list[str]] = {}
    for k in names:
        mod, _, leaf = k.rpartition(".")
        groups.setdefault(mod, []).append(leaf[0])  # w / b
    return ", ".join(f"{m}.{''.join(v)}" for m, v in groups.items())


def grad_ready_order(m: dict) -> list[str]:
    """Parameter names in the order their gradients were ready (post-accumulate-grad hooks, overlap run)."""
    ready = m["overlap"]["param_ready"]
    return sorted(ready, key=ready.get)


# --8<-- [start:predict]
def predicted_layout(m: dict, label: str, iteration: int) -> list[dict]:
    """What the Reducer's rules predict for one configuration and iteration.

    Iteration 0 (and 1 with static_graph): one bucket, unless find_unused_parameters, in which case
    the construction-time buckets (model.parameters() order, size limits, then reversed) stay forever.
    Afterwards: buckets rebuilt in gradient-ready order with a 1 MiB first bucket only by default.
    """
    lay = next(x for x in m["layouts"] if x["label"] == label)
    cap = lay["bucket_cap_mb"]
    sizes = {p["name"]: p["bytes"] for p in m["model_params"]}
    order_params = [p["name"] for p in m["model_params"]]
    first = m["default_first_bucket_bytes"]
    if lay.get("find_unused_parameters"):
        limits = ddp_limits(cap, first)
        buckets = assign_buckets([sizes[k] for k in order_params], limits)[::-1]
        names = [[order_params[i] for i in b] for b in buckets]
    elif iteration < (2 if lay.get("static_graph") else 1):
        names = [order_params]
    else:
        order = grad_ready_order(m)
        buckets = assign_buckets([sizes[k] for k in order], ddp_limits(cap, first))
        names = [[order[i] for i in b] for b in buckets]
    return [{"index": i, "bytes": sum(sizes[k] for k in b), "params": sorted(b)} for i, b in enumerate(names)]
# --8<-- [end:predict]


def layout_matches(m: dict, label: str, iteration: int) -> bool:
    lay = next(x for x in m["layouts"] if x["label"] == label)
    got = [{"index": b["index"], "bytes": b["bytes"], "params": sorted(b["params"])} for b in lay["iterations"][iteration]]
    return got == predicted_layout(m, label, iteration)


def mib(nbytes: int) -> str:
    """MiB with two decimals; a bucket under 0.01 MiB (a lone bias) in KiB so it does not read as 0.00."""
    return f"{nbytes / MIB:.2f}" if nbytes >= 0.01 * MIB else f"({nbytes / 1024:g} KiB)"


def sweep_rows(m: dict) -> list[list]:
    """One row per bucket_cap_mb: buckets (MiB) in iterations 0, 1, 2 and whether the rule predicts them."""
    rows = []
    for lay in m["layouts"]:
        its = lay["iterations"]
        cells = [" + ".join(mib(b["bytes"]) for b in its[i]) for i in range(3)]
        ok = all(layout_matches(m, lay["label"], i) for i in range(len(its)))
        rows.append([f"`{lay['label']}`", *cells, "✅" if ok else "❌"])
    return rows


def bucket_detail_rows(m: dict, label: str, iteration: int) -> list[list]:
    lay = next(x for x in m["layouts"] if x["label"] == label)
    return [[b["index"], f"{b['bytes']:,}", f"{b['bytes'] / MIB:.3f}", short(b["params"])]
            for b in lay["iterations"][iteration]]


def bucket_count_bounds(total: int, cap: int, biggest: int) -> tuple[float, float]:
    """Theorem 2.3.4: total/(cap + biggest) < k ≤ ⌊total/cap⌋ + 1 for a single cap."""
    return total / (cap + biggest), total // cap + 1


# --------------------------------------------------------------------- overlap

def timeline(m: dict) -> dict:
    o = m["overlap"]
    ready = o["param_ready"]
    compute_end = max(ready.values())
    last_done = max(b["done"] for b in o["buckets"])
    durations = sorted(b["done"] - b["launch"] for b in o["buckets"])
    size = int(np.median([b["bytes"] for b in o["buckets"]]))
    ar = m.get("timing", {}).get("allreduce", [])
    standalone = float(np.interp(size, [r["bytes"] for r in ar], [r["median_s"] for r in ar])) if ar else float("nan")
    return {"compute_end": compute_end, "last_done": last_done, "backward_end": o["backward_end"],
            "in_backward_median": float(np.median(durations)), "standalone": standalone,
            "buckets": o["buckets"], "ready": ready,
            "launch_after_ready": [b["launch"] - max(ready[k] for k in b["params"]) for b in o["buckets"]],
            "launched_before_compute_end": sum(b["launch"] < compute_end for b in o["buckets"])}


def timeline_figure(m: dict, title: str):
    t = timeline(m)
    fig, ax = figures.new(8.0, 3.6)
    order = grad_ready_order(m)
    ys = {k: i for i, k in enumerate(order)}
    ax.scatter([t["ready"][k] * 1e3 for k in order], [ys[k] for k in order], s=14, color="tab:blue",
               label="gradient ready (post-accumulate-grad hook)", zorder=3)
    for b in t["buckets"]:
        y = np.mean([ys[k] for k in b["params"]])
        ax.plot([b["launch"] * 1e3, b["done"] * 1e3], [y, y], color="tab:orange", lw=5, alpha=0.6,
                solid_capstyle="butt", label="bucket all-reduce: launch → done" if b["index"] == 0 else None)
        ax.text(b["done"] * 1e3, y, f" b{b['index']}", va="center", fontsize=7)
    ax.axvline(t["compute_end"] * 1e3, color="tab:blue", ls="--", lw=1, label="last gradient ready")
    ax.axvline(t["backward_end"] * 1e3, color="k", ls=":", lw=1, label="loss.backward() returns")
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels(order, fontsize=6)
    ax.set_xlabel("ms since loss.backward() was called")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return figures.svg(fig)


def profile_rows(m: dict, gpu: bool = False) -> list[list]:
    """The profiler's top events per step. On a GPU (ddp_bench records device_total_us, the kernels' time,
    NCCL's included; 0 on CPU) sorted by that device time and shown beside the CPU time; on CPU by CPU time."""
    p = m["profile"]
    if not gpu:
        return [[f"`{r['name']}`", r["count"], f"{r['cpu_total_us'] / 1e3 / p['steps']:.2f}"] for r in p["top"][:8]]
    top = sorted(p["top"], key=lambda r: -r.get("device_total_us", 0.0))[:8]
    return [[f"`{r['name']}`", r["count"], f"{r.get('device_total_us', 0.0) / 1e3 / p['steps']:.2f}",
             f"{r['cpu_total_us'] / 1e3 / p['steps']:.2f}"] for r in top]


# --------------------------------------------------------------------- α-β prediction vs measurement

def fit(m: dict, n: int) -> dict:
    """α, β of the ring model fitted to this run's all_reduce medians (the Ch1-03 fit, on these sizes)."""
    rows = m["timing"]["allreduce"]
    s = np.array([r["bytes"] for r in rows], float)
    t = np.array([r["median_s"] for r in rows], float)
    alpha, beta, res = fit_alpha_beta(np.full_like(s, 2 * (n - 1)), 2 * (n - 1) / n * s, t)
    return {"alpha": alpha, "beta": beta, "rel_residuals": res, "sizes": s, "seconds": t}


# --8<-- [start:tradeoff]
def predict_step(m: dict, n: int, cap, alpha: float, beta: float) -> dict:
    """Step time predicted for one bucket_cap_mb from the no-communication profile of the same model.

    Buckets: the rebuilt layout (gradient-ready order, the Reducer's limits). Bucket i is ready when its
    last gradient is (local per-parameter ready times); all-reduces queue in bucket order with the ring
    cost; the step is forward + max(backward, last all-reduce done) + optimizer.
    """
    loc = m["timing"]["local"]
    ready, sizes = loc["param_ready_s"], loc["param_bytes"]
    order = sorted(ready, key=ready.get)
    buckets = assign_buckets([sizes[k] for k in order], ddp_limits(cap, m["default_first_bucket_bytes"]))
    b_sizes = [sum(sizes[order[i]] for i in b) for b in buckets]
    b_ready = bucket_ready_times([ready[k] for k in order], buckets)
    pipe = bucket_pipeline(b_ready, b_sizes, n, alpha, beta, loc["backward_s"])
    step = loc["forward_s"] + loc["backward_s"] + pipe["exposed"] + loc["optimizer_s"]
    return {"buckets": len(buckets), "layout": [[order[i] for i in b] for b in buckets], "comm_total": pipe["comm_total"], "launch_alpha": pipe["launch_alpha"],
            "exposed": pipe["exposed"], "step": step, "no_overlap": loc["forward_s"] + loc["backward_s"]
            + pipe["comm_total"] + loc["optimizer_s"]}
# --8<-- [end:tradeoff]


def tradeoff_rows(run) -> list[dict]:
    m, n = run.measurements, run.hardware["world_size"]
    f = fit(m, n)
    out = []
    for s in m["timing"]["sweep"]:
        p = predict_step(m, n, s["bucket_cap_mb"], f["alpha"], f["beta"])
        out.append({"cap": s["bucket_cap_mb"], **p, "measured": s["step_median_s"]})
    return out


def cap_label(cap) -> str:
    return "25 (기본값, 첫 bucket 1 MiB)" if cap is None else f"{cap:g}"


def tradeoff_figure(run):
    rows = tradeoff_rows(run)
    fig, ax = figures.new(7.0, 3.6)
    x = np.arange(len(rows))
    ax.plot(x, [r["measured"] * 1e3 for r in rows], "o-", label="측정 (median, max over ranks)")
    ax.plot(x, [r["step"] * 1e3 for r in rows], "s--", label="α-β 예측 (overlap)")
    ax.plot(x, [r["no_overlap"] * 1e3 for r in rows], "^:", label="α-β 예측 (overlap 없음)")
    ax.axhline(run.measurements["timing"]["local_step_median_s"] * 1e3, color="gray", lw=1,
               label="DDP 없는 한 process 의 step")
    ax.set_xticks(x)
    ax.set_xticklabels(["기본" if r["cap"] is None else f"{r['cap']:g}" for r in rows])
    ax.set_xlabel("bucket_cap_mb (MiB)")
    ax.set_ylabel("step time (ms)")
    h = run.hardware
    ax.set_title(f"{'GPU' if h['kind'] == 'gpu' else 'CPU'} 결과: {h['world_size']} "
                 f"{'GPUs' if h['kind'] == 'gpu' else 'processes'}, {h['backend']}", fontsize=9)
    ax.legend(fontsize=7)
    return figures.svg(fig)


def gap_summary(run) -> dict:
    rows = tradeoff_rows(run)
    meas = [r["measured"] for r in rows]
    pred = [r["step"] for r in rows]
    ratio = [a / b for a, b in zip(meas, pred)]
    loc = run.measurements["timing"]["local"]
    return {"ratio_min": min(ratio), "ratio_max": max(ratio), "measured_min": min(meas), "measured_max": max(meas),
            "measured_spread": max(meas) / min(meas) - 1, "pred_min": min(pred), "pred_max": max(pred),
            "pred_spread": max(pred) / min(pred) - 1,
            "pred_argmin": [r["cap"] for r in rows if r["step"] <= min(pred) * (1 + 1e-9)],
            "pred_argmax": [r["cap"] for r in rows if r["step"] >= max(pred) * (1 - 1e-9)],
            "meas_argmin": [r["cap"] for r in rows if r["measured"] == min(meas)],
            "meas_argmax": [r["cap"] for r in rows if r["measured"] == max(meas)],
            "argmin_buckets": sorted({r["buckets"] for r in rows if r["step"] <= min(pred) * (1 + 1e-9)}),
            "argmin_same_layout": len({str(r["layout"]) for r in rows if r["step"] <= min(pred) * (1 + 1e-9)}) == 1,
            "exposed_min": min(r["exposed"] for r in rows), "exposed_max": max(r["exposed"] for r in rows),
            "corr": float(np.corrcoef(meas, pred)[0, 1]),
            "t_b": loc["backward_s"], "last_ready": max(loc["param_ready_s"].values())}


# --------------------------------------------------------------------- one tab per hardware

def _same_layouts(a: dict, b: dict) -> bool:
    strip = lambda m: [[[(x["index"], x["bytes"], sorted(x["params"])) for x in it] for it in lay["iterations"]]  # noqa: E731
                       for lay in m["layouts"]]
    return strip(a) == strip(b)


# --8<-- [start:tabs]
def sweep_tab(plat) -> str:
    """Experiment 2 on one hardware: the measured buckets of every configuration against the rule."""
    out = []
    for r in plat.runs:
        rows = sweep_rows(r.measurements)
        ok = sum(row[-1] == "✅" for row in rows)
        out += [f"**N = {r.hardware['world_size']} {_unit(plat)}** — {model_line(r)}",
                results.markdown_table(["설정", "iteration 0 (MiB)", "iteration 1", "iteration 2", "규칙 = 측정"], rows),
                f"규칙 (정의 2.3.2) 이 모든 iteration 의 bytes 와 이름까지 맞힌 설정: {ok} / {len(rows)}"]
    return "\n\n".join(out)


def detail_tab(plat) -> str:
    """The gradient-ready order and two layouts side by side, for the smallest N of one hardware."""
    r = plat.runs[0]
    m = r.measurements
    out = [f"**N = {r.hardware['world_size']} {_unit(plat)}**; gradient 가 준비된 순서: "
           + " → ".join(f"`{k}`" for k in grad_ready_order(m))]
    for label in ("bucket_cap_mb=None", "find_unused_parameters=True"):
        out += [f"`{label}`, iteration 1 (w = weight, b = bias)",
                results.markdown_table(["bucket index", "bytes", "MiB", "parameters"], bucket_detail_rows(m, label, 1))]
    others = [o for o in plat.runs[1:]]
    if others:
        out.append("같은 하드웨어의 다른 N 에서도 모든 설정의 bucket 이 같음: " + ", ".join(
            f"N = {o.hardware['world_size']} **{_same_layouts(m, o.measurements)}**" for o in others))
    return "\n\n".join(out)


def all_layouts_tab(plat) -> str:
    m = plat.runs[0].measurements
    out = [f"N = {plat.runs[0].hardware['world_size']} {_unit(plat)}"]
    for lay in m["layouts"]:
        for it in range(len(lay["iterations"])):
            out += [f"`{lay['label']}`, iteration {it}",
                    results.markdown_table(["bucket index", "bytes", "MiB", "parameters"], bucket_detail_rows(m, lay["label"], it))]
    return "\n\n".join(out)


def timeline_tab(plat) -> str:
    """Experiment 3 on one hardware: the overlap step of the first timing run, figure and numbers."""
    runs = timing_runs(plat)
    if not runs:
        return f"이 하드웨어에는 시간을 잰 결과 (timing) 가 없습니다 (있는 N: {', '.join(map(str, sorted(plat.by_world)))})."
    r = runs[0]
    m = r.measurements
    t = timeline(m)
    cap = m["overlap"]["bucket_cap_mb"]
    title = (f"{'GPU' if plat.is_gpu else 'CPU'} 결과: {r.hardware['world_size']} {_unit(plat)}, {r.hardware['backend']}, "
             f"bucket_cap_mb={cap}, rank 0")
    lines = [f"bucket {len(t['buckets'])} 개 중 마지막 gradient 가 준비되기 *전에* 시작한 AllReduce: {t['launched_before_compute_end']} 개",
             f"bucket 의 마지막 gradient 준비 → AllReduce 시작: 최대 {max(t['launch_after_ready']) * 1e6:.0f} µs",
             f"마지막 gradient 준비 {t['compute_end'] * 1e3:.2f} ms, 마지막 AllReduce 완료 {t['last_done'] * 1e3:.2f} ms, "
             f"`backward()` 반환 {t['backward_end'] * 1e3:.2f} ms",
             f"backward 중 AllReduce 하나의 시작 → 완료 (median): {t['in_backward_median'] * 1e3:.3g} ms; 같은 크기를 혼자 "
             f"AllReduce 한 시간 (실험 4 의 측정): {t['standalone'] * 1e3:.3g} ms"]
    return "\n\n".join([timeline_figure(m, title), "\n".join(f"- {x}" for x in lines),
                         f"`torch.profiler` ({m['profile']['steps']} step, rank 0, "
                         + ("GPU (CUDA kernel) 시간이 큰 순서" if plat.is_gpu else "CPU 시간이 큰 순서")
                         + f", step 당 ms; 시각은 {m['overlap'].get('clock', 'time.perf_counter')}):",
                         results.markdown_table(["event", "횟수", "GPU ms / step", "CPU ms / step"] if plat.is_gpu
                                                else ["event", "횟수", "CPU ms / step"], profile_rows(m, plat.is_gpu))])


def tradeoff_tab(plat) -> str:
    """Experiment 4 on one hardware: this hardware's own α-β fit, prediction against measurement."""
    runs = timing_runs(plat)
    if not runs:
        return f"이 하드웨어에는 시간을 잰 결과 (timing) 가 없습니다 (있는 N: {', '.join(map(str, sorted(plat.by_world)))})."
    out = []
    for r in runs:
        m, n = r.measurements, r.hardware["world_size"]
        f = fit(m, n)
        g = gap_summary(r)
        rows = tradeoff_rows(r)
        out += [f"**N = {n} {_unit(plat)}, {r.hardware['backend']}** — fit: α = {f['alpha'] * 1e6:.3g} µs, 1/β = "
                f"{1 / f['beta'] / 1e9:.3g} GB/s (크기 {len(f['sizes'])} 개, 상대 오차 최대 {max(abs(f['rel_residuals'])):.0%}); "
                f"통신 없는 step {m['timing']['local_step_median_s'] * 1e3:.3g} ms",
                results.markdown_table(["bucket_cap_mb", "bucket 수 n_b", "2(N−1)n_b·α (ms)", "Σ T_i (ms)",
                                        "예측 exposed tail (ms)", "예측 step (ms)", "측정 step (ms)", "측정 / 예측"],
                                       [[cap_label(x["cap"]), x["buckets"], f"{x['launch_alpha'] * 1e3:.3g}",
                                         f"{x['comm_total'] * 1e3:.3g}", f"{x['exposed'] * 1e3:.3g}", f"{x['step'] * 1e3:.3g}",
                                         f"{x['measured'] * 1e3:.3g}", f"{x['measured'] / x['step']:.2f}"] for x in rows]),
                tradeoff_figure(r),
                f"측정 / 예측: {g['ratio_min']:.2f} … {g['ratio_max']:.2f}; 측정 step 의 상한별 범위 {g['measured_min'] * 1e3:.3g} … "
                f"{g['measured_max'] * 1e3:.3g} ms (폭 {g['measured_spread']:.0%}), 예측의 범위 {g['pred_min'] * 1e3:.3g} … "
                f"{g['pred_max'] * 1e3:.3g} ms (폭 {g['pred_spread']:.0%}). 예측 step 이 가장 작은 상한: "
                f"{', '.join(cap_label(c) for c in g['pred_argmin'])}; $T_b$ = {g['t_b'] * 1e3:.3g} ms, 마지막 준비 시각 "
                f"$\\max_i T^\\text{{ready}}_i$ = {g['last_ready'] * 1e3:.3g} ms",
                f"예측 exposed tail 의 범위 {g['exposed_min'] * 1e3:.3g} … {g['exposed_max'] * 1e3:.3g} ms; 예측이 가장 작은 상한들의 "
                f"bucket 수 {', '.join(map(str, g['argmin_buckets']))}, bucket 배치가 모두 같음: **{g['argmin_same_layout']}**",
                f"순위: 측정이 가장 빠른 상한 {', '.join(cap_label(c) for c in g['meas_argmin'])} (bucket "
                f"{', '.join(str(r['buckets']) for r in rows if r['cap'] in g['meas_argmin'])} 개), 가장 느린 상한 "
                f"{', '.join(cap_label(c) for c in g['meas_argmax'])}; 예측이 가장 느린 상한 "
                f"{', '.join(cap_label(c) for c in g['pred_argmax'])}; 측정과 예측 step 의 상관계수 {g['corr']:+.2f}"]
    return "\n\n".join(out)
# --8<-- [end:tabs]


# --------------------------------------------------------------------- experiment 5: one device's backward timeline

ANATOMY = "step_anatomy"
ANATOMY_N = 8  # the ring the window is read for: one 8-GPU node


# --8<-- [start:anatomy]
def hiding_busbw(ready, sizes, t_backward: float, n: int) -> list[float]:
    """For each bucket j (all-reduce order): the busbw 1/β with which the ring all-reduces of buckets j..n_b,
    queued from bucket j's ready time, end by t_backward (α = 0). Theorem 2.3.5: the queue ends by t_backward
    iff every j has T^ready_j + Σ_{i≥j} T_i ≤ t_backward, T_i = 2(N−1)/N·S_i·β; the largest of these is the
    busbw that hides all communication in the backward."""
    b = 2 * (n - 1) / n
    return [b * sum(sizes[j:]) / (t_backward - ready[j]) if t_backward > ready[j] else float("inf")
            for j in range(len(sizes))]


def anatomy_buckets(run, n: int = ANATOMY_N, cap=None) -> dict:
    """DDP's rebuilt buckets over one device's measured backward (gradient-ready order, the Reducer's limits),
    each bucket's ready time, the time left until backward ends, and the busbw that hides it."""
    t = run.measurements["timeline"]
    rows = t["params"]                                      # the order the gradients became ready
    ready = [r["ready_ms_median"] / 1e3 for r in rows]
    sizes = [r["bytes"] for r in rows]
    buckets = assign_buckets(sizes, ddp_limits(cap, int(dist_first_bucket_bytes())))
    b_ready = bucket_ready_times(ready, buckets)
    b_sizes = [sum(sizes[i] for i in b) for b in buckets]
    t_b = t["backward_ms_median"] / 1e3
    return {"buckets": buckets, "ready": b_ready, "sizes": b_sizes, "t_backward": t_b,
            "slack": [t_b - r for r in b_ready], "busbw": hiding_busbw(b_ready, b_sizes, t_b, n),
            "names": [[rows[i]["name"] for i in b] for b in buckets]}
# --8<-- [end:anatomy]


def dist_first_bucket_bytes() -> int:
    import torch.distributed as dist

    return dist._DEFAULT_FIRST_BUCKET_BYTES


def anatomy_figure(run, title: str) -> str:
    t = run.measurements["timeline"]
    rows = t["params"]
    fig, ax = figures.new(7.0, 2.8)
    y = np.arange(len(rows))
    ax.errorbar([r["ready_ms_median"] for r in rows], y,
                xerr=[[r["ready_ms_median"] - r["ready_ms_min"] for r in rows],
                      [r["ready_ms_max"] - r["ready_ms_median"] for r in rows]],
                fmt="o", ms=3, lw=0.8, color="tab:blue", label="gradient ready (median, min–max)")
    ax.axvspan(t["first_ready_ms_median"], t["backward_ms_median"], color="tab:orange", alpha=0.15,
               label="창: 첫 gradient → backward 끝")
    ax.axvline(t["backward_ms_median"], color="k", ls=":", lw=1, label="loss.backward() 반환")
    ax.set_yticks(y[::max(1, len(rows) // 8)])
    ax.set_yticklabels([rows[i]["name"] for i in y[::max(1, len(rows) // 8)]], fontsize=6)
    ax.set_xlabel("ms since loss.backward() was called")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return figures.svg(fig)


def anatomy_tab(plat) -> str:
    """Experiment 5 on one hardware: one device's backward, when each gradient became ready, the window DDP
    can overlap into, and what DDP's default buckets would need from the link to hide in it."""
    run = plat.by_world.get(1)
    if run is None:
        return f"이 하드웨어에는 한 장치의 timeline (world size 1) 이 없습니다 (있는 N: {', '.join(map(str, sorted(plat.by_world)))})."
    p, t = run.params, run.measurements["timeline"]
    ready = [r["ready_ms_median"] for r in t["params"]]
    a = anatomy_buckets(run)
    head = (f"preset `{p['preset']}`: 블록 {p['layers']} 개, h = {p['h']}, token {p['tokens']}, {p['dtype']}, "
            f"파라미터 {p['parameters']:,} 개 ({sum(r['bytes'] for r in t['params']) / MIB:.1f} MiB 의 gradient); "
            f"optimizer 는 Adam ({p['default_impl']}); step {p['steps']} 개의 median")
    lines = [f"step {t['step_ms_median']:.3g} ms = forward {t['forward_ms_median']:.3g} + backward "
             f"{t['backward_ms_median']:.3g} + optimizer {t['optimizer_ms_median']:.3g} ms",
             f"gradient 준비 순서가 `parameters()` 의 역순: **{t['ready_order_is_reverse_of_parameters']}**; hook 이 step 마다 "
             f"{'/'.join(map(str, sorted(set(t['hook_calls_per_step']))))} 번 불림 (parameter {len(t['params'])} 개)",
             f"첫 gradient {t['first_ready_ms_median']:.3g} ms, 마지막 gradient {t['last_ready_ms_median']:.3g} ms "
             f"(parameter 별 median 으로는 {min(ready):.3g} … {max(ready):.3g} ms, 도착 구간 {max(ready) - min(ready):.3g} ms)",
             f"**창 (첫 gradient → backward 끝): {t['overlap_window_ms_median']:.3g} ms** = backward 의 "
             f"{t['overlap_window_ms_median'] / t['backward_ms_median']:.0%}; 꼬리 (마지막 gradient → backward 끝): "
             f"{t['tail_ms_median']:.3g} ms (창의 {t['tail_ms_median'] / t['overlap_window_ms_median']:.2%})"]
    worst = int(np.argmax(a["busbw"]))
    table = results.markdown_table(
        ["bucket", "parameter", "MiB", "준비 (ms)", "backward 끝까지 (ms)", f"숨기려면 필요한 busbw, N = {ANATOMY_N} (GB/s)"],
        [[j, len(a["names"][j]), f"{a['sizes'][j] / MIB:.1f}", f"{a['ready'][j] * 1e3:.3g}", f"{a['slack'][j] * 1e3:.3g}",
          f"{a['busbw'][j] / 1e9:,.3g}"] for j in range(len(a["sizes"]))])
    last = worst == len(a["sizes"]) - 1
    why = (f"마지막 bucket 입니다: {a['sizes'][worst] / MIB:.1f} MiB 를 꼬리 {a['slack'][worst] * 1e3:.3g} ms 안에 보내야 합니다 "
           f"(정리 2.3.5 의 $T^\\text{{ready}}_{{n_b}} + T_{{n_b}}$)" if last else
           f"bucket {worst} 가 준비된 뒤 남은 bytes ({sum(a['sizes'][worst:]) / MIB:.1f} MiB) 를 {a['slack'][worst] * 1e3:.3g} ms "
           f"안에 보내야 하는 것입니다 (정리 2.3.5 의 $j = {worst}$ 항)")
    verdict = (f"모든 AllReduce 를 backward 안에 숨기려면 ($\\alpha = 0$) busbw 가 적어도 **{a['busbw'][worst] / 1e9:,.3g} GB/s** "
               f"여야 하고, 그 요구를 정하는 것은 {why}.")
    title = (f"{'GPU' if plat.is_gpu else 'CPU'} 결과: 한 장치 ({run.hardware.get('gpu_name') or run.hardware['cpu_model']}), "
             f"{p['dtype']}")
    return "\n\n".join([head, anatomy_figure(run, title), "\n".join(f"- {x}" for x in lines),
                        f"DDP 의 재구성된 bucket (기본 상한: 첫 bucket 1 MiB, 그 뒤 25 MiB) 을 이 준비 순서에 적용하면:",
                        table, verdict])

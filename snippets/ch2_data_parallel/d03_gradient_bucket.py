"""Ch2-03 Gradient Bucket 과 Backward Overlap: the Reducer's buckets, measured and predicted.

Reads the committed results of gpu_runs/ddp_bench.py; the bucket rule and the α-β overlap model
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


def runs():
    """The committed CPU results of gpu_runs/ddp_bench.py, by world size."""
    return {r.hardware["world_size"]: r for r in results.load(PROGRAM, kind="cpu")}


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


def profile_rows(m: dict) -> list[list]:
    p = m["profile"]
    return [[f"`{r['name']}`", r["count"], f"{r['cpu_total_us'] / 1e3 / p['steps']:.2f}"] for r in p["top"][:8]]


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
    return {"buckets": len(buckets), "comm_total": pipe["comm_total"], "launch_alpha": pipe["launch_alpha"],
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
    ax.set_title(f"CPU 결과: {run.hardware['world_size']} processes, gloo", fontsize=9)
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
            "t_b": loc["backward_s"], "last_ready": max(loc["param_ready_s"].values())}

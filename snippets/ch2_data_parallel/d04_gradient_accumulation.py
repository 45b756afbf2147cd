"""Ch2-04 Gradient Accumulation 과 no_sync: the code the page runs and the tests import.

Facts about DDP used here, read from torch/nn/parallel/distributed.py (torch 2.13):
  * `no_sync()` only sets `require_backward_grad_sync = False` for the duration of the context;
  * `_pre_forward` calls `reducer.prepare_for_forward()` and `_post_forward` calls
    `reducer.prepare_for_backward(...)` only when grad is enabled and `require_backward_grad_sync`
    is true; otherwise the Reducer is not armed and gradients simply accumulate in `param.grad`;
  * `_post_forward` sets `require_forward_param_sync` to that same flag, and the NEXT forward
    broadcasts module buffers from rank 0 only if it is true (`will_sync_module_buffers`,
    `_sync_buffers`, authoritative rank 0).
Communication costs come from snippets.common.alphabeta (Ch1-03's ring), never re-derived here.
"""
from __future__ import annotations

import contextlib
import statistics

import numpy as np

from snippets import results
from snippets.common import alphabeta as ab

PROGRAM = "ddp_accumulation"


def _unit(plat) -> str:
    return "GPUs" if plat.is_gpu else "processes"


def timing_runs(plat) -> list:
    """The runs of one hardware with a timing section (the program writes it only with timing on: on CPU
    only as many processes as cores, GUIDE)."""
    return [r for r in plat.runs if r.measurements.get("timing")]


# --8<-- [start:counts]
def predicted_calls(m: int, buckets: int, no_sync: bool) -> list[int]:
    """All-reduce launches per micro-batch in one accumulation cycle of m micro-batches.

    With no_sync on the first m−1 micro-batches the Reducer is armed only for the last one, which
    all-reduces every bucket once; without it every backward all-reduces every bucket."""
    return [0] * (m - 1) + [buckets] if no_sync else [buckets] * m


def predicted_schedule(m: int, steps: int, k_initial: int, k_rebuilt: int, no_sync: bool) -> list[list[int]]:
    """Same, over several steps: the Reducer uses its initial bucket layout until one synchronised
    backward has run, and the rebuilt layout from the next forward on (Ch2-03)."""
    out, synced = [], False
    for _ in range(steps):
        row = []
        for c in predicted_calls(m, 1, no_sync):
            row.append(c * (k_rebuilt if synced else k_initial))
            synced = synced or c > 0
        out.append(row)
    return out


def ring_bytes_per_rank(n: int, s: float) -> float:
    """Bytes one rank sends in a ring all-reduce of S bytes: Ch1-03's cost with α = 0, β = 1."""
    return float(ab.ring_allreduce_time(n, s, 0.0, 1.0))


def traffic_per_step(n: int, grad_bytes: float, m: int, no_sync: bool) -> float:
    """Bytes a rank sends per optimizer step: one ring all-reduce of the gradients, or m of them."""
    return (1 if no_sync else m) * ring_bytes_per_rank(n, grad_bytes)
# --8<-- [end:counts]


# --8<-- [start:pattern]
def accumulation_step(ddp, optimizer, loss_fn, micro_batches) -> None:
    """One optimizer step over M micro-batches: no_sync on the first M−1, loss divided by M."""
    m = len(micro_batches)
    for k, (x, y) in enumerate(micro_batches):
        ctx = ddp.no_sync() if k < m - 1 else contextlib.nullcontext()
        with ctx:                                    # the forward too (Definition 2.4.2)
            (loss_fn(ddp(x), y) / m).backward()
    optimizer.step()
    optimizer.zero_grad()
# --8<-- [end:pattern]


def measured_calls(run, mode: str, step: int) -> list[int]:
    return [mb["allreduce_calls"] for mb in run.measurements["counts"][mode][step]]


def steady_buckets(run) -> list[int]:
    """Bucket sizes (bytes) after the Reducer's rebuild: the last micro-batch of the last step."""
    return run.measurements["counts"]["no_sync"][-1][-1]["bucket_bytes"]


def count_rows(run) -> tuple[list[list], int, int]:
    p, m = run.params, run.measurements
    k0 = len(m["counts"]["no_sync"][0][-1]["bucket_bytes"])  # iteration 0: the initial layout
    k = len(steady_buckets(run))
    rows = []
    for mode in ("no_sync", "sync_every"):
        pred = predicted_schedule(p["M"], len(m["counts"][mode]), k0, k, mode == "no_sync")
        for step, mbs in enumerate(m["counts"][mode]):
            rows.append([mode, step, " / ".join(str(x["allreduce_calls"]) for x in mbs),
                         " / ".join(map(str, pred[step])),
                         f"{sum(x['bytes'] for x in mbs):,}",
                         f"{(1 if mode == 'no_sync' else p['M']) * m['param_bytes']:,}"])
    return rows, k0, k


def equality_rows(run) -> list[list]:
    return [[e["norm"], e["mode"], "1/M" if e["loss_divided_by_M"] else "없음",
             f"{e['max_rel_diff_vs_global']:.2e}", f"{e['norm_ratio']:.4f}", e["ranks_bitwise_equal"]]
            for e in run.measurements["equality"]]


# --8<-- [start:memory]
def saved_activation_bytes(model, x, y) -> int:
    """Bytes autograd keeps for backward (distinct storages that are not parameters), one micro-batch."""
    import torch
    import torch.nn.functional as F

    params = {q.untyped_storage().data_ptr() for q in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(x), y)
    del loss
    return sum(seen.values())
# --8<-- [end:memory]


def mlp(d_in: int = 64, hidden: int = 256, classes: int = 10, seed: int = 0):
    """The program's model (norm 'none'): Linear-ReLU-Linear-ReLU-Linear."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def activation_per_sample_formula(d_in: int = 64, hidden: int = 256, classes: int = 10) -> int:
    """fp32 input of the first Linear, the two ReLU outputs (each also the next Linear's input), the
    log-softmax of the loss, and the int64 label: 4(d_in + 2h + C) + 8 bytes per sample."""
    return 4 * (d_in + 2 * hidden + classes) + 8


def memory_rows(per_rank: int = 32, ms=(1, 2, 4, 8), d_in: int = 64, hidden: int = 256, classes: int = 10):
    """For a fixed per-rank batch, activations of one micro-batch vs the gradient buffer."""
    import torch

    model = mlp(d_in, hidden, classes)
    grad_bytes = sum(q.numel() * q.element_size() for q in model.parameters())
    g = torch.Generator().manual_seed(0)
    rows = []
    for m in ms:
        b = per_rank // m
        x = torch.randn(b, d_in, generator=g)
        y = torch.randint(0, classes, (b,), generator=g)
        rows.append({"M": m, "b": b, "activation_bytes": saved_activation_bytes(model, x, y),
                     "formula_bytes": b * activation_per_sample_formula(d_in, hidden, classes),
                     "grad_bytes": grad_bytes})
    return rows


# --8<-- [start:time]
def fit_link(run) -> tuple[float, float]:
    """α, β of this run's gloo ring, fitted to its median all_reduce times (Ch1-03's fit)."""
    n = run.hardware["world_size"]
    pts = run.measurements["timing"]["allreduce"]
    s = np.array([p["bytes"] for p in pts], float)
    t = np.array([p["median_s"] for p in pts], float)
    alpha, beta, _ = ab.fit_alpha_beta(np.full_like(s, 2 * (n - 1)), 2 * (n - 1) / n * s, t)
    return max(alpha, 0.0), max(beta, 0.0)


def predicted_extra_seconds(n: int, bucket_bytes: list[int], m: int, alpha: float, beta: float) -> float:
    """What syncing every micro-batch adds per step: (m−1) more ring all-reduces of every bucket."""
    return (m - 1) * float(sum(ab.ring_allreduce_time(n, s, alpha, beta) for s in bucket_bytes))
# --8<-- [end:time]


def time_rows(run) -> list[list]:
    n = run.hardware["world_size"]
    alpha, beta = fit_link(run)
    steps = {(r["M"], r["mode"]): r["median_step_s"] for r in run.measurements["timing"]["steps"]}
    rows = []
    for m in sorted({k[0] for k in steps}):
        ns, se = steps[(m, "no_sync")], steps[(m, "sync_every")]
        rows.append({"M": m, "no_sync_ms": 1e3 * ns, "sync_every_ms": 1e3 * se, "measured_extra_ms": 1e3 * (se - ns),
                     "predicted_extra_ms": 1e3 * predicted_extra_seconds(n, steady_buckets(run), m, alpha, beta)})
    return rows, alpha, beta


def time_figure(run):
    from snippets.common import figures

    rows, _, _ = time_rows(run)
    fig, ax = figures.new(6.5, 3.6)
    ms = [r["M"] for r in rows]
    ax.plot(ms, [r["no_sync_ms"] for r in rows], "o-", label="no_sync (측정)")
    ax.plot(ms, [r["sync_every_ms"] for r in rows], "s-", label="매 micro-batch all-reduce (측정)")
    ax.plot(ms, [r["no_sync_ms"] + r["predicted_extra_ms"] for r in rows], "k--",
            label="no_sync + α-β 예측 추가분")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batch 수 M")
    ax.set_ylabel(f"step 시간 중앙값 (ms, {'GPU' if run.hardware['kind'] == 'gpu' else 'CPU'})")
    ax.legend(fontsize=8)
    return figures.svg(fig)


def bn_summary(run) -> dict:
    bn = run.measurements["bn"]
    return {"broadcasts": [[mb["buffer_broadcasts"] for mb in cyc] for cyc in bn["per_cycle"]],
            **{k: v for k, v in bn.items() if k != "per_cycle"}}


def median_of(values) -> float:
    return statistics.median(values)


# --------------------------------------------------------------------- one tab per hardware

# --8<-- [start:tabs]
def counts_tab(plat) -> str:
    """Experiment 1 on one hardware: all-reduce launches per micro-batch against Theorem 2.4.4."""
    out = []
    for r in plat.runs:
        rows, k0, k = count_rows(r)
        ok = sum(row[2] == row[3] for row in rows)
        out += [f"**N = {r.hardware['world_size']} {_unit(plat)}**, M = {r.params['M']}, 초기 bucket $n_{{b,0}}$ = {k0}, "
                f"재구성 뒤 $n_b$ = {k} (bytes: {steady_buckets(r)})",
                results.markdown_table(["모드", "step", "측정: micro-batch 별 all-reduce", "예측", "step 의 all-reduce bytes (측정)",
                                        "예측 (S 또는 M·S)"], rows),
                f"측정 = 예측인 (모드, step): {ok} / {len(rows)}"]
    return "\n\n".join(out)


def equality_tab(plat) -> str:
    """Experiment 2 on one hardware: the accumulated gradient against the global batch's."""
    out = []
    for r in plat.runs:
        m = r.measurements
        out += [f"**N = {r.hardware['world_size']} {_unit(plat)}**, M = {r.params['M']}",
                results.markdown_table(["정규화 층", "모드", "loss scale", "상대 차이 (global batch 대비)", "norm 비",
                                        "rank 사이 bitwise 같음"], equality_rows(r)),
                f"`no_sync` 대 매 micro-batch all-reduce: 상대 차이 {m['no_sync_vs_sync_every_max_rel']:.2e}, "
                f"bitwise 같음 = {m['no_sync_vs_sync_every_bitwise']}"]
    return "\n\n".join(out)


def time_tab(plat) -> str:
    """Experiment 4 on one hardware: step times of both modes against ΔT predicted from this hardware's
    own all_reduce fit."""
    runs = timing_runs(plat)
    if not runs:
        return f"이 하드웨어에는 시간을 잰 결과 (timing) 가 없습니다 (있는 N: {', '.join(map(str, sorted(plat.by_world)))})."
    out = []
    for r in runs:
        rows, alpha, beta = time_rows(r)
        n = r.hardware["world_size"]
        big = rows[-1]
        sign = "느립니다" if big["measured_extra_ms"] > 0 else "느리지 않습니다"
        out += [f"**N = {n} {_unit(plat)}, {r.hardware['backend']}** — fit: α = {alpha * 1e6:.3g} µs, 1/β = "
                f"{1 / beta / 1e9 if beta else float('inf'):.3g} GB/s (all_reduce {r.measurements['timing']['reps']} 회의 중앙값)",
                results.markdown_table(["M", "no_sync (ms)", "매번 all-reduce (ms)", "측정 차이 (ms)", "예측 ΔT (ms)"],
                                       [[x["M"], f"{x['no_sync_ms']:.3g}", f"{x['sync_every_ms']:.3g}",
                                         f"{x['measured_extra_ms']:.3g}", f"{x['predicted_extra_ms']:.3g}"] for x in rows]),
                f"$M = 1$ 의 두 열의 차이 (측정 잡음의 크기): {rows[0]['measured_extra_ms']:.3g} ms; 가장 큰 $M = {big['M']}$ 에서 "
                f"매번 all-reduce 하는 쪽이 `no_sync` 보다 {sign} (차이 {big['measured_extra_ms']:.3g} ms, 예측 "
                f"{big['predicted_extra_ms']:.3g} ms).",
                time_figure(r)]
    return "\n\n".join(out)


def bn_tab(plat) -> str:
    """Experiment 5 on one hardware: buffer broadcasts per micro-batch and what they overwrite."""
    out = []
    for r in plat.runs:
        s = bn_summary(r)
        bn_eq = [e for e in r.measurements["equality"] if e["norm"] == "batchnorm" and e["loss_divided_by_M"]][0]
        out.append(f"- **N = {r.hardware['world_size']} {_unit(plat)}**: cycle 별 micro-batch 당 broadcast = {s['broadcasts']}; "
                   f"cycle 끝 rank 간 running_mean 최대 차이 = {s['rank_spread_end_of_cycle']:.3g}, 다음 forward 의 broadcast "
                   f"직후 = {s['rank_spread_after_broadcast']:.3g}; rank 0 의 running_mean 대 global batch 로 갱신한 running_mean = "
                   f"{s['rank0_vs_global_batch_running_mean']:.3g} (값의 크기 {s['running_mean_scale']:.3g}); gradient 의 상대 차이 "
                   f"(scale 1/M) = {bn_eq['max_rel_diff_vs_global']:.3g}")
    return "\n".join(out)
# --8<-- [end:tabs]


def extrapolation_tab(plat, m: int = 8, ns=(2, 8, 64, 1024)) -> str:
    """Exercise 2 on one hardware: its experiment-4 α, β and buckets, with N changed."""
    runs = timing_runs(plat)
    if not runs:
        return f"이 하드웨어에는 시간을 잰 결과 (timing) 가 없습니다 (있는 N: {', '.join(map(str, sorted(plat.by_world)))})."
    r = runs[0]
    alpha, beta = fit_link(r)
    buckets = steady_buckets(r)
    lines = [f"N = {r.hardware['world_size']} {_unit(plat)} 의 fit (α = {alpha * 1e6:.3g} µs) 과 bucket {len(buckets)} 개로:"]
    for n in ns:
        a_term = (m - 1) * len(buckets) * 2 * (n - 1) * alpha
        total = predicted_extra_seconds(n, buckets, m, alpha, beta)
        lines.append(f"- N={n}: ΔT = {total * 1e3:.3g} ms, 그중 α 항 {a_term * 1e3:.3g} ms ({a_term / total:.0%})")
    return "\n".join(lines)

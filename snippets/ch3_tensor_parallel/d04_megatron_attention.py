"""Ch3-04 Megatron attention: heads split across ranks, one all-reduce per pass, and the q/k/v lesson.

NumPy causal multi-head attention with a hand-written backward (checked against torch.autograd in
the test), the head partition on simulated ranks, the fused-QKV layout, and DTensor's counts from
gpu_runs/tp_bench.py. Notation: t, b, s, h, a (docs/notation.md); d = h/a the head dimension.
"""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch3_tensor_parallel import case_tolerance, case_within, tolerance_rule
from snippets.ch3_tensor_parallel.d02_column_row_split import shapes


# --8<-- [start:attention]
def heads_forward(X, Wq, Wk, Wv, heads, d):
    """Causal attention for the given heads only. Returns the heads' context (n × |heads|·d) and a cache."""
    n = X.shape[0]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    outs, cache = [], []
    for j in heads:
        cols = slice(j * d, (j + 1) * d)
        q, k, v = X @ Wq[:, cols], X @ Wk[:, cols], X @ Wv[:, cols]
        z = q @ k.T / np.sqrt(d) + mask
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        outs.append(p @ v)
        cache.append((cols, q, k, v, p))
    return np.concatenate(outs, axis=1), cache


def heads_backward(X, Wq, Wk, Wv, dC, cache, d):
    """Backward of heads_forward: the heads' contribution to X̄ and their weight gradients."""
    dX = np.zeros_like(X)
    grads = {}
    for i, (cols, q, k, v, p) in enumerate(cache):
        dO = dC[:, i * d:(i + 1) * d]
        dv, dp = p.T @ dO, dO @ v.T
        dz = p * (dp - (dp * p).sum(axis=1, keepdims=True)) / np.sqrt(d)
        dq, dk = dz @ k, dz.T @ q
        dX += dq @ Wq[:, cols].T + dk @ Wk[:, cols].T + dv @ Wv[:, cols].T
        grads[cols.start] = (X.T @ dq, X.T @ dk, X.T @ dv)
    return dX, grads


def megatron_attention(X, Wq, Wk, Wv, Wo, dY, a, t):
    """Rank r owns heads H_r (a/t of them): q/k/v columns of H_r (column-parallel), the same rows of
    W_O (row-parallel). Forward: Y = Σ_r C_r W_O[H_r] (g: one all-reduce). Backward: X̄ = Σ_r X̄_r (f: one
    all-reduce when q, k, v share one f). Returns Y, X̄ and the per-rank partial X̄_r."""
    d = X.shape[1] // a
    Ys, dXs = [], []
    for H in np.array_split(np.arange(a), t):
        C, cache = heads_forward(X, Wq, Wk, Wv, H, d)
        rows = np.concatenate([np.arange(j * d, (j + 1) * d) for j in H])
        Ys.append(C @ Wo[rows])                       # partial sum of the row-parallel output
        dX_r, _ = heads_backward(X, Wq, Wk, Wv, dY @ Wo[rows].T, cache, d)
        dXs.append(dX_r)                              # this rank's partial X̄ (f sums them)
    return sum(Ys), sum(dXs), dXs
# --8<-- [end:attention]


def attention_check(n=8, h=24, a=6, t=3, seed=0) -> dict:
    """Megatron's head split vs one device (all heads on one 'rank'), float64."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, h))
    Wq, Wk, Wv, Wo = (rng.standard_normal((h, h)) / np.sqrt(h) for _ in range(4))
    dY = rng.standard_normal((n, h))
    Y1, dX1, _ = megatron_attention(X, Wq, Wk, Wv, Wo, dY, a, 1)
    Yt, dXt, parts = megatron_attention(X, Wq, Wk, Wv, Wo, dY, a, t)
    return {"t": t, "a": a, "y_err": float(np.abs(Yt - Y1).max()), "dx_err": float(np.abs(dXt - dX1).max()),
            "partial_is_not_total": float(min(np.abs(p - dX1).max() for p in parts)),
            "data": (X, Wq, Wk, Wv, Wo, dY, Y1, dX1)}


# --8<-- [start:heads]
def head_split(h: int, a: int, t: int) -> dict:
    """A contiguous split of h = a·d columns into t equal parts (DTensor's Shard(0) of q.weight):
    does every rank get whole heads? Megatron requires t | a (megatron.core.utils.divide)."""
    d = h // a
    bounds = [r * h // t for r in range(t + 1)]
    whole = all(bnd % d == 0 for bnd in bounds) and h % t == 0
    return {"h": h, "a": a, "t": t, "d": d, "local_columns": h / t, "heads_per_rank": a / t,
            "whole_heads": whole, "t_divides_a": a % t == 0}


def fused_qkv_columns(a: int, d: int, t: int, layout: str) -> list[set]:
    """Which of (q, k, v) × head each rank's contiguous slice of a fused 3h-wide projection holds.

    layout "qkv": rows [Q | K | V] (all heads of q, then k, then v);
    layout "per_head": Megatron's [q_0 k_0 v_0 | q_1 k_1 v_1 | …] (heads grouped).
    """
    if layout == "qkv":
        labels = [(m, j) for m in "qkv" for j in range(a) for _ in range(d)]
    else:
        labels = [(m, j) for j in range(a) for m in "qkv" for _ in range(d)]
    n = len(labels)
    return [set(labels[r * n // t:(r + 1) * n // t]) for r in range(t)]
# --8<-- [end:heads]


def rank_can_attend(owned: set) -> bool:
    """A rank can run a head's attention locally iff it holds that head's q, k and v columns together."""
    heads = {j for _, j in owned}
    return all({(m, j) for m in "qkv"} <= owned for j in heads)


# --------------------------------------------------------------------------- measured (tp_bench)

def tp_runs():
    """Every tp_bench results file, on every hardware (CPU first)."""
    return results.experiment("tp_bench")


def measured(run, name: str) -> dict:
    c = next(c for c in run.measurements["cases"] if c["case"] == name)
    b, s, h = c["shapes"]["input"]
    return {"t": c["t"], "case": name, "b": b, "s": s, "h": h, "a": run.params["a"],
            "forward": [tuple(x) for x in c["forward_calls"]], "backward": [tuple(x) for x in c["backward_calls"]],
            "diff": c["max_abs_diff"], "same": c["same_on_every_rank"], "bitwise": c["bitwise_equal_output"],
            "tol": case_tolerance(c), "within": case_within(c), "rule": tolerance_rule(c)}


def measured_rows(runs=None, names=("attn_separate", "attn_prepared", "attn_fused", "block")) -> list[dict]:
    return [measured(r, n) for r in (runs or tp_runs()) for n in names]


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def indivisible_tab(plat) -> str:
    """Experiment 2's measured line on one hardware: what DTensor did with a = t + 1 heads, per t."""
    lines = []
    for run in plat.runs:
        ih = run.measurements["indivisible_heads"]
        lines.append(f"- DTensor, a = {ih['a']}, t = {ih['t']}, d_h = {ih['head_dim']}: rank 당 q 열 {ih['local_q_columns']} → "
                     f"`{ih['outcome']}: {ih['message']}`")
    return "\n".join(lines)


def qkv_tab(plat) -> str:
    """Experiment 3 on one hardware: the three attention plans' collectives, sizes in b·s·h·4, agreement, per t."""
    rows = measured_rows(plat.runs, names=("attn_separate", "attn_prepared", "attn_fused"))
    S = lambda r: r["b"] * r["s"] * r["h"] * 4  # noqa: E731
    return shapes(plat) + results.markdown_table(
        ["t", "plan", "forward", "backward", "bytes / (b·s·h·4)", "unsharded 와 max |차|", "rank 간 동일"],
        [[r["t"], r["case"], [op for op, _ in r["forward"]], [op for op, _ in r["backward"]],
          [nb // S(r) for _, nb in r["forward"] + r["backward"]], f"{max(r['diff'].values()):.1e}", r["same"]]
         for r in rows])


def block_table(rows) -> str:
    """Experiment 4's table: collectives and the three differences, each beside the bound the run judged it by
    (its own per-quantity tolerance, tp_bench.py run_case), per t."""
    def cell(r, q):
        return f"{r['diff'][q]:.1e} (≤ {r['tol'][q]:.1e})"
    return results.markdown_table(
        ["t", "b, s, h, a", "forward", "backward", "출력 |차| (≤ 한계)", "입력 grad |차| (≤ 한계)",
         "param grad |차| (≤ 한계)", "모든 rank 가 한계 안", "비트 동일"],
        [[r["t"], f"{r['b']}, {r['s']}, {r['h']}, {r['a']}", [op for op, _ in r["forward"]],
          [op for op, _ in r["backward"]], cell(r, "output"), cell(r, "input_grad"), cell(r, "param_grad"),
          r["within"], r["bitwise"]]
         for r in rows]) + "\n\n한계: " + "; ".join(
            f"t = {', '.join(str(r['t']) for r in rows if r['rule'] == rule)}: {rule}"
            for rule in dict.fromkeys(r["rule"] for r in rows))

"""Ch3-02 Column / row split: the algebra in NumPy, Megatron's f and g on simulated ranks, DTensor's counts.

Math convention: Y = X W with X (n × k), W (k × m); n = b·s rows. PyTorch's nn.Linear stores
weight = Wᵀ (m × k), so a column split of W is ColwiseParallel's Shard(0) of the weight and a row
split of W is RowwiseParallel's Shard(1).
"""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch3_tensor_parallel import shape_line


# --8<-- [start:split]
def col_parallel_forward(X, W, t):
    """Rank r holds W[:, cols_r]; Y_r = X W_r; the full Y is the concatenation [Y_0 … Y_{t−1}]."""
    return [X @ Wr for Wr in np.array_split(W, t, axis=1)]


def row_parallel_forward(X, W, t):
    """Rank r holds W[rows_r, :] and X[:, rows_r]; Y_r = X_r W_r is a partial sum; Y = Σ_r Y_r."""
    return [Xr @ Wr for Xr, Wr in zip(np.array_split(X, t, axis=1), np.array_split(W, t, axis=0))]


def exact_split_check(n=6, k=8, m=10, t=4, seed=0) -> dict:
    """Integer matrices: both splits reproduce X W and its gradients exactly (int64 arithmetic)."""
    rng = np.random.default_rng(seed)
    X, W, dY = (rng.integers(-9, 10, size=sh) for sh in ((n, k), (k, m), (n, m)))
    col = np.concatenate(col_parallel_forward(X, W, t), axis=1)
    row = sum(row_parallel_forward(X, W, t))
    # backward of the column split: dX = Σ_r dY_r W_rᵀ (partial sums), dW_r = Xᵀ dY_r (local)
    dYs, Ws = np.array_split(dY, t, axis=1), np.array_split(W, t, axis=1)
    dX_col = sum(dYr @ Wr.T for dYr, Wr in zip(dYs, Ws))
    dW_col = np.concatenate([X.T @ dYr for dYr in dYs], axis=1)
    # backward of the row split: dX_r = dY W_rᵀ (local), dW_r = X_rᵀ dY (local)
    Wrows, Xs = np.array_split(W, t, axis=0), np.array_split(X, t, axis=1)
    dX_row = np.concatenate([dY @ Wr.T for Wr in Wrows], axis=1)
    dW_row = np.concatenate([Xr.T @ dY for Xr in Xs], axis=0)
    Y, dX, dW = X @ W, dY @ W.T, X.T @ dY
    return {"col_Y": np.array_equal(col, Y), "row_Y": np.array_equal(row, Y),
            "col_dX": np.array_equal(dX_col, dX), "col_dW": np.array_equal(dW_col, dW),
            "row_dX": np.array_equal(dX_row, dX), "row_dW": np.array_equal(dW_row, dW)}
# --8<-- [end:split]


# --8<-- [start:fg]
class SimGroup:
    """t simulated ranks: a tensor is a list of t arrays; all_reduce is the only collective, logged."""

    def __init__(self, t: int):
        self.t, self.log = t, []

    def all_reduce(self, parts, pass_: str):
        self.log.append((pass_, "all_reduce", parts[0].nbytes))
        total = sum(parts)
        return [total.copy() for _ in parts]


def f_forward(grp, xs):   # Megatron's f: identity forward …
    return xs


def f_backward(grp, dxs):  # … all-reduce backward
    return grp.all_reduce(dxs, "backward")


def g_forward(grp, ys):   # Megatron's g: all-reduce forward …
    return grp.all_reduce(ys, "forward")


def g_backward(grp, dys):  # … identity backward
    return dys


def column_layer(grp, X, W, dY):
    """f, then Y_r = X W_r. Forward and backward on t simulated ranks; returns (Y_r, dX, dW_r)."""
    Ws = np.array_split(W, grp.t, axis=1)
    xs = f_forward(grp, [X.copy() for _ in range(grp.t)])
    ys = [x @ Wr for x, Wr in zip(xs, Ws)]
    dys = np.array_split(dY, grp.t, axis=1)       # the output gradient arrives sharded like Y
    dWs = [x.T @ dy for x, dy in zip(xs, dys)]
    dxs = f_backward(grp, [dy @ Wr.T for dy, Wr in zip(dys, Ws)])
    return ys, dxs, dWs


def row_layer(grp, X, W, dY):
    """Y_r = X_r W_r, then g. Input arrives sharded by columns; output and its gradient replicated."""
    Ws, xs = np.array_split(W, grp.t, axis=0), np.array_split(X, grp.t, axis=1)
    ys = g_forward(grp, [x @ Wr for x, Wr in zip(xs, Ws)])
    dys = g_backward(grp, [dY.copy() for _ in range(grp.t)])
    dWs = [x.T @ dy for x, dy in zip(xs, dys)]
    dxs = [dy @ Wr.T for dy, Wr in zip(dys, Ws)]
    return ys, dxs, dWs
# --8<-- [end:fg]


def sim_counts(kind: str, t: int = 2, n: int = 6, k: int = 8, m: int = 16, seed: int = 0) -> dict:
    """Run one simulated layer; return its all-reduces per pass and whether the results are exact."""
    rng = np.random.default_rng(seed)
    X, W, dY = (rng.integers(-9, 10, size=sh).astype(np.int64) for sh in ((n, k), (k, m), (n, m)))
    grp = SimGroup(t)
    if kind == "col":
        ys, dxs, dWs = column_layer(grp, X, W, dY)
        exact = (np.array_equal(np.concatenate(ys, 1), X @ W) and all(np.array_equal(d, dY @ W.T) for d in dxs)
                 and np.array_equal(np.concatenate(dWs, 1), X.T @ dY))
        act = X.nbytes
    else:
        ys, dxs, dWs = row_layer(grp, X, W, dY)
        exact = (all(np.array_equal(y, X @ W) for y in ys) and np.array_equal(np.concatenate(dxs, 1), dY @ W.T)
                 and np.array_equal(np.concatenate(dWs, 0), X.T @ dY))
        act = (X @ W).nbytes
    out = {"forward": 0, "backward": 0, "bytes": [], "exact": exact, "activation_bytes": act}
    for pass_, _, nb in grp.log:
        out[pass_] += 1
        out["bytes"].append(nb)
    return out


def float32_gap(n=64, k=512, m=64, t=4, seed=0) -> dict:
    """The same splits in float32. Any order of summing k products in float32 is within
    γ_k·(|X||W|) of the exact value, γ_k = k·u/(1 − k·u) (Higham 2002, §3.1 and §3.5), so two orders differ by
    at most 2γ_k·(|X||W|) elementwise: the splits need not be bitwise, but stay inside that bound."""
    rng = np.random.default_rng(seed)
    X, W = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    Y = X @ W
    col = np.concatenate(col_parallel_forward(X, W, t), axis=1)
    row = sum(row_parallel_forward(X, W, t))
    u = float(np.finfo(np.float32).eps) / 2  # unit roundoff
    gamma = k * u / (1 - k * u)
    bound = 2 * gamma * (np.abs(X).astype(np.float64) @ np.abs(W).astype(np.float64))
    return {"col_max_diff": float(np.abs(col - Y).max()), "row_max_diff": float(np.abs(row - Y).max()),
            "col_bitwise": bool(np.array_equal(col, Y)), "row_bitwise": bool(np.array_equal(row, Y)),
            "within_bound": bool((np.abs(col - Y) <= bound).all() and (np.abs(row - Y) <= bound).all()),
            "bound_max": float(bound.max()), "u": u, "k": k}


# --------------------------------------------------------------------------- measured (tp_bench)

def tp_runs():
    """Every tp_bench results file, on every hardware (CPU first)."""
    return results.experiment("tp_bench")


def case(run, name: str, x_requires_grad: bool = True) -> dict:
    return next(c for c in run.measurements["cases"] if c["case"] == name and c["x_requires_grad"] == x_requires_grad)


def counts(rec: dict, pass_: str) -> dict:
    """{op: calls} of one pass."""
    return {op: v["calls"] for op, v in rec[pass_].items()}


def measured_rows(runs=None, names=("col", "row")) -> list[dict]:
    rows = []
    for run in runs or tp_runs():
        for name in names:
            c = case(run, name)
            rows.append({"t": c["t"], "case": name, "forward": counts(c, "forward"), "backward": counts(c, "backward"),
                         "fwd_bytes": [b for _, b in c["forward_calls"]], "bwd_bytes": [b for _, b in c["backward_calls"]],
                         "input": c["shapes"]["input"], "output": c["shapes"]["output"],
                         "weight": c["placements"]["weight"], "bias": c["placements"]["bias"],
                         "diff": c["max_abs_diff"], "bitwise": c["bitwise_equal_output"],
                         "same_on_every_rank": c["same_on_every_rank"]})
    return rows


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def shapes(plat) -> str:
    """The shapes of this hardware's runs (one line per distinct preset)."""
    return "; ".join(sorted({shape_line(r) for r in plat.runs})) + "\n\n"


def dtensor_tab(plat) -> str:
    """Experiment 3 on one hardware: placements, collectives per pass and their bytes against b·s·h·4, per t."""
    rows = measured_rows(plat.runs)
    return shapes(plat) + results.markdown_table(
        ["t", "layer", "weight", "bias", "forward", "backward", "bytes", "b·s·h·4", "rank 간 동일"],
        [[r["t"], r["case"], r["weight"], r["bias"], r["forward"] or "없음", r["backward"] or "없음",
          r["fwd_bytes"] + r["bwd_bytes"], r["input"][0] * r["input"][1] * min(r["input"][2], r["output"][2]) * 4,
          r["same_on_every_rank"]] for r in rows])


def agreement_tab(plat) -> str:
    """Experiment 4 on one hardware: largest |difference| from the unsharded layer, per t."""
    return shapes(plat) + results.markdown_table(
        ["t", "layer", "출력 max |차|", "입력 grad max |차|", "weight grad max |차|", "출력 비트 동일"],
        [[r["t"], r["case"], f"{r['diff']['output']:.1e}", f"{r['diff']['input_grad']:.1e}",
          f"{r['diff']['param_grad']:.1e}", r["bitwise"]] for r in measured_rows(plat.runs)])

"""Ch3-03 Megatron MLP: column → GELU → row with one all-reduce per pass, and why not the other order.

Simulated ranks (f, g and SimGroup from Ch3-02's module) in float64, the opposite order's cost,
and DTensor's counts from gpu_runs/tp_bench.py. Notation: t, b, s, h, e (docs/notation.md).
"""
from __future__ import annotations

import math

import numpy as np

from snippets import results
from snippets.ch3_tensor_parallel.d02_column_row_split import (SimGroup, f_backward, f_forward, g_backward, g_forward,
                                                               shapes)


def gelu(x):
    """Exact GELU, x·Φ(x), and its derivative (as torch.nn.functional.gelu, approximate='none')."""
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_grad(x):
    erf = np.vectorize(math.erf)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


# --8<-- [start:mlp]
def megatron_mlp(grp: SimGroup, X, A, B, dZ, x_requires_grad=True):
    """Z = GELU(X A) B on t simulated ranks: f → column-parallel A → GELU → row-parallel B → g.

    Returns (Z on every rank, X̄ on every rank or None, Ā blocks, B̄ blocks). The only collectives
    are g's forward all-reduce and, if X needs a gradient, f's backward all-reduce.
    """
    As, Bs = np.array_split(A, grp.t, axis=1), np.array_split(B, grp.t, axis=0)
    xs = f_forward(grp, [X.copy() for _ in range(grp.t)])
    us = [x @ Ar for x, Ar in zip(xs, As)]          # column-parallel: this rank's 4h/t columns
    ys = [gelu(u) for u in us]                       # elementwise: a column block stays a block
    zs = g_forward(grp, [y @ Br for y, Br in zip(ys, Bs)])  # row-parallel partial sums, then g
    dzs = g_backward(grp, [dZ.copy() for _ in range(grp.t)])
    dBs = [y.T @ dz for y, dz in zip(ys, dzs)]
    dus = [(dz @ Br.T) * gelu_grad(u) for dz, Br, u in zip(dzs, Bs, us)]
    dAs = [x.T @ du for x, du in zip(xs, dus)]
    dxs = f_backward(grp, [du @ Ar.T for du, Ar in zip(dus, As)]) if x_requires_grad else None
    return zs, dxs, dAs, dBs
# --8<-- [end:mlp]


def reference_mlp(X, A, B, dZ):
    U = X @ A
    Z = gelu(U) @ B
    dU = (dZ @ B.T) * gelu_grad(U)
    return Z, dU @ A.T, X.T @ dU, gelu(U).T @ dZ


def mlp_check(t=2, n=6, h=8, seed=0, x_requires_grad=True) -> dict:
    """Simulated Megatron MLP vs the one-device reference (float64), with the collectives it issued."""
    rng = np.random.default_rng(seed)
    X, A, B, dZ = (rng.standard_normal(sh) for sh in ((n, h), (h, 4 * h), (4 * h, h), (n, h)))
    grp = SimGroup(t)
    zs, dxs, dAs, dBs = megatron_mlp(grp, X, A, B, dZ, x_requires_grad)
    Z, dX, dA, dB = reference_mlp(X, A, B, dZ)
    err = max(max(np.abs(z - Z).max() for z in zs), np.abs(np.concatenate(dAs, 1) - dA).max(),
              np.abs(np.concatenate(dBs, 0) - dB).max(),
              max(np.abs(d - dX).max() for d in dxs) if dxs is not None else 0.0)
    return {"t": t, "max_err": float(err), "log": [(p, op, nb) for p, op, nb in grp.log],
            "forward": sum(p == "forward" for p, _, _ in grp.log), "backward": sum(p == "backward" for p, _, _ in grp.log),
            "activation_bytes": X.nbytes}


# --8<-- [start:wrong-order]
def gelu_on_partial_sums_error(t=2, n=6, h=8, seed=0) -> dict:
    """Row-parallel A first: each rank holds a partial sum P_r of U = X A. GELU(Σ P_r) ≠ Σ GELU(P_r)."""
    rng = np.random.default_rng(seed)
    X, A = rng.standard_normal((n, h)), rng.standard_normal((h, 4 * h))
    parts = [x @ Ar for x, Ar in zip(np.array_split(X, t, axis=1), np.array_split(A, t, axis=0))]
    right, wrong = gelu(sum(parts)), sum(gelu(p) for p in parts)
    return {"max_abs_error": float(np.abs(right - wrong).max()), "max_abs_value": float(np.abs(right).max())}


def order_costs(t: int, b: int, s: int, h: int, e: int = 2) -> dict:
    """Collectives of one pass (forward; the backward mirrors it) for the two orders, nccl-tests' S
    and the ring bytes one rank sends: all-reduce 2(t−1)/t·S, all-gather (t−1)/t·S (Ch1)."""
    S = b * s * h * e
    ring = {"all_reduce": lambda S: 2 * (t - 1) / t * S, "all_gather": lambda S: (t - 1) / t * S}
    orders = {"column → GELU → row (Megatron)": [("all_reduce", S)],
              "row → GELU → column": [("all_reduce", 4 * S), ("all_gather", S)]}
    return {name: {"ops": ops, "S_total": sum(x for _, x in ops), "sent_per_rank": sum(ring[o](x) for o, x in ops)}
            for name, ops in orders.items()}
# --8<-- [end:wrong-order]


# --------------------------------------------------------------------------- measured (tp_bench)

def tp_runs():
    """Every tp_bench results file, on every hardware (CPU first)."""
    return results.experiment("tp_bench")


def measured(run, name: str, x_requires_grad: bool = True) -> dict:
    c = next(c for c in run.measurements["cases"] if c["case"] == name and c["x_requires_grad"] == x_requires_grad)
    b, s, h = c["shapes"]["input"]
    return {"t": c["t"], "case": name, "x_requires_grad": x_requires_grad, "b": b, "s": s, "h": h,
            "forward": [(op, nb) for op, nb in c["forward_calls"]], "backward": [(op, nb) for op, nb in c["backward_calls"]],
            "diff": c["max_abs_diff"], "same": c["same_on_every_rank"], "placements": c["placements"]}


def measured_rows(runs=None) -> list[dict]:
    return [measured(r, name, xg) for r in (runs or tp_runs())
            for name, xg in (("mlp", False), ("mlp", True), ("mlp_row_then_col", True))]


# --------------------------------------------------------------------------- per-hardware tabs (plumbing)

def in_bsh4(calls, r) -> str:
    """Collectives of one pass, each as its bytes over one fp32 activation b·s·h·4."""
    return ", ".join(f"{op} {nb / (r['b'] * r['s'] * r['h'] * 4):g}·bsh·4" for op, nb in calls) or "없음"


def orders_tab(plat) -> str:
    """Experiment 3 on one hardware: both orders' collectives per pass (input needs its gradient), per t."""
    rows = [[r["t"], r["case"], in_bsh4(r["forward"], r), in_bsh4(r["backward"], r), f"{max(r['diff'].values()):.1e}",
             r["same"]] for r in measured_rows(plat.runs) if r["x_requires_grad"]]
    return shapes(plat) + results.markdown_table(
        ["t", "plan", "forward", "backward", "unsharded 와 max |차|", "rank 간 동일"], rows)


def requires_grad_tab(plat) -> str:
    """Experiment 4 on one hardware: the Megatron MLP with x.requires_grad False and True, per t (first line:
    the measured shape, as the page says of every tab)."""
    return shapes(plat) + results.markdown_table(
        ["t", "x.requires_grad", "forward collectives", "backward collectives"],
        [[r["t"], r["x_requires_grad"], [op for op, _ in r["forward"]], [op for op, _ in r["backward"]] or "없음"]
         for r in measured_rows(plat.runs) if r["case"] == "mlp"])

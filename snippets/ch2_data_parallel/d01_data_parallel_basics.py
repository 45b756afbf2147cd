"""Ch2-01 Data Parallelism 의 기본: the gradient-mean identity, its floating-point shadow, real DDP, and memory.

Build-time cells use NumPy and single-process torch; the DDP measurements are the committed results of
gpu_runs/ddp_bench.py (its `equivalence` section), one tab per hardware; the memory formula is
snippets/common/zero_memory.py.
"""
from __future__ import annotations

import numpy as np
import torch

from snippets import results
from snippets.common.zero_memory import GRAD_BYTES, zero_memory_bytes


# --8<-- [start:identity]
def lsq_grad(w, x, y):
    """∇ of L(w) = (1/|B|) Σ_j ½ (x_j·w − y_j)² over the rows of x: (1/|B|) xᵀ(xw − y)."""
    return x.T @ (x @ w - y) / len(y)


def dp_gradient(w, x, y, shard_sizes, weighted=False):
    """What N data-parallel ranks compute: each rank's mean-loss gradient on its shard, then the
    AllReduce (a sum) times 1/N. `weighted=True` uses b_r/B instead of 1/N (Theorem 2.1.4)."""
    edges = np.cumsum([0, *shard_sizes])
    grads = [lsq_grad(w, x[a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:])]
    coef = [b / len(y) for b in shard_sizes] if weighted else [1 / len(shard_sizes)] * len(shard_sizes)
    return sum(c * g for c, g in zip(coef, grads))
# --8<-- [end:identity]


def identity_rows(seed: int = 0, n_rows: int = 96, dim: int = 5) -> list[dict]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, dim))
    y = rng.standard_normal(n_rows)
    w = rng.standard_normal(dim)
    full = lsq_grad(w, x, y)
    cases = [("N=2, 균등 (48, 48)", [48, 48], False), ("N=4, 균등 (24×4)", [24] * 4, False),
             ("N=8, 균등 (12×8)", [12] * 8, False), ("N=3, 불균등 (64, 16, 16), 1/N", [64, 16, 16], False),
             ("N=3, 불균등 (64, 16, 16), b_r/B", [64, 16, 16], True)]
    return [{"case": c, "max_abs_diff": float(np.abs(dp_gradient(w, x, y, s, wt) - full).max()),
             "norm": float(np.abs(full).max())} for c, s, wt in cases]


# --8<-- [start:fp]
class Mlp(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x))).squeeze(-1)


def ddp_order_vs_global(dtype, n: int = 4, b: int = 16, d: int = 32, seed: int = 0) -> dict:
    """Gradients of one model: the global-batch mean loss, versus DDP's order (each shard's mean-loss
    gradient multiplied by 1/N, then summed). Same math; different rounding."""
    torch.manual_seed(seed)
    model = Mlp(d).to(dtype)
    x = torch.randn(n * b, d, dtype=dtype)
    y = torch.sin(x.sum(1))
    params = list(model.parameters())
    ref = torch.autograd.grad(torch.nn.functional.mse_loss(model(x), y), params)
    acc = [torch.zeros_like(p) for p in params]
    for r in range(n):
        g = torch.autograd.grad(torch.nn.functional.mse_loss(model(x[r * b:(r + 1) * b]), y[r * b:(r + 1) * b]), params)
        for a, gi in zip(acc, g):
            a.add_(gi * (1.0 / n))
    diff = max(float((a - q).abs().max()) for a, q in zip(acc, ref))
    scale = max(float(q.abs().max()) for q in ref)
    return {"dtype": str(dtype).replace("torch.", ""), "eps": float(torch.finfo(dtype).eps),
            "max_abs_diff": diff, "rel": diff / scale,
            "bitwise_equal": all(torch.equal(a, q) for a, q in zip(acc, ref))}
# --8<-- [end:fp]


PROGRAM = "ddp_bench"


def unit(plat_or_run) -> str:
    """'GPUs' or 'processes': what one rank is on this hardware."""
    kind = plat_or_run.kind if hasattr(plat_or_run, "kind") else plat_or_run.hardware["kind"]
    return "GPUs" if kind == "gpu" else "processes"


def equivalence_rows(run) -> list[list]:
    n = run.hardware["world_size"]
    eq = run.measurements["equivalence"]
    return [[n, r["step"], f"{r['ddp_loss']:.7f}", f"{r['ref_loss']:.7f}", f"{abs(r['ddp_loss'] - r['ref_loss']):.1e}",
             f"{r['max_abs_param_diff']:.1e}", f"{r['params_differing']:,} / {eq['psi']:,}",
             "✅" if r["ranks_bitwise_equal"] else "❌", "✅" if r["bitwise_equal_to_reference"] else "❌"]
            for r in eq["rows"]]


def equivalence_readings(run) -> list[str]:
    """Experiment 3's readings of one results file (Theorem 2.1.5's two halves)."""
    rows = run.measurements["equivalence"]["rows"]
    eps = float(torch.finfo(torch.float32).eps)
    dloss = max(abs(r["ddp_loss"] - r["ref_loss"]) for r in rows)
    dtheta = max(r["max_abs_param_diff"] for r in rows)
    counts = [r["params_differing"] for r in rows]
    grows = all(a < b for a, b in zip(counts, counts[1:]))
    ranks = all(r["ranks_bitwise_equal"] for r in rows)
    ref = sum(r["bitwise_equal_to_reference"] for r in rows)
    return [f"|Δloss| 의 최댓값 {dloss:.1e} (fp32 ε ≈ {eps:.1e} 의 {dloss / eps:.1f} 배)",
            f"max |Δθ| 의 최댓값 {dtheta:.1e}; 한 process 와 다른 원소 수는 step 마다 "
            + ("늘어남" if grows else f"늘지 않음 ({' → '.join(map(str, counts))})"),
            f"rank 끼리 bit 단위로 같은 step: {sum(r['ranks_bitwise_equal'] for r in rows)} / {len(rows)}"
            + (" (모든 step)" if ranks else " — **모든 step 은 아님**"),
            f"한 process 와 bit 단위로 같은 step: {ref} / {len(rows)}"]


# --8<-- [start:tab]
def equivalence_tab(plat) -> str:
    """Experiment 3 on one hardware: every world size it measured, and what the rows say."""
    out = [results.markdown_table(["N", "step", "DDP loss (rank 평균)", "한 process loss", "|Δloss|", "max |Δθ|",
                                   "다른 원소 / ψ", "rank 끼리 bit 단위로 같음", "한 process 와 bit 단위로 같음"],
                                  [row for r in plat.runs for row in equivalence_rows(r)])]
    for r in plat.runs:
        out.append(f"**N = {r.hardware['world_size']} {unit(plat)}, {r.hardware['backend']}**: "
                   + "; ".join(equivalence_readings(r)) + ".")
    return "\n\n".join(out)
# --8<-- [end:tab]


# --8<-- [start:memory]
def replication_rows(psi: float, ns=(1, 8, 64, 1024), k: float = 12) -> list[dict]:
    """Model-state bytes of plain DP (ZeRO stage 0): every rank holds (2 + 2 + K)ψ, whatever N is.

    `ddp_bucket`: PyTorch DDP's flat buckets with the default gradient_as_bucket_view=False hold a second copy
    of the gradients (same dtype, so the gradient term again); the ZeRO accounting leaves it out."""
    return [{"N": n, "per_rank": zero_memory_bytes(psi, n, 0, k), "cluster": n * zero_memory_bytes(psi, n, 0, k),
             "unique": zero_memory_bytes(psi, 1, 0, k), "ddp_bucket": GRAD_BYTES * psi} for n in ns]
# --8<-- [end:memory]

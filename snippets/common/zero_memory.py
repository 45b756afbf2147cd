"""ZeRO / FSDP memory and communication formulas, shared by every Chapter 5 page, test and program.

Mixed-precision Adam (Rajbhandari et al. 2020 §3.1): per parameter 2 B (16-bit param) + 2 B
(16-bit grad) + K = 12 B of optimizer state (fp32 master 4 + m 4 + v 4): 16 B in all.
ψ = number of parameters, N = data-parallel (sharding) degree. Results are bytes;
GB = 1e9 B and GiB = 2**30 B are never mixed.
"""
from __future__ import annotations

PARAM_BYTES = 2      # 16-bit parameters
GRAD_BYTES = 2       # 16-bit gradients
K_ADAM = 12          # fp32 master weights + Adam μ + Adam ν (moments)
GB = 1e9
GIB = 2 ** 30


# --8<-- [start:memory]
def zero_memory_bytes(psi: float, n: int, stage: int, k: float = K_ADAM) -> float:
    """Per-rank bytes of model states (params + grads + optimizer state) under ZeRO stage 0–3.

    stage 0 (plain DP): (2 + 2 + K)ψ
    stage 1 (P_os):     4ψ + Kψ/N
    stage 2 (P_os+g):   2ψ + (2 + K)ψ/N
    stage 3 (P_os+g+p): (4 + K)ψ/N
    """
    if stage == 0:
        return (PARAM_BYTES + GRAD_BYTES + k) * psi
    if stage == 1:
        return (PARAM_BYTES + GRAD_BYTES) * psi + k * psi / n
    if stage == 2:
        return PARAM_BYTES * psi + (GRAD_BYTES + k) * psi / n
    if stage == 3:
        return (PARAM_BYTES + GRAD_BYTES + k) * psi / n
    raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, not {stage}")


def zero_memory_breakdown(psi: float, n: int, stage: int, k: float = K_ADAM) -> dict[str, float]:
    """The same total split into params / grads / optimizer state (bytes per rank)."""
    shard_p, shard_g, shard_o = stage >= 3, stage >= 2, stage >= 1
    return {
        "params": PARAM_BYTES * psi / (n if shard_p else 1),
        "grads": GRAD_BYTES * psi / (n if shard_g else 1),
        "optimizer": k * psi / (n if shard_o else 1),
    }
# --8<-- [end:memory]


# --8<-- [start:comm]
def zero_comm_volume(psi: float, stage: int) -> float:
    """Per-rank communication volume per step in units of parameters (ZeRO paper §7).

    Plain DP and stages 1–2: reduce-scatter (ψ) + all-gather (ψ) = 2ψ, the same as an all-reduce.
    Stage 3: parameter all-gather in forward (ψ) and again in backward (ψ), plus the gradient
    reduce-scatter (ψ) = 3ψ, i.e. 1.5× data parallelism. Multiply by (N−1)/N for the exact
    ring volume and by the element size for bytes.
    """
    if stage in (0, 1, 2):
        return 2 * psi
    if stage == 3:
        return 3 * psi
    raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, not {stage}")
# --8<-- [end:comm]


# --8<-- [start:threshold]
def zero3_breakeven_tokens(flops: float, link_bw: float, n: int, elem: int = 2) -> float:
    """Tokens per GPU per step above which ZeRO-3's collectives can hide behind compute.

    Compute per step: 6ψτ/F (forward 2ψτ, backward 4ψτ). Ring traffic per rank: 3eψ(N−1)/N bytes at
    link_bw bytes/s (forward AllGather eψ, backward AllGather + ReduceScatter 2eψ). Equal when
    τ* = F · 3e(N−1)/N / (6 · link_bw) = F e (N−1) / (2 N link_bw); ψ cancels. The forward alone
    (2ψτ/F vs eψ(N−1)/(N·link_bw)) and the backward alone (4ψτ/F vs 2eψ(N−1)/(N·link_bw)) give the same τ*.
    """
    return flops * zero_comm_volume(1, 3) * elem * (n - 1) / n / (6 * link_bw)
# --8<-- [end:threshold]


def table(models=((7e9, 8), (13e9, 16), (70e9, 16), (175e9, 64)), unit: float = GB):
    """Per-rank model-state memory for each (ψ, N) and stage, in `unit` (default GB = 1e9 B)."""
    return [{"psi": psi, "N": n, **{f"stage{s}": zero_memory_bytes(psi, n, s) / unit for s in range(4)}}
            for psi, n in models]

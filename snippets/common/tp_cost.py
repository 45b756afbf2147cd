"""Tensor-parallel (Megatron) communication formulas, shared by Chapter 3's pages, tests, tp_bench and Ch7.

Notation (docs/notation.md): t tensor-parallel degree, b micro-batch size, s sequence length,
h hidden size, a heads, L layers, m micro-batches per step, e bytes per activation element
(2 for 16-bit), α/β the α-β constants (1/β is the per-direction bandwidth).

Per transformer layer and micro-batch (Shoeybi et al. 2019 §3, Figs. 3-4; Korthikanti et al.
2022 §4.2.2): the MLP and the attention each put one g (all-reduce forward) after the row-parallel
layer and one f (all-reduce backward) before the column-parallel layer, so 2 all-reduces forward
and 2 backward. Full recomputation re-runs the forward inside the backward: 2 more. Each
all-reduce carries the layer's activation, S = b·s·h·e bytes. With sequence parallelism each
all-reduce becomes an all-gather plus a reduce-scatter of the same S.
"""
from __future__ import annotations

import numpy as np

from snippets.common.alphabeta import ring_allreduce_time

E_16BIT = 2  # bytes per element of 16-bit activations


# --8<-- [start:counts]
def tp_collectives_per_layer(recompute: str = "none", sequence_parallel: bool = False) -> dict:
    """Collectives of one transformer layer for one micro-batch, split by pass.

    recompute: "none", "selective" (attention core only: no linear layer re-runs, no extra
    collective) or "full" (the layer's whole forward re-runs before its backward).
    Without SP: {"forward": {"all_reduce": 2}, "backward": {"all_reduce": 2}, ...}.
    With SP: every all-reduce becomes one all_gather + one reduce_scatter.
    """
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be none, selective or full, not {recompute!r}")
    per = {"forward": 2, "backward": 2, "recompute": 2 if recompute == "full" else 0}
    if sequence_parallel:
        return {k: ({"all_gather": v, "reduce_scatter": v} if v else {}) for k, v in per.items()}
    return {k: ({"all_reduce": v} if v else {}) for k, v in per.items()}


def tp_allreduces_per_layer(recompute: str = "none") -> int:
    """4 without recomputation (and with selective), 6 with full recomputation."""
    return sum(sum(d.values()) for d in tp_collectives_per_layer(recompute).values())


def tp_allreduces_per_step(layers: int, microbatches: int, recompute: str = "none") -> int:
    """Per training step on one TP group: 4·L·m (6·L·m with full recomputation)."""
    return tp_allreduces_per_layer(recompute) * layers * microbatches
# --8<-- [end:counts]


# --8<-- [start:bytes]
def tp_allreduce_bytes(b: int, s: int, h: int, e: int = E_16BIT) -> int:
    """S of one TP all-reduce: the layer's activation, b·s·h elements of e bytes (2bsh for 16-bit)."""
    return b * s * h * e


def ring_allgather_time(t, S, alpha, beta):
    """Ring all-gather (or reduce-scatter) of S bytes: half of a ring all-reduce (Ch1-03, Thm 1.3.5),
    (t−1)α + (t−1)/t·Sβ."""
    return 0.5 * ring_allreduce_time(t, S, alpha, beta)


def tp_comm_time_per_layer(t, b, s, h, alpha, beta, recompute="none", e=E_16BIT, sequence_parallel=False):
    """Seconds of TP communication per layer per micro-batch (ring α-β, nothing overlapped)."""
    S = tp_allreduce_bytes(b, s, h, e)
    n = tp_allreduces_per_layer(recompute)
    if sequence_parallel:
        return n * 2 * ring_allgather_time(t, S, alpha, beta)
    return n * ring_allreduce_time(t, S, alpha, beta)


def tp_bytes_sent_per_rank_per_layer(t, b, s, h, recompute="none", e=E_16BIT):
    """Bytes one rank sends per layer per micro-batch with ring all-reduces: n·2(t−1)/t·S."""
    S = tp_allreduce_bytes(b, s, h, e)
    t = np.asarray(t, dtype=float)
    return tp_allreduces_per_layer(recompute) * 2 * (t - 1) / t * S
# --8<-- [end:bytes]


# --8<-- [start:scaling]
def layer_flops(b: int, s: int, h: int) -> float:
    """Forward + backward matmul FLOPs of one layer (Narayanan et al. 2021, §5.1's FLOPs formula and its appendix; per layer, no
    logits): forward 24bsh² + 4bs²h, backward twice that, so 3·(24bsh² + 4bs²h) = 72bsh² + 12bs²h."""
    return 3.0 * (24 * b * s * h * h + 4 * b * s * s * h)


def tp_scaling(t, b, s, h, flops_per_s, alpha, beta, e=E_16BIT):
    """Compute vs communication per device per layer per micro-batch as t grows.

    Compute time falls as 1/t (the FLOPs are split t ways); the all-reduce time does not fall:
    4 ring all-reduces of S = bshe bytes, whose bytes per rank 2(t−1)/t·S grow toward 2S.
    Returns a dict of arrays: compute_s, comm_s, comm_fraction = comm/(compute + comm) with no overlap.
    """
    t = np.asarray(t, dtype=float)
    compute = layer_flops(b, s, h) / (t * flops_per_s)
    comm = tp_comm_time_per_layer(t, b, s, h, alpha, beta, e=e)
    comm = np.where(t > 1, comm, 0.0)
    return {"t": t, "compute_s": compute, "comm_s": comm, "comm_fraction": comm / (compute + comm)}
# --8<-- [end:scaling]

"""Mixture-of-Experts routing formulas, shared by Ch7-02's page, its tests and gpu_runs/moe_ep.py.

Notation (docs/notation.md): E experts, top-k routing, λ_aux the load-balancing coefficient (α is
reserved for latency), T tokens in one routing group (one rank's micro-batch), h hidden size, W the
expert-parallel group size (ranks), e bytes per element.

    capacity C = ⌈k·T/E · CF⌉ tokens per expert per group (Switch §2.2 with k = 1; GShard §2.2 uses
                 2T/E for top-2); assignments beyond C are dropped, in token order.
    L_aux = λ_aux · E · Σ_i f_i P_i, f_i the fraction of the T tokens whose top-1 expert is i, P_i the
            mean router probability of expert i (Switch eq. 4-6); f is piecewise constant, so the
            gradient flows through P only.
"""
from __future__ import annotations

import math
from fractions import Fraction

import torch


# --8<-- [start:route]
def capacity(tokens: int, experts: int, cf: float, k: int = 1) -> int:
    """Tokens one expert accepts from one group: ⌈k·T/E · CF⌉, in exact rational arithmetic (in floating point
    1000/10 · 1.1 = 110.00000000000001, whose ceiling is 111)."""
    return math.ceil(Fraction(k * tokens, experts) * Fraction(cf).limit_denominator(1_000_000))


def route(logits: torch.Tensor, k: int, cap: int):
    """Top-k routing with a capacity: returns (expert [T, k], gate [T, k], keep [T, k] bool, probs [T, E]).

    probs = softmax(logits); the k largest are chosen; the gates are the chosen probabilities
    renormalised to sum to 1 (for k = 1 the gate is the probability itself, as in Switch). An expert
    takes assignments in token order (rank-1 choices before rank-2 choices, GShard) until it holds cap."""
    probs = logits.softmax(dim=-1)
    top_p, expert = probs.topk(k, dim=-1)
    gate = top_p if k == 1 else top_p / top_p.sum(dim=-1, keepdim=True)
    E = logits.shape[-1]
    keep = torch.zeros_like(expert, dtype=torch.bool)
    load = torch.zeros(E, dtype=torch.long)
    for j in range(k):                     # priority: every token's 1st choice, then every 2nd choice
        for tkn in range(expert.shape[0]):
            i = int(expert[tkn, j])
            if load[i] < cap:
                keep[tkn, j] = True
                load[i] += 1
    return expert, gate, keep, probs


def aux_loss(probs: torch.Tensor, lam: float = 0.01) -> torch.Tensor:
    """λ_aux · E · Σ_i f_i P_i with f from the top-1 choice (no gradient) and P the mean probability."""
    E = probs.shape[-1]
    f = torch.bincount(probs.argmax(dim=-1), minlength=E).to(probs.dtype) / probs.shape[0]
    P = probs.mean(dim=0)
    return lam * E * (f.detach() * P).sum()
# --8<-- [end:route]


# --8<-- [start:traffic]
def a2a_bytes_uniform(tokens: int, k: int, world: int, h: int, e: int = 4) -> float:
    """Bytes one rank sends in one all-to-all (dispatch, or combine) when its k·T assignments spread
    evenly over the W ranks and none is dropped: the (W−1)/W of them that leave the rank, h·e each."""
    return k * tokens * (world - 1) / world * h * e


def a2a_bytes(send_counts, rank: int, h: int, e: int = 4) -> int:
    """Bytes actually leaving `rank` for the other ranks, from its split sizes (rows to each rank)."""
    return sum(c for j, c in enumerate(send_counts) if j != rank) * h * e


def a2a_bytes_padded(tokens: int, experts: int, cf: float, k: int, world: int, h: int, e: int = 4) -> dict:
    """Fixed-capacity dispatch (Switch §2.2, GShard, DeepSpeed-MoE): every rank sends an [E, n_cap, h]
    buffer, empty slots zero-filled, so the bytes do not depend on the routing but grow with φ.
    Returns the buffer bytes (the all-to-all's input, self chunk included), the bytes leaving the rank
    ((W−1)/W of it) and the rows one expert computes over all W groups (W·n_cap, padding included)."""
    cap = capacity(tokens, experts, cf, k)
    buffer = experts * cap * h * e
    return {"capacity": cap, "buffer": buffer, "leaving": buffer * (world - 1) // world,
            "rows_per_expert": world * cap}
# --8<-- [end:traffic]


def load_stats(expert: torch.Tensor, keep: torch.Tensor, E: int) -> dict:
    """Per-expert assignments asked for and kept; imbalance = max load / mean load; dropped fraction."""
    asked = torch.bincount(expert.flatten(), minlength=E)
    kept = torch.bincount(expert[keep].flatten(), minlength=E)
    return {"asked": asked.tolist(), "kept": kept.tolist(),
            "imbalance": float(asked.max()) / (float(asked.sum()) / E),
            "dropped_fraction": 1.0 - float(kept.sum()) / float(asked.sum())}

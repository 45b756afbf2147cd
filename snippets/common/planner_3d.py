"""3D-parallel planner (Ch7-01): every factorisation d·t·p = N of a cluster, ranked by estimated step time.

Pure functions, no torch: inputs (a model, a cluster, a batch) -> a list of plain-dict rows, so the
browser calculators can port it line by line. No formula is written here a second time: every cost
comes from the shared modules of earlier chapters.

    per-GPU memory   model states: zero_memory.zero_memory_bytes (Ch5) of the ψ/(t·p) parameters a
                     (tp, pp) rank owns, sharded over the d data-parallel replicas at `zero_stage`;
                     activations: activation_memory.layer_bytes (Ch6, Korthikanti Table 2 terms,
                     TP + SP) × L/p layers × the micro-batches in flight on the first 1F1B stage
                     (pipeline_sim.one_f_one_b_peak_inflight, Ch4).
    communication    TP: tp_cost.tp_comm_time_per_layer (Ch3-05) × L/p × m;
                     PP: one α-β point-to-point message of b·s·h·e/t bytes (SP-scattered activation)
                         per micro-batch per direction at each stage boundary (Ch4);
                     DP: alphabeta.ring_allreduce_time (Ch1) of the 16-bit gradients of ψ/(t·p)
                         parameters, plus one ring all-gather of the parameters for ZeRO-3.
    bubble           pipeline_sim.gpipe_bubble_relative (p−1)/m (1F1B, Megatron's definition).
    compute          tp_cost.layer_flops (Narayanan 2021 §5.1) / (t · F · MFU).

Rank layout (Llama 3 §3.3.2's order [TP, CP, PP, DP], CP = 1 here): TP innermost (consecutive ranks),
then PP, then DP outermost. An axis whose group, with its stride, fits in one node uses the
intra-node link, otherwise the inter-node link (per direction, notation.md).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from snippets.common import activation_memory as am
from snippets.common import alphabeta as ab
from snippets.common import pipeline_sim as ps
from snippets.common import tp_cost as tc
from snippets.common import zero_memory as zm


# --8<-- [start:inputs]
@dataclass(frozen=True)
class Model:
    layers: int      # L
    hidden: int      # h
    heads: int       # a
    seq: int         # s
    vocab: int       # V (reported; embeddings are inside ψ)
    psi: float       # ψ, parameters


@dataclass(frozen=True)
class Cluster:
    gpus: int                 # N
    gpus_per_node: int        # g
    mem_bytes: float          # usable memory per GPU
    intra_bw: float           # bytes/s, one direction (NVLink)
    inter_bw: float           # bytes/s, one direction, per GPU (its NIC)
    alpha_intra: float = 5e-6
    alpha_inter: float = 10e-6
    flops: float = 989e12     # F: peak 16-bit FLOP/s
    mfu: float = 0.4          # the fraction of F that matmuls reach


@dataclass(frozen=True)
class Batch:
    global_batch: int         # B sequences per step
    micro_batch: int = 1      # b sequences per micro-batch
# --8<-- [end:inputs]


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def factorisations(n: int) -> list[tuple[int, int, int]]:
    """Every (d, t, p) with d·t·p = n."""
    return [(n // (t * p), t, p) for t in divisors(n) for p in divisors(n // t)]


def axis_link(stride: int, degree: int, gpus_per_node: int) -> str:
    """'intra' if a group of `degree` ranks spaced `stride` apart stays inside one node, else 'inter'."""
    return "intra" if degree == 1 or stride * degree <= gpus_per_node else "inter"


# --8<-- [start:evaluate]
def evaluate(model: Model, cluster: Cluster, batch: Batch, d: int, t: int, p: int,
             zero_stage: int = 1, recompute: str = "selective") -> dict:
    """One layout: memory breakdown (bytes per GPU), comm seconds per axis, bubble, step estimate."""
    L, h, a, s, b = model.layers, model.hidden, model.heads, model.seq, batch.micro_batch
    m = batch.global_batch // (d * b)                       # micro-batches per pipeline per step
    g = cluster.gpus_per_node
    links = {"tp": axis_link(1, t, g), "pp": axis_link(t, p, g), "dp": axis_link(t * p, d, g)}
    ab_of = {"intra": (cluster.alpha_intra, 1 / cluster.intra_bw),
             "inter": (cluster.alpha_inter, 1 / cluster.inter_bw)}

    psi_rank = model.psi / (t * p)                          # parameters one (tp, pp) rank owns
    states = zm.zero_memory_breakdown(psi_rank, d, zero_stage)
    inflight = ps.one_f_one_b_peak_inflight(p, m, 0)        # first stage: min(p, m) micro-batches
    act = am.layer_bytes(s, b, h, a, t=t, sp=t > 1, recompute=recompute) * (L / p) * inflight

    al, be = ab_of[links["tp"]]
    tp_s = (tc.tp_comm_time_per_layer(t, b, s, h, al, be, recompute=recompute, sequence_parallel=True)
            * (L / p) * m) if t > 1 else 0.0
    al, be = ab_of[links["pp"]]
    pp_s = (2 * m * (al + b * s * h * tc.E_16BIT / t * be)) if p > 1 else 0.0
    al, be = ab_of[links["dp"]]
    grad_bytes = zm.GRAD_BYTES * psi_rank
    dp_s = float(ab.ring_allreduce_time(d, grad_bytes, al, be)) if d > 1 else 0.0
    if zero_stage == 3 and d > 1:                           # parameters gathered again for the backward
        dp_s += float(tc.ring_allgather_time(d, zm.PARAM_BYTES * psi_rank, al, be))

    extra = 1 / 3 if recompute == "full" else 0.0           # full recompute re-runs the forward (1/3)
    compute_s = tc.layer_flops(b, s, h) * (1 + extra) / (t * cluster.flops * cluster.mfu) * (L / p) * m
    bubble = ps.gpipe_bubble_relative(p, m)
    # the pipeline's busy time (compute + TP + P2P) stretched by the bubble; the DP reduction exposed
    step_s = (compute_s + tp_s + pp_s) * (1 + bubble) + dp_s
    mem = states["params"] + states["grads"] + states["optimizer"] + act
    return {"d": d, "t": t, "p": p, "m": m, "links": links,
            "mem": {**states, "activations": act, "total": mem},
            "comm_s": {"tp": float(tp_s), "pp": float(pp_s), "dp": float(dp_s)},
            "compute_s": float(compute_s), "bubble": float(bubble), "step_s": float(step_s),
            "fits": bool(mem <= cluster.mem_bytes),
            "tokens_per_s": batch.global_batch * s / step_s}
# --8<-- [end:evaluate]


# --8<-- [start:plan]
def plan(model: Model, cluster: Cluster, batch: Batch, zero_stage: int = 1,
         recompute: str = "selective", max_t: int | None = None) -> list[dict]:
    """Every valid layout, feasible ones first, each group by estimated step time (fastest first).

    Valid: t divides the heads, p divides the layers, d·b divides the global batch, t ≤ max_t
    (default: the GPUs of one node)."""
    max_t = max_t or cluster.gpus_per_node
    rows = []
    for d, t, p in factorisations(cluster.gpus):
        if model.heads % t or model.layers % p or batch.global_batch % (d * batch.micro_batch) or t > max_t:
            continue
        rows.append(evaluate(model, cluster, batch, d, t, p, zero_stage, recompute))
    return sorted(rows, key=lambda r: (not r["fits"], r["step_s"]))
# --8<-- [end:plan]


def inputs_dict(model: Model, cluster: Cluster, batch: Batch) -> dict:
    return {"model": asdict(model), "cluster": asdict(cluster), "batch": asdict(batch)}


# Presets used by Ch7-01 and the lab. Llama-2-70B's shape (Touvron et al. 2023, Table 1 / model card:
# 80 layers, h 8192, 64 heads, 4K context; GQA ignored here), on 8 nodes × 8 H100-80GB.
LLAMA70B = Model(layers=80, hidden=8192, heads=64, seq=4096, vocab=32000, psi=70e9)
# mem_bytes: 80 GB of HBM less ~10 % for the CUDA context, NCCL buffers and fragmentation (an assumption).
# intra_bw: NVLink 4, 900 GB/s both directions -> 450e9 per direction; inter_bw: one 400 Gb/s NIC per GPU.
H100_64 = Cluster(gpus=64, gpus_per_node=8, mem_bytes=72e9, intra_bw=450e9, inter_bw=50e9)
BATCH_4M = Batch(global_batch=1024, micro_batch=1)   # 1024 × 4096 ≈ 4M tokens per step

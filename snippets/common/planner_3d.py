"""3D-parallel planner (Ch7-01): every factorisation d·t·p = N of a cluster, ranked by estimated step time.

Pure functions, no torch: inputs (a model, a cluster, a batch, and the model's *assumptions*) -> a list of
plain-dict rows, so the browser calculators can port it line by line. The costs come from the shared
modules of earlier chapters:

    per-GPU memory   model states of the parameters one (tp, pp) rank owns (Ch5: 16-bit parameters, the
                     gradients in `Assumptions.grad_bytes`, K = 12 optimizer bytes sharded over d by ZeRO
                     stage); activations: Korthikanti's per-layer terms (Ch6, activation_memory.TERMS) with
                     the model's real shapes (GQA's smaller K/V, SwiGLU's three matrices) × the layers of a
                     stage × the micro-batches in flight on it (Ch4: 1F1B min(p, m) on the first stage,
                     interleaved 1F1B's pA(1 + (p−1)/(pv))); the embedding on the first stage, the LM head
                     and its logits on the last.
    communication    TP: tp_cost.tp_comm_time_per_layer (Ch3-05) × layers × m, the fraction
                         `Assumptions.tp_overlap` hidden under compute;
                     PP: one α-β point-to-point message of b·s·h·e/t bytes per micro-batch, per direction,
                         per model chunk (× v when interleaved);
                     DP: ZeRO 0: alphabeta.ring_allreduce_time (Ch1) of the gradients (grad_bytes each);
                         ZeRO ≥ 1 (Megatron's distributed optimizer, FSDP): a ring reduce-scatter of the
                         gradients and a ring all-gather of the 16-bit parameters, (d−1)/d·(grad_bytes + 2)
                         bytes per parameter; ZeRO-3 (reshard after forward) gathers the parameters once more
                         for the backward.
    bubble           (p−1)/(v·m) (Megatron's definition, relative to ideal time; v = 1: 1F1B).
    compute          the model's matmul FLOPs (Narayanan 2021 §5.1 generalised to GQA/SwiGLU, + the LM
                     head) of the slowest stage / (t · F · MFU(h/t)); MFU(h/t) = MFU · η(h/t)/η(h) from
                     `Assumptions.mfu_curve` (flat when empty).

Rank layout (Llama 3 §3.3.2's order [TP, CP, PP, DP], CP = 1 here): TP innermost (consecutive ranks),
then PP, then DP outermost. An axis whose group, with its stride, fits in one node uses the
intra-node link, otherwise the inter-node link (per direction, notation.md).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

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
    vocab: int       # V (embedding on the first stage, LM head on the last)
    psi: float       # ψ, parameters (reported; with Assumptions.shapes the planner counts them from the shapes)
    ffn: int = 0            # f, the FFN width (0: 4h)
    kv_heads: int = 0       # key/value heads (GQA; 0: = a, multi-head attention)
    swiglu: bool = False    # SwiGLU FFN: three h×f matrices instead of GELU's two
    dropout: bool = True    # dropout masks stored (GPT-3 / Megatron GPT); Llama trains without dropout


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
    mfu: float = 0.4          # the fraction of F that a layer's matmuls reach at t = 1


@dataclass(frozen=True)
class Batch:
    global_batch: int         # B sequences per step
    micro_batch: int = 1      # b sequences per micro-batch


@dataclass(frozen=True)
class Assumptions:
    """What the step-time and memory model takes for granted. Each one moves the ranking (the page's
    sensitivity table); LEGACY is the simple model: 16-bit gradients, 12Lh² with MHA/GELU, no embedding."""
    tp_overlap: float = 0.0         # fraction of TP communication hidden under compute (async TP)
    mfu_curve: tuple = ()           # ((h/t, η), ...): GEMM efficiency vs shard width; () = MFU flat in t
    grad_bytes: int = 4             # Megatron distributed optimizer: fp32 main gradients (6 + 12/d B/param)
    shapes: bool = True             # FLOPs, parameters, activations from GQA/SwiGLU shapes (else 12Lh², MHA/GELU)
    embeddings: bool = True         # embedding on the first stage, LM head + logits on the last
    interleave: int = 1             # v model chunks per rank (interleaved 1F1B); 1 = plain 1F1B
    logits_bytes: int = 4           # bytes per logit kept for the loss (fp32 cross-entropy)
    uneven_stages: bool = False     # allow p ∤ L (stages of ⌈L/p⌉ layers; Llama 3 405B: L = 126, p = 16)
    edge_layers_less: int = 0       # layers taken off the first and the last stage each (Llama 3 §3.3.2: 1;
                                    # 126 = 14·8 + 2·7); applied with plain 1F1B (v = 1) and p > 2 only


LEGACY = Assumptions(tp_overlap=0.0, mfu_curve=(), grad_bytes=2, shapes=False, embeddings=False, interleave=1)
# --8<-- [end:inputs]


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def factorisations(n: int) -> list[tuple[int, int, int]]:
    """Every (d, t, p) with d·t·p = n."""
    return [(n // (t * p), t, p) for t in divisors(n) for p in divisors(n // t)]


def axis_link(stride: int, degree: int, gpus_per_node: int) -> str:
    """'intra' if a group of `degree` ranks spaced `stride` apart stays inside one node, else 'inter'."""
    return "intra" if degree == 1 or stride * degree <= gpus_per_node else "inter"


# --8<-- [start:shapes]
def ffn_width(model: Model) -> int:
    return model.ffn or 4 * model.hidden


def kv_ratio(model: Model) -> float:
    return (model.kv_heads or model.heads) / model.heads


def layer_params(model: Model, assume: Assumptions) -> float:
    """Parameters of one transformer layer: Q, K, V (K, V of width h·kv/a under GQA), the output projection,
    and the FFN's 2 (GELU) or 3 (SwiGLU) h×f matrices. Without `shapes`: the legacy ψ/L."""
    if not assume.shapes:
        return model.psi / model.layers
    h, f, r = model.hidden, ffn_width(model), kv_ratio(model)
    return h * h * (2 + 2 * r) + (3 if model.swiglu else 2) * h * f


def layer_flops(model: Model, b: int, assume: Assumptions) -> float:
    """Forward + backward matmul FLOPs of one layer, one micro-batch: 3 × forward, forward = 2 FLOPs per
    weight per token plus the attention scores and ·V (4bs²h). MHA + GELU 4h: Narayanan §5.1's 72bsh² + 12bs²h."""
    s, h = model.seq, model.hidden
    if not assume.shapes:
        return tc.layer_flops(b, s, h)
    return 3.0 * (2 * b * s * layer_params(model, assume) + 4 * b * s * s * h)


def layer_activation_bytes(model: Model, b: int, t: int, recompute: str, assume: Assumptions) -> float:
    """Bytes one layer keeps for its backward on one rank, with TP + SP (every term split t ways, Korthikanti
    §4.2.2). Korthikanti's terms (activation_memory.TERMS) with the real shapes: K and V are kv/a of Q (GQA);
    the FFN keeps fc1's output and fc2's input (GELU: 2·f/h sbh) or the gate, up, SiLU(gate) and the product
    (SwiGLU: 4·f/h sbh); no dropout masks when the model has no dropout. Selective recompute drops the
    attention core (softmax, its dropout, as²b terms); full recompute keeps the layer input (2sbh)."""
    s, h, a = model.seq, model.hidden, model.heads
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh
    if not assume.shapes:
        from snippets.common import activation_memory as am
        return am.layer_bytes(s, b, h, a, t=t, sp=t > 1, recompute=recompute)
    f, r, drop = ffn_width(model), kv_ratio(model), model.dropout
    act = 2 * sbh * (2                      # two LayerNorm inputs
                     + 1 + 1 + 2 * r + 1    # QKV input, Q, K and V (GQA: r = kv/a), out-projection input
                     + 1                    # FFN input
                     + (4 if model.swiglu else 2) * f / h)
    masks = sbh * (2 if drop else 0)        # attention-out and FFN dropout masks, 1 byte each
    core = 0.0 if recompute == "selective" else a * s * s * b * (2 + 2 * drop + 1 * drop)
    return (act + masks + core) / t
# --8<-- [end:shapes]


def mfu_at(cluster: Cluster, model: Model, t: int, assume: Assumptions) -> float:
    """MFU at TP degree t: the cluster's MFU × η(h/t)/η(h), η read off `mfu_curve` (log-linear in the
    width between points, the end value outside them). Flat (= cluster.mfu) when the curve is empty."""
    pts = sorted(assume.mfu_curve)
    if not pts:
        return cluster.mfu

    def eta(w):
        if w <= pts[0][0]:
            return pts[0][1]
        if w >= pts[-1][0]:
            return pts[-1][1]
        for (w0, e0), (w1, e1) in zip(pts, pts[1:]):
            if w0 <= w <= w1:
                f = (math.log(w) - math.log(w0)) / (math.log(w1) - math.log(w0))
                return e0 + f * (e1 - e0)
    h = model.hidden
    return cluster.mfu * eta(h / t) / eta(h)


def halving_curve(h: int, drop: float, steps: int = 7) -> tuple:
    """A hypothetical MFU curve: η falls by `drop` (e.g. 0.05) each time the shard width h/t halves."""
    return tuple((h / 2 ** k, (1 - drop) ** k) for k in range(steps))


# --8<-- [start:evaluate]
def evaluate(model: Model, cluster: Cluster, batch: Batch, d: int, t: int, p: int,
             zero_stage: int = 1, recompute: str = "selective", assume: Assumptions = Assumptions()) -> dict:
    """One layout: memory of its worst stage (bytes per GPU), comm seconds per axis, bubble, step estimate."""
    L, h, s, b, V = model.layers, model.hidden, model.seq, batch.micro_batch, model.vocab
    v = assume.interleave
    m = batch.global_batch // (d * b)                       # micro-batches per pipeline per step
    g = cluster.gpus_per_node
    links = {"tp": axis_link(1, t, g), "pp": axis_link(t, p, g), "dp": axis_link(t * p, d, g)}
    ab_of = {"intra": (cluster.alpha_intra, 1 / cluster.intra_bw),
             "inter": (cluster.alpha_inter, 1 / cluster.inter_bw)}
    k = assume.edge_layers_less if (v == 1 and p > 2) else 0
    stage_layers = math.ceil((L + 2 * k) / p)               # a middle stage (= L/p when p | L and k = 0)
    edge_layers = stage_layers - k                          # the first and the last stage
    embed = assume.embeddings
    # parameters of one (tp, pp) rank: the first and the last stage also hold the embedding / LM head (V·h each)
    first = (edge_layers * layer_params(model, assume) + (V * h if embed else 0)) / t
    last = (edge_layers * layer_params(model, assume) + (V * h if embed else 0)) / t
    middle = stage_layers * layer_params(model, assume) / t
    if p == 1:
        first = last = (L * layer_params(model, assume) + (2 * V * h if embed else 0)) / t

    def states(n):                                          # Ch5: 2 + grad_bytes + K, sharded by ZeRO stage
        return {"params": zm.PARAM_BYTES * n / (d if zero_stage >= 3 else 1),
                "grads": assume.grad_bytes * n / (d if zero_stage >= 2 else 1),
                "optimizer": zm.K_ADAM * n / (d if zero_stage >= 1 else 1)}

    per_layer = layer_activation_bytes(model, b, t, recompute, assume)
    if v > 1:   # interleaved 1F1B, rank 0: pA(1 + (p−1)/(pv)) in units of A = one micro-batch through its layers
        chunks_first = min(float(ps.interleaved_first_rank_memory(p, v)), float(m))
    else:
        chunks_first = float(ps.one_f_one_b_peak_inflight(p, m, 0))   # min(p, m)
    inflight_last = float(ps.one_f_one_b_peak_inflight(p, m, p - 1))  # 1 (the whole batch one by one if p = 1)
    logits = b * s * V / t * assume.logits_bytes if embed else 0.0
    # stage 1 holds more layers than stage 0 when k > 0, with one micro-batch fewer in flight (1F1B: min(p−1, m))
    inflight_second = float(ps.one_f_one_b_peak_inflight(p, m, 1)) if k else 0.0
    cand = {"first": (first, edge_layers * chunks_first),
            "last": (last, edge_layers * inflight_last)}
    if k:
        cand["second"] = (middle, stage_layers * inflight_second)
    mem_of = {name: sum(states(n).values()) + per_layer * units
              + (logits if name == "last" or (name == "first" and p == 1) else 0.0)
              for name, (n, units) in cand.items()}
    worst = max(mem_of, key=lambda name: (mem_of[name], name == "first"))   # ties: the first stage
    st = states(cand[worst][0])
    act = per_layer * cand[worst][1]

    al, be = ab_of[links["tp"]]
    tp_full = (tc.tp_comm_time_per_layer(t, b, s, h, al, be, recompute=recompute, sequence_parallel=True)
               * stage_layers * m) if t > 1 else 0.0
    tp_s = tp_full * (1 - assume.tp_overlap)                # what compute does not hide
    al, be = ab_of[links["pp"]]
    pp_s = (2 * m * v * (al + b * s * h * tc.E_16BIT / t * be)) if p > 1 else 0.0
    al, be = ab_of[links["dp"]]
    shard = max(first, last, middle)
    if d == 1:
        dp_s = 0.0
    elif zero_stage == 0:                                   # plain DP: all-reduce the gradients
        dp_s = float(ab.ring_allreduce_time(d, assume.grad_bytes * shard, al, be))
    else:   # ZeRO ≥ 1: reduce-scatter the gradients, all-gather the updated 16-bit parameters (a ring
            # reduce-scatter costs what a ring all-gather of the same S costs: (d−1)α + (d−1)/d·Sβ)
        dp_s = float(tc.ring_allgather_time(d, assume.grad_bytes * shard, al, be)
                     + tc.ring_allgather_time(d, zm.PARAM_BYTES * shard, al, be))
        if zero_stage == 3:                                 # resharded after forward: gathered again for the backward
            dp_s += float(tc.ring_allgather_time(d, zm.PARAM_BYTES * shard, al, be))

    extra = 1 / 3 if recompute == "full" else 0.0           # full recompute re-runs the forward (1/3)
    rate = t * cluster.flops * mfu_at(cluster, model, t, assume)
    head = 3.0 * 2 * b * s * h * V if embed else 0.0        # LM head forward + backward, last stage
    lf = layer_flops(model, b, assume) * (1 + extra)
    if p == 1:
        stage_flops = lf * stage_layers + head
    else:                                                   # the slower of a middle stage and the last (+ LM head)
        stage_flops = max(lf * stage_layers, lf * edge_layers + head)
    compute_s = stage_flops / rate * m                      # the slowest stage sets the pipeline's pace
    bubble = float(ps.interleaved_bubble_relative(p, m, v))
    # the pipeline's busy time (compute + exposed TP + P2P) stretched by the bubble; the DP reduction exposed
    step_s = (compute_s + tp_s + pp_s) * (1 + bubble) + dp_s
    mem = mem_of[worst]
    return {"d": d, "t": t, "p": p, "m": m, "links": links,
            "mem": {**st, "activations": act, "total": mem, "stage": worst},
            "comm_s": {"tp": float(tp_s), "tp_hidden": float(tp_full - tp_s), "pp": float(pp_s), "dp": float(dp_s)},
            "compute_s": float(compute_s), "bubble": bubble, "step_s": float(step_s),
            "fits": bool(mem <= cluster.mem_bytes),
            "tokens_per_s": batch.global_batch * s / step_s}
# --8<-- [end:evaluate]


def valid(model: Model, batch: Batch, d: int, t: int, p: int, assume: Assumptions) -> bool:
    """t divides the heads (and the KV heads), p the layers (or p ≤ L with uneven stages), d·b the batch;
    interleaving needs m divisible by p (Megatron) and v·p ≤ L."""
    kv = model.kv_heads or model.heads
    if model.heads % t or (assume.shapes and kv % t and t % kv):
        return False
    if (model.layers % p if not assume.uneven_stages else p > model.layers):
        return False
    if batch.global_batch % (d * batch.micro_batch):
        return False
    m = batch.global_batch // (d * batch.micro_batch)
    v = assume.interleave
    return v == 1 or p == 1 or (m % p == 0 and v * p <= model.layers)


def rejection(model: Model, batch: Batch, d: int, t: int, p: int, assume: Assumptions,
              max_t: int | None = None) -> str | None:
    """Why `plan` leaves the layout (d, t, p) out: the first rule of `valid` it breaks (t > max_t first), as a
    code, or None when `plan` keeps it. The codes: t_max, t_heads, t_kv, p_layers (p ∤ L, or p > L with uneven
    stages), batch (d·b ∤ B), interleave_m (v > 1: m not a multiple of p), interleave_layers (v·p > L)."""
    kv = model.kv_heads or model.heads
    if max_t is not None and t > max_t:
        return "t_max"
    if model.heads % t:
        return "t_heads"
    if assume.shapes and kv % t and t % kv:
        return "t_kv"
    if (model.layers % p if not assume.uneven_stages else p > model.layers):
        return "p_layers"
    if batch.global_batch % (d * batch.micro_batch):
        return "batch"
    m = batch.global_batch // (d * batch.micro_batch)
    v = assume.interleave
    if v > 1 and p > 1 and m % p:
        return "interleave_m"
    if v > 1 and p > 1 and v * p > model.layers:
        return "interleave_layers"
    return None


def dropped_pipeline_degrees(model: Model, cluster: Cluster, batch: Batch, max_t: int | None = None,
                             assume: Assumptions = Assumptions()) -> list[dict]:
    """The pipeline degrees p (divisors of N) for which `plan` keeps no layout at all, each with the reasons
    (`rejection` codes, sorted) its factorisations were left out for: only p_layers when p itself breaks the layer
    rule, t_max only when nothing else does. What the planner page says it dropped."""
    max_t = max_t or cluster.gpus_per_node
    by_p: dict[int, set] = {}
    kept: set[int] = set()
    for d, t, p in factorisations(cluster.gpus):
        why = rejection(model, batch, d, t, p, assume, max_t)
        if why is None:
            kept.add(p)
        else:
            by_p.setdefault(p, set()).add(why)
    def main(codes: set) -> list[str]:
        if "p_layers" in codes:       # p ∤ L rules out every (d, t): the one reason that belongs to p itself
            return ["p_layers"]
        return sorted(codes - {"t_max"} or codes)   # a t within the node would not save it either
    return [{"p": p, "reasons": main(by_p[p])} for p in sorted(by_p) if p not in kept]


# --8<-- [start:plan]
def plan(model: Model, cluster: Cluster, batch: Batch, zero_stage: int = 1,
         recompute: str = "selective", max_t: int | None = None, assume: Assumptions = Assumptions()) -> list[dict]:
    """Every valid layout (`valid`), feasible ones first, each group by estimated step time (fastest first);
    t ≤ max_t (default: the GPUs of one node)."""
    max_t = max_t or cluster.gpus_per_node
    rows = [evaluate(model, cluster, batch, d, t, p, zero_stage, recompute, assume)
            for d, t, p in factorisations(cluster.gpus)
            if t <= max_t and valid(model, batch, d, t, p, assume)]
    return sorted(rows, key=lambda r: (not r["fits"], r["step_s"]))
# --8<-- [end:plan]


def inputs_dict(model: Model, cluster: Cluster, batch: Batch, assume: Assumptions = Assumptions()) -> dict:
    return {"model": asdict(model), "cluster": asdict(cluster), "batch": asdict(batch), "assume": asdict(assume)}


# Presets used by Ch7-01 and the lab. Llama-2-70B (Touvron et al. 2023, Table 1 and the released config:
# 80 layers, h 8192, 64 heads with 8 key/value heads (GQA), SwiGLU FFN 28672, vocabulary 32000, 4K context,
# no dropout), on 8 nodes × 8 H100-80GB.
LLAMA70B = Model(layers=80, hidden=8192, heads=64, seq=4096, vocab=32000, psi=70e9,
                 ffn=28672, kv_heads=8, swiglu=True, dropout=False)
# mem_bytes: an assumed budget of 72e9 B, 84 % of the H100-80GB's 80 GiB (nvidia-smi: 81,559 MiB = 85.52e9 B),
# leaving ~16 % for the CUDA context, NCCL buffers and fragmentation.
# intra_bw: NVLink 4, 900 GB/s both directions -> 450e9 per direction; inter_bw: one 400 Gb/s NIC per GPU.
H100_64 = Cluster(gpus=64, gpus_per_node=8, mem_bytes=72e9, intra_bw=450e9, inter_bw=50e9)
BATCH_4M = Batch(global_batch=1024, micro_batch=1)   # 1024 × 4096 ≈ 4M tokens per step

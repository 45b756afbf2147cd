"""Ch6-04 Sequence Parallelism: the code the page runs and the tests import.

Reads gpu_runs/results/sp_activation_bench (DTensor TP vs TP+SP on t ranks: CPU processes with gloo, or
GPUs with NCCL, one results file per hardware and t) and compares it, per hardware, with Korthikanti 2022 Table 2 (snippets/common/activation_memory.py); long-context formulas
for context parallelism (ring attention) and DeepSpeed-Ulysses.
"""
from __future__ import annotations

from snippets import results
from snippets.common import activation_memory as am


# --8<-- [start:explain]
def explained_bytes(s, b, h, a, t, variant: str, *, gpu: bool = False) -> dict[str, float]:
    """Per-rank saved bytes of the DTensor layer, as a sum of named parts.

    paper     : Table 2 (m = 1): sbh(10 + 24/t + 5as/(ht))  or  (sbh/t)(34 + 5as/h)
    masks     : CPU dropout stores its noise in bf16 (m = 2): + (2sbh + as²b)/t-share, see Ch6-01
    ln_stats  : LayerNorm mean and rstd, 2 per token per LayerNorm (not in the paper)
    gathered  : TP+SP only — DTensor's column-parallel linear saves its all-gathered full input
                (2sbh) where Megatron saves the s/t shard and all-gathers again in backward:
                + 2 · 2sbh(1 − 1/t)
    """
    sp = variant == "tp_sp"
    m, stat = (1, 4) if gpu else (2, 2)
    paper = am.layer_bytes(s, b, h, a, t=t, sp=sp, mask_bytes=1)
    parts = {"paper": paper,
             "masks": am.layer_bytes(s, b, h, a, t=t, sp=sp, mask_bytes=m) - paper,
             "ln_stats": 2 * 2 * s * b * stat / (t if sp else 1),
             "gathered": 2 * 2 * s * b * h * (1 - 1 / t) if sp else 0.0}
    return parts
# --8<-- [end:explain]


def memory_rows(r: results.Result):
    p = r.params
    s, b, h, a, t = p["s"], p["b"], p["h"], p["a"], p["t"]
    gpu = r.hardware["kind"] == "gpu"
    rows = []
    for variant in ("tp", "tp_sp"):
        parts = explained_bytes(s, b, h, a, t, variant, gpu=gpu)
        measured = [x["saved_bytes"] for x in r.measurements[variant]]
        cuda = [x.get("cuda_allocated_after_forward") for x in r.measurements[variant]]  # None on CPU
        peak = [x.get("cuda_peak_forward") for x in r.measurements[variant]]  # None on CPU
        rows.append({"variant": variant, "t": t, "measured": measured, **parts, "explained": sum(parts.values()),
                     "cuda_after_forward": None if None in cuda else cuda,
                     "cuda_peak_forward": None if None in peak else peak})
    return rows


# --8<-- [start:traffic]
def ring_bytes_sent(op: str, input_bytes: float, t: int) -> float:
    """Bytes one rank sends in a ring implementation of op, given the op's input on that rank.

    all_reduce of S: 2(t−1)/t · S.  all_gather of an S/t shard: (t−1) · S/t.  reduce_scatter of S: (t−1)/t · S.
    """
    if op == "all_reduce":
        return 2 * (t - 1) / t * input_bytes
    if op == "all_gather_into_tensor":
        return (t - 1) * input_bytes
    if op == "reduce_scatter_tensor":
        return (t - 1) / t * input_bytes
    raise ValueError(op)
# --8<-- [end:traffic]


def comm_rows(r: results.Result):
    t = r.params["t"]
    rows = []
    for variant in ("tp", "tp_sp"):
        x = r.measurements[variant][0]
        for phase in ("forward", "backward"):
            calls = x[f"collective_bytes_{phase}"]
            sent = sum(ring_bytes_sent(op, c["input_bytes"], t) for op, c in calls.items())
            rows.append({"variant": variant, "phase": phase, "counts": x[f"comm_counts_{phase}"],
                         "calls": {op: c["calls"] for op, c in calls.items()},
                         "input_bytes": {op: c["input_bytes"] for op, c in calls.items()}, "ring_sent": sent})
    return rows


# --8<-- [start:longctx]
def long_context(s, b, h, a, c, *, L: int = 1) -> dict[str, dict[str, float]]:
    """Per-rank activation bytes of one layer and per-rank bytes sent per layer forward, c ranks on one sequence.

    FlashAttention is assumed everywhere (no as²b term; Ch6-01 exercise 3): layer ≈ 34sbh + 4asb.
    * TP+SP (t = c): (34sbh + 4asb)/c activations; 2 AG + 2 RS of 2sbh:  8(c−1)/c · sbh bytes.
    * Context parallel / ring attention: every rank keeps s/c tokens of every tensor: (34sbh + 4asb)/c;
      K and V chunks (2 · 2(s/c)bh bytes) travel c−1 ring steps: 4(c−1)sbh/c bytes; weights are whole.
    * DeepSpeed-Ulysses: s/c tokens, all-to-all to a/c heads for attention and back: 4 all-to-alls
      (Q, K, V, output) of 2(s/c)bh bytes, each sending (c−1)/c of it: 8(c−1)sbh/c² bytes; needs c | a.
    """
    act = (34 * s * b * h + 4 * a * s * b) / c
    return {
        "TP+SP (Megatron)": {"activation": act, "sent": 8 * (c - 1) / c * s * b * h, "weights": 1 / c},
        "context parallel (ring)": {"activation": act, "sent": 4 * (c - 1) * s * b * h / c, "weights": 1.0},
        "Ulysses (all-to-all)": {"activation": act, "sent": 8 * (c - 1) * s * b * h / c ** 2, "weights": 1.0},
    }
# --8<-- [end:longctx]

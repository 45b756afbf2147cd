"""Ch6-03 Selective Activation Recomputation (Korthikanti 2022 §5): code the page runs and the tests import."""
from __future__ import annotations

import torch

from snippets import results
from snippets.common import activation_memory as am
from snippets.common.gpt_block import make_block, one_thread
from snippets.common.saved_tensors import SavedTensorCounter


# --8<-- [start:flops]
def layer_matmul_flops(s: int, b: int, h: int) -> dict[str, float]:
    """Forward matmul FLOPs of one GPT layer (2 FLOPs per multiply-add), by op.

    QKV 6bsh², QKᵀ 2bs²h, ·V 2bs²h, projection 2bsh², FC1 8bsh², FC2 8bsh²: 24bsh² + 4bs²h in all.
    The backward does two matmuls for each forward one, so forward + backward = 3 × forward.
    """
    return {"QKV": 6 * b * s * h * h, "QK^T": 2 * b * s * s * h, "·V": 2 * b * s * s * h,
            "proj": 2 * b * s * h * h, "FC1": 8 * b * s * h * h, "FC2": 8 * b * s * h * h}


def recompute_overhead(s: int, h: int, recomputed: str) -> float:
    """Extra matmul FLOPs / (forward + backward) for one layer.

    'core'   : QKᵀ and ·V rerun:          4bs²h / (72bsh² + 12bs²h) = (s/18h) / (1 + s/6h)
    'qk'     : only QKᵀ reruns (PyTorch's early stop, see the page): half of that
    'full'   : the whole forward reruns:  1/3
    'paper'  : Korthikanti's Eq. 8 without the logits term, (1 + s/3h)/(1 + s/6h) − 1 (see paper_eq8_overhead)
    """
    base = 72 * s * h * h + 12 * s * s * h  # per b: fwd + bwd
    if recomputed == "core":
        return 4 * s * s * h / base
    if recomputed == "qk":
        return 2 * s * s * h / base
    if recomputed == "full":
        return (24 * s * h * h + 4 * s * s * h) / base
    if recomputed == "paper":
        return paper_eq8_overhead(s, h)
    raise ValueError(recomputed)


def paper_eq8_overhead(s: int, h: int, v: int = 0, L: int = 1) -> float:
    """Korthikanti et al. App. A: Eq. 8, 72BLsh²(1 + s/3h + v/12hL) with selective recompute, over the same
    count without recomputation, 72BLsh²(1 + s/6h + v/12hL). Going from s/6h to s/3h adds 12Bs²hL: a whole
    forward + backward of QKᵀ and ·V, although the appendix's own text says selective recompute needs only an
    additional forward of them (4Bs²hL per layer, recompute_overhead(..., 'core')). v = 0 drops the logits term.
    """
    logits = v / (12 * h * L)
    return (1 + s / (3 * h) + logits) / (1 + s / (6 * h) + logits) - 1


def counted_core_ratios(s: int = 32, h: int = 192, a: int = 4, b: int = 1) -> dict[str, float]:
    """An independent count: torch.utils.flop_counter on our block's forward + backward, on the attention core's
    forward alone, and on the core's forward + backward. Matmul FLOPs per sequence are 24sh² + 4s²h terms only,
    so the ratios depend on s/h alone: the default s/h = 1/6 is GPT-3's (2048/12288)."""
    from torch.utils.flop_counter import FlopCounterMode

    blk = make_block(h, a)
    x = torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True)
    qkv = torch.randn(s, b, 3 * h, dtype=torch.bfloat16, requires_grad=True)
    with one_thread():
        with FlopCounterMode(display=False) as layer:
            blk(x).float().sum().backward()
        with FlopCounterMode(display=False) as core_fwd, torch.no_grad():
            blk.core_attention(qkv)
        with FlopCounterMode(display=False) as core_fwd_bwd:
            blk.core_attention(qkv).float().sum().backward()
    base = layer.get_total_flops()
    return {"s_over_h": s / h, "core_forward": core_fwd.get_total_flops() / base,
            "core_forward_backward": core_fwd_bwd.get_total_flops() / base}
# --8<-- [end:flops]


# --8<-- [start:core]
def core_bytes(s: int, b: int, h: int, a: int):
    """Bytes the core attention saves by itself, and those the whole layer saves (one CPU bf16 block).

    Selective recomputation keeps the core's input (the QKV output, already saved by the layer for
    the QKᵀ and ·V matmuls) and drops everything else the core saves."""
    blk = make_block(h, a)
    x = torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True)
    with one_thread():
        qkv = blk.qkv(blk.ln1(x))
        with SavedTensorCounter(blk, exclude=(qkv,)) as core:
            blk.core_attention(qkv)
        with SavedTensorCounter(blk) as layer:
            blk(x)
    return core.total_bytes, layer.total_bytes
# --8<-- [end:core]


def measured_modes(r: results.Result):
    """The checkpoint_bench modes the page compares, with the model's bytes and FLOPs beside them."""
    p = r.params
    L, s, b, h, a = p["layers"], p["s"], p["b"], p["h"], p["a"]
    gpu = r.hardware["kind"] == "gpu"
    mask, stat = (1, 4) if gpu else (2, 2)
    A = am.closed_form(s, b, h, a, mask_bytes=mask) + 4 * s * b * stat
    core = (4 + mask) * a * s * s * b
    fwd = sum(layer_matmul_flops(s, b, h).values())
    want_bytes = {"none": L * A, "selective": L * (A - core), "ln": L * (A - 4 * s * b * stat),
                  f"segments={L}": L * 2 * s * b * h}
    want_flops = {"none": 3 * L * fwd, "selective": 3 * L * fwd + L * 2 * b * s * s * h, "ln": 3 * L * fwd,
                  f"segments={L}": 4 * L * fwd}
    rows = []
    for m in r.measurements["modes"]:
        if m["mode"] in want_bytes:
            rows.append({**m, "model_bytes": want_bytes[m["mode"]], "model_flops": want_flops[m["mode"]]})
    return rows, A, core


GPT3_VOCAB = 51200  # Megatron's padded GPT-2 BPE vocabulary (50,257 → 51,200); 530B: h = 20480, L = 105


def gpt3_tradeoff(t: int = 8):
    """Korthikanti's GPT-3 numbers: activation saving of selective recompute and its FLOP cost."""
    g = am.GPT3
    s, h, a = g["s"], g["h"], g["a"]
    return {
        "saving_no_tp": 1 - am.layer_bytes(s, 1, h, a, recompute="selective") / am.layer_bytes(s, 1, h, a),
        "saving_tp_sp": 1 - am.tensor_sequence_parallel_selective(s, 1, h, a, t) / am.tensor_sequence_parallel(s, 1, h, a, t),
        "saving_tp": 1 - am.tensor_parallel_selective(s, 1, h, a, t) / am.tensor_parallel(s, 1, h, a, t),
        "tp_over_sp_sel": am.tensor_parallel(s, 1, h, a, t) / am.tensor_sequence_parallel_selective(s, 1, h, a, t),
        "paper": recompute_overhead(s, h, "paper"), "core": recompute_overhead(s, h, "core"),
        "qk": recompute_overhead(s, h, "qk"), "full": recompute_overhead(s, h, "full"),
        "paper_v": paper_eq8_overhead(s, h, v=GPT3_VOCAB, L=g["L"]),
        "paper_530b": paper_eq8_overhead(2048, 20480, v=GPT3_VOCAB, L=105),
    }

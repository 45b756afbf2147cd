"""Activation memory of one GPT transformer layer, term by term (Korthikanti et al. 2022).

Source: V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(MLSys 2023, arXiv:2205.05198), §4.1 (the per-layer derivation), §4.2 (tensor and sequence
parallelism), §5 (selective recomputation) and Table 2 (the six closed forms). Shared by Ch6,
Ch3-05, Ch7's planner and the tests; nobody re-derives these numbers elsewhere.

Symbols (docs/notation.md): s sequence length, b micro-batch size, h hidden size, a attention
heads, t tensor-parallel degree, L layers. Results are bytes per layer per rank.

The paper assumes 16-bit activations (``act_bytes = 2``) and 1-byte dropout masks
(``mask_bytes = 1``). Both are parameters here, because what a framework really stores differs:
PyTorch's CUDA dropout (``native_dropout``) saves a bool mask (1 B), but its CPU path
(aten/src/ATen/native/Dropout.cpp, ``_dropout_impl``) multiplies by a noise tensor of the
activation dtype and saves that (2 B in bf16). With ``mask_bytes = 2`` the layer costs
sbh(36 + 6as/h) instead of sbh(34 + 5as/h).
"""
from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
GIB = 2 ** 30


# --8<-- [start:terms]
@dataclass(frozen=True)
class Term:
    """One tensor the backward pass needs, as Korthikanti §4.1 lists it.

    size = coef · sbh  (kind "sbh")  or  coef · as²b  (kind "as2b"), in units of *elements*;
    bytes = size · (act_bytes, or mask_bytes for a dropout mask).
    tp_sharded: split over t by Megatron tensor parallelism (inside the column/row linears).
    With sequence parallelism (``sp=True`` below) every term is split over t (§4.2.2).
    core_attention: dropped by selective recomputation (§5: QKᵀ, softmax, dropout, ·V).
    """
    name: str
    block: str          # "attention" | "mlp" | "layernorm"
    kind: str           # "sbh" | "as2b"
    coef: int
    mask: bool = False
    tp_sharded: bool = True
    core_attention: bool = False


TERMS: tuple[Term, ...] = (
    # LayerNorm (§4.1: "each layer norm stores its input with size 2sbh")
    Term("LN1 input", "layernorm", "sbh", 1, tp_sharded=False),
    Term("LN2 input", "layernorm", "sbh", 1, tp_sharded=False),
    # Attention block: 11sbh + 5as²b
    Term("QKV linear input (LN1 output)", "attention", "sbh", 1, tp_sharded=False),
    Term("Q (QKᵀ input)", "attention", "sbh", 1),
    Term("K (QKᵀ input)", "attention", "sbh", 1),
    Term("softmax output", "attention", "as2b", 1, core_attention=True),
    Term("attention dropout mask", "attention", "as2b", 1, mask=True, core_attention=True),
    Term("attention dropout output (·V input)", "attention", "as2b", 1, core_attention=True),
    Term("V (·V input)", "attention", "sbh", 1),
    Term("output projection input", "attention", "sbh", 1),
    Term("attention-out dropout mask", "attention", "sbh", 1, mask=True, tp_sharded=False),
    # MLP block: 19sbh
    Term("fc1 input (LN2 output)", "mlp", "sbh", 1, tp_sharded=False),
    Term("GeLU input (fc1 output)", "mlp", "sbh", 4),
    Term("fc2 input (GeLU output)", "mlp", "sbh", 4),
    Term("MLP dropout mask", "mlp", "sbh", 1, mask=True, tp_sharded=False),
)


def term_bytes(term: Term, s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False,
               act_bytes: int = 2, mask_bytes: int = 1) -> float:
    """Bytes of one term on one rank. With sp=True every term is sharded over t (§4.2.2)."""
    elems = term.coef * (s * b * h if term.kind == "sbh" else a * s * s * b)
    width = mask_bytes if term.mask else act_bytes
    shard = t if (sp or term.tp_sharded) else 1
    return elems * width / shard


def layer_terms(s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False, recompute: str = "none",
                act_bytes: int = 2, mask_bytes: int = 1) -> dict[str, float]:
    """Every stored tensor of one layer and its bytes on one rank (recompute: none | selective | full)."""
    if recompute == "full":  # only the layer input is kept (§5, Table 2: 2sbh)
        return {"layer input (checkpoint)": act_bytes * s * b * h}
    if recompute not in ("none", "selective"):
        raise ValueError(f"recompute must be 'none', 'selective' or 'full', not {recompute!r}")
    return {x.name: term_bytes(x, s, b, h, a, t=t, sp=sp, act_bytes=act_bytes, mask_bytes=mask_bytes)
            for x in TERMS if not (recompute == "selective" and x.core_attention)}


def layer_bytes(s: int, b: int, h: int, a: int, *, t: int = 1, sp: bool = False, recompute: str = "none",
                act_bytes: int = 2, mask_bytes: int = 1) -> float:
    """Activation bytes of one transformer layer on one rank: the sum of layer_terms."""
    return sum(layer_terms(s, b, h, a, t=t, sp=sp, recompute=recompute,
                           act_bytes=act_bytes, mask_bytes=mask_bytes).values())
# --8<-- [end:terms]


# --8<-- [start:table2]
# Korthikanti 2022, Table 2 (16-bit activations, 1-byte masks), written as the paper prints them.
def no_parallel(s, b, h, a):
    """sbh(34 + 5as/h)."""
    return s * b * h * (34 + 5 * a * s / h)


def tensor_parallel(s, b, h, a, t):
    """sbh(10 + 24/t + 5as/(ht))."""
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def tensor_sequence_parallel(s, b, h, a, t):
    """(sbh/t)(34 + 5as/h)."""
    return s * b * h / t * (34 + 5 * a * s / h)


def tensor_parallel_selective(s, b, h, a, t):
    """sbh(10 + 24/t)."""
    return s * b * h * (10 + 24 / t)


def tensor_sequence_parallel_selective(s, b, h, a, t):
    """34 sbh / t."""
    return 34 * s * b * h / t


def full_recompute(s, b, h):
    """2sbh: only the layer's input is stored."""
    return 2 * s * b * h
# --8<-- [end:table2]


# --8<-- [start:general]
def closed_form(s, b, h, a, *, mask_bytes: int = 1):
    """No-TP layer bytes for any dropout-mask width m: sbh(32 + 2m) + as²b(4 + m).

    m = 1 gives Table 2's sbh(34 + 5as/h); m = 2 (PyTorch's CPU dropout in bf16) gives sbh(36 + 6as/h).
    """
    m = mask_bytes
    return s * b * h * (32 + 2 * m) + a * s * s * b * (4 + m)


def s2_share(s, b, h, a, *, mask_bytes: int = 1) -> float:
    """Fraction of the layer's bytes in the attention-score (as²b) terms: 5as/h / (34 + 5as/h) for m = 1."""
    m = mask_bytes
    return a * s * s * b * (4 + m) / closed_form(s, b, h, a, mask_bytes=m)


def batch_for_total(total_bytes: float, s, h, a, layers: int) -> float:
    """The micro-batch b at which L·sbh(34 + 5as/h) reaches total_bytes (the bytes are linear in b)."""
    return total_bytes / (layers * no_parallel(s, 1, h, a))


def sp_traffic_elements(s, b, h, t) -> dict[str, float]:
    """Per-rank elements sent per layer-forward by the ring collectives (§4.2.2).

    TP: 2 all-reduces of an sbh tensor (after the attention and MLP row-parallel linears).
    TP+SP: 2 all-gathers + 2 reduce-scatters of the same tensor. Ring all-reduce sends
    2(t−1)/t · sbh; all-gather and reduce-scatter each send (t−1)/t · sbh.
    """
    x = s * b * h
    return {"tp_allreduce": 2 * 2 * (t - 1) / t * x,
            "sp_allgather": 2 * (t - 1) / t * x,
            "sp_reducescatter": 2 * (t - 1) / t * x}
# --8<-- [end:general]


# GPT-3 175B (Brown et al. 2020, Table 2.1; Korthikanti Table 3): 96 layers, h = 12288, 96 heads, s = 2048.
GPT3 = {"L": 96, "h": 12288, "a": 96, "s": 2048, "params": 175e9}

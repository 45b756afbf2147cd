"""A GPT transformer layer written so that autograd saves exactly what Korthikanti §4.1 lists.

Shared by the Ch6 pages, the lab, the tests and gpu_runs/sp_activation_bench.py. Megatron's
layout: activations are [s, b, h] (sequence first), and the QKV projection's output is laid out
per head as [a, 3·d] (d = h/a), so a column-parallel split of ``qkv`` gives each rank whole heads
and Q, K, V stay *views* of one [s, b, 3h] storage (2sbh + 2sbh + 2sbh bytes, counted once).

What each op saves for backward (PyTorch 2.x, read from the autograd nodes' ``_saved_*``):
  LayerNorm: its input (+ per-token mean and rstd, fp32: 8 bytes per token, not in the paper)
  Linear:    its input (the weight is a parameter)
  bmm, baddbmm: both matrix operands            softmax: its output           GeLU: its input
  dropout:   the mask (CUDA ``native_dropout``: bool, 1 B) or the scaled noise tensor
             (CPU/meta ``_dropout_impl``: activation dtype, 2 B in bf16)
  baddbmm's α (1/√d) and β·bias (the causal mask), residual adds, views: nothing.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


# --8<-- [start:block]
class GPTBlock(nn.Module):
    """Pre-LN GPT layer: x + Drop(Proj(Attn(LN1 x))), then x + Drop(FC2(GeLU(FC1(LN2 x))))."""

    def __init__(self, h: int, a: int, p_drop: float = 0.1, causal: bool = True):
        super().__init__()
        assert h % a == 0, "h must be divisible by a"
        self.h, self.a, self.d, self.causal = h, a, h // a, causal
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)             # output laid out per head: [a, 3d]
        self.attn_drop = nn.Dropout(p_drop)        # on the attention probabilities (as²b)
        self.proj = nn.Linear(h, h)
        self.proj_drop = nn.Dropout(p_drop)        # after the output projection (sbh)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)
        self.mlp_drop = nn.Dropout(p_drop)
        self.recompute = "none"                    # Ch6-03: "core" (Megatron's selective) or "ln"

    def core_attention(self, qkv: torch.Tensor) -> torch.Tensor:
        """softmax(QKᵀ/√d + causal) · V on [s, b, 3h_local] → [s, b, h_local] (the 5as²b part)."""
        s, b, three_h = qkv.shape
        heads = three_h // (3 * self.d)                   # a/t heads on a tensor-parallel rank
        x = qkv.view(s, b * heads, 3 * self.d)            # views: nothing is copied
        q, k, v = x[..., :self.d], x[..., self.d:2 * self.d], x[..., 2 * self.d:]
        bias = causal_bias(s, qkv.dtype, qkv.device)      # baddbmm as Megatron: β·bias + α·QKᵀ
        scores = torch.baddbmm(bias, q.transpose(0, 1), k.permute(1, 2, 0),
                               beta=1.0 if self.causal else 0.0, alpha=1.0 / math.sqrt(self.d))
        probs = self.attn_drop(torch.softmax(scores, dim=-1))
        ctx = torch.bmm(probs, v.transpose(0, 1))         # [b·heads, s, d]
        return ctx.transpose(0, 1).reshape(s, b, heads * self.d)

    def _maybe(self, what: str, fn, x):
        """Run fn(x), or under a non-reentrant checkpoint when this block recomputes ``what``."""
        return checkpoint(fn, x, use_reentrant=False) if self.recompute == what else fn(x)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(self._maybe("ln", self.ln1, x))
        ctx = self._maybe("core", self.core_attention, qkv)  # selective: keep only the core's input, QKV
        return self.proj_drop(self.proj(ctx))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp_drop(self.fc2(F.gelu(self.fc1(self._maybe("ln", self.ln2, x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x)
        return x + self.mlp(x)
# --8<-- [end:block]


_BIAS: dict = {}


def causal_bias(s: int, dtype, device) -> torch.Tensor:
    """[s, s] additive mask (0 on and below the diagonal, −inf above); adding it saves nothing."""
    key = (s, dtype, str(device))
    if key not in _BIAS:
        _BIAS[key] = torch.full((s, s), float("-inf"), dtype=dtype, device=device).triu(1)
    return _BIAS[key]


def make_block(h: int, a: int, *, dtype=torch.bfloat16, device="cpu", p_drop: float = 0.1, seed: int = 0,
               causal: bool = True) -> GPTBlock:
    """A block with deterministic weights, built directly in ``dtype`` on ``device`` (meta allowed)."""
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return GPTBlock(h, a, p_drop, causal)
    finally:
        torch.set_default_dtype(old)


def block_params(h: int) -> int:
    """Parameters of one GPTBlock: 12h² + 13h (4 linears with biases, 2 LayerNorms)."""
    return 12 * h * h + 13 * h


def make_stack(layers: int, h: int, a: int, *, dtype=torch.bfloat16, device="cpu", p_drop: float = 0.1,
               seed: int = 0) -> nn.ModuleList:
    """``layers`` GPTBlocks with deterministic weights (the stack Ch6-02/03 checkpoint)."""
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return nn.ModuleList(GPTBlock(h, a, p_drop) for _ in range(layers))
    finally:
        torch.set_default_dtype(old)


# --8<-- [start:segments]
def forward_stack(blocks, x: torch.Tensor, segments: int = 0, recompute: str = "none") -> torch.Tensor:
    """Run the stack. segments = 0: store everything; segments = k: split the L blocks into k consecutive
    segments of ⌈L/k⌉ blocks and checkpoint each (non-reentrant): only each segment's input is kept and
    the segment's forward is rerun during backward. segments = L is per-block checkpointing.
    recompute="core": every block recomputes only its core attention (Megatron's selective recompute,
    Ch6-03); recompute="ln": only its two LayerNorms."""
    for blk in blocks:
        blk.recompute = recompute
    if segments == 0:
        for blk in blocks:
            x = blk(x)
        return x
    per = -(-len(blocks) // segments)
    for i in range(0, len(blocks), per):
        x = checkpoint(_run_segment, blocks[i:i + per], x, use_reentrant=False)
    return x


def _run_segment(seg, x):
    for blk in seg:
        x = blk(x)
    return x
# --8<-- [end:segments]


@contextlib.contextmanager
def one_thread():
    """Run tiny tensors on one intra-op thread (restored afterwards): on a busy 2-core machine a
    thread pool makes each small op wait for the scheduler, and the numbers we count do not change."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)

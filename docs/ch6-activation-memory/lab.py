# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 6 실습: autograd 가 저장하는 bytes 를 세고, checkpoint 로 줄이기
#
# 이 노트북은 노트북 PC 의 CPU 에서 1 분 안에 돕니다. GPU 도 분산 process 도 필요 없습니다.
#
# 1. `torch.autograd.graph.saved_tensors_hooks` 로 **직접 pack hook 을 써서** GPT layer 하나가 backward 를 위해 저장하는
#    tensor 를 모두 봅니다. 같은 storage 는 한 번만, 파라미터는 빼고 셉니다.
# 2. 그 합을 Korthikanti 의 식 $sbh(34 + 5as/h)$ 와 비교하고, 차이 (CPU 의 2-byte dropout mask, LayerNorm 통계량) 를 항 단위로
#    설명합니다 ([Ch6-01](../01-activation-size/)).
# 3. Layer 4 개를 쌓아 **checkpoint 를 걸고** (block 단위, selective) forward 뒤에 살아 있는 activation bytes 가 어떻게 떨어지는지
#    PyTorch 의 `MemTracker` 로 봅니다 ([Ch6-02](../02-gradient-checkpointing/), [Ch6-03](../03-selective-recompute/)).
# 4. 재계산이 근사가 아니라는 것, 즉 gradient 가 bit 단위로 같다는 것을 확인합니다.
#
# 측정하는 layer 는 책의 다른 문서와 같은 `snippets/common/gpt_block.py`, 공식은 `snippets/common/activation_memory.py` 입니다.

# %%
import torch

from snippets.common import activation_memory as am
from snippets.common.gpt_block import forward_stack, make_block, make_stack

torch.set_num_threads(1)  # tiny tensors: one thread is fastest and the counts do not depend on it
s, b, h, a = 128, 2, 64, 4
print("torch", torch.__version__, f"| s={s} b={b} h={h} a={a} | bf16, dropout p=0.1")

# %% [markdown]
# ## 1. Pack hook 을 직접 써서 세기
#
# Autograd 는 forward 중에 backward 에 필요한 tensor 를 node 에 저장합니다. `saved_tensors_hooks(pack, unpack)` 안에서는
# 저장할 때마다 `pack(tensor)` 가 불립니다. 우리는 tensor 를 그대로 돌려주고, 그 storage 의 크기만 적어 둡니다.
# `untyped_storage()._cdata` 는 storage 의 주소라서 같은 storage 의 view ($Q, K, V$ 처럼) 를 한 번만 세게 해 줍니다.

# %%
block = make_block(h, a)
params = {p.untyped_storage()._cdata for p in block.parameters()}
seen = {}


def pack(t):
    key = t.untyped_storage()._cdata
    if key not in params:
        seen.setdefault(key, (t.untyped_storage().nbytes(), str(t.dtype).replace("torch.", ""), tuple(t.shape)))
    return t


x = torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    y = block(x)

total = sum(v[0] for v in seen.values())
print(f"서로 다른 storage {len(seen)} 개, 합 {total:,} bytes")
for nbytes, dtype, shape in sorted(seen.values(), reverse=True):
    print(f"  {nbytes:>9,} B  {dtype:<9} {shape}")

# %% [markdown]
# ## 2. 식과 비교
#
# 논문의 식은 dropout mask 를 1 byte 로 셉니다 ($\delta = 1$). CPU 의 dropout 은 activation 과 같은 dtype (bf16, 2 bytes) 의 noise
# tensor 를 저장하므로 $\delta = 2$ 이고, 식은 $sbh(36 + 6as/h)$ 가 됩니다. 그 밖에 LayerNorm 두 개가 token 마다 평균과 rstd 를
# 저장합니다 ($4sb$ 원소, CPU 에서 bf16).

# %%
paper = am.no_parallel(s, b, h, a)
m2 = am.closed_form(s, b, h, a, mask_bytes=2)
ln_stats = 2 * 2 * s * b * 2
print(f"논문 sbh(34 + 5as/h)            = {paper:>12,.0f} B")
print(f"δ = 2: sbh(36 + 6as/h)          = {m2:>12,} B")
print(f"+ LayerNorm 통계량 4sb × 2 B     = {m2 + ln_stats:>12,} B")
print(f"측정                            = {total:>12,} B  → 설명된 차이 0: {total == m2 + ln_stats}")
assert total == m2 + ln_stats

# %% [markdown]
# 위 목록에서 가장 큰 세 항목 $[b\,a, s, s]$ 가 attention score 관련 tensor (softmax 출력, dropout noise, dropout 출력) 입니다.
# $as/h$ 가 커질수록 이들이 전체를 지배합니다. 다음 셀에서 $s$ 만 바꿔 그 몫을 봅니다.

# %%
for s_ in (32, 128, 512):
    print(f"s = {s_:>4}: score 항의 몫 (δ = 2) {am.s2_share(s_, b, h, a, mask_bytes=2):.1%}")

# %% [markdown]
# ## 3. Checkpoint 를 걸면: forward 뒤 activation 이 떨어지는 것을 보기
#
# Checkpoint 안의 tensor 는 pack hook 을 통해 "자리표" 로 바뀌므로, 위의 pack hook 으로는 checkpoint 가 저장하지 *않은* 것을 볼
# 수 없습니다. 그래서 여기서는 살아 있는 tensor 를 모두 따라가는 PyTorch 의 `MemTracker` 를 씁니다. 그 ACT 항목이 forward 에서
# 만들어져 아직 살아 있는 bytes 입니다.

# %%
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

L = 4
results = {}
for name, segments, recompute in [("저장", 0, "none"), ("block 단위 checkpoint", L, "none"), ("selective (core)", 0, "core")]:
    blocks = make_stack(L, h, a)
    xs = torch.randn(s, b, h, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(1)).requires_grad_()
    mt = MemTracker()
    mt.track_external(blocks, xs)
    torch.manual_seed(7)
    with mt:
        out = forward_stack(blocks, xs, segments, recompute)
        act = sum(d[_MemRefType.ACT] for d in mt.get_tracker_snapshot("current").values())
        out.float().sum().backward()
    results[name] = (act, [p.grad.clone() for p in blocks.parameters()])
    print(f"{name:<22}: forward 뒤 activation {act:>10,} B")

A = m2 + ln_stats
c = 2 * s * b * h
print(f"\n식: 저장 L·A = {L * A:,}, block 단위 L·c = {L * c:,}, selective L·(A − 6as²b) = {L * (A - 6 * a * s * s * b):,}")

# %% [markdown]
# 세 값이 식과 맞는지 확인합니다. (첫 forward 에서 causal mask 가 만들어지면 그 $s \times s$ tensor 도 ACT 로 잡히므로, 위 셀은
# 첫 모드 전에 이미 1 절에서 mask 를 만들어 두었습니다.)

# %%
acts = [v[0] for v in results.values()]
print("저장 == L·A:", acts[0] == L * A, "| block 단위 == L·c:", acts[1] == L * c,
      "| selective == L·(A − 6as²b):", acts[2] == L * (A - 6 * a * s * s * b))
assert acts == [L * A, L * c, L * (A - 6 * a * s * s * b)]

# %% [markdown]
# ## 4. 재계산은 근사가 아니다
#
# `torch.utils.checkpoint` (non-reentrant) 는 재계산할 때 forward 때의 RNG 상태를 되돌립니다. 그래서 dropout 이 있어도 gradient
# 가 bit 단위로 같습니다.

# %%
ref = results["저장"][1]
for name, (_, grads) in results.items():
    print(f"{name:<22}: gradient 가 bit 단위로 같은가 {all(torch.equal(g, r) for g, r in zip(grads, ref))}")
assert all(all(torch.equal(g, r) for g, r in zip(grads, ref)) for _, grads in results.values())

# %% [markdown]
# ## 해 볼 것
#
# - `make_block(h, a, p_drop=0.0)` 으로 dropout 을 끄면 저장 bytes 가 얼마나 줄어드는지 세어 보세요. (힌트: mask 두 종류가
#   사라질 뿐 아니라, dropout 출력이 softmax 출력과 같은 storage 가 됩니다.)
# - `forward_stack(blocks, xs, 2)` 처럼 segment 를 2 개로 하면 forward 뒤 activation 은 얼마가 되어야 하는지 식으로 먼저 쓰고 재 보세요.
# - `blk.recompute = "ln"` 으로 LayerNorm 만 재계산하면 얼마를 아끼는지 재 보세요 ([Ch6-03](../03-selective-recompute/) 실험 2).

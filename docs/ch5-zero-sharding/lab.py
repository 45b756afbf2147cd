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
# # Chapter 5 실습: Adam 을 손으로 shard 하고, FSDP2 와 비교하기
#
# 이 실습은 노트북 PC 의 CPU 에서도 돕니다. gloo backend 로 process 2 개를 띄워
#
# 1. **ZeRO-1 을 손으로** 구현합니다: bf16 파라미터와 gradient 는 모든 rank 가 갖고, fp32 master weight 와 Adam 의
#    μ, ν 는 rank 마다 1/N 씩만 갖습니다. gradient 는 `reduce_scatter_single` 로 합치되 각 rank 가 자기 조각의 합만 받고
#    ($N$ 으로 나눠 평균), 각 rank 는 자기 조각만 update 한 뒤 `all_gather_single` 로 모두에게 돌려줍니다. 코드를 짧게 하려고
#    두 collective 모두 fp32 로 합니다. ReduceScatter + AllGather 는 논문의 $2\psi$ 로, data parallel 의 AllReduce 와 같은
#    양입니다. DeepSpeed 0.19.8 의 기본 경로는 ReduceScatter 대신 AllReduce 를 써서 1.5 배를 보냅니다 (Ch5-02 의 정리 5.2.6).
#    두 함수는 torch 2.13 이 권하는 이름입니다: `all_gather_into_tensor` 와 `reduce_scatter_tensor` 는 이 버전에서
#    `FutureWarning` 과 함께 deprecated 로 표시되어 있습니다 (`torch/distributed/distributed_c10d.py`). 2 단계의 FSDP2 는
#    새 이름 (`all_gather_single`, `reduce_scatter_single`) 을 부르고, DeepSpeed 0.19.8 은 아직 옛 이름을 부릅니다
#    (`deepspeed/comm/torch.py`, ZeRO-1/2 step 뒤의 AllGather 는 `runtime/utils.py` 의 `all_gather_into_tensor_dp_groups`).
# 2. 같은 모델을 **FSDP2** (`torch.distributed.fsdp.fully_shard`) 로 학습합니다.
# 3. 두 경우의 rank 당 bytes 를 `snippets/common/zero_memory.py` 의 공식과 비교합니다.
#
# worker 함수는 새로 띄운 process 가 import 할 수 있도록 `snippets/ch5_zero_sharding/lab.py` 에 있습니다 (Linux 는 forkserver, macOS 는 spawn).
# 아래 셀들은 그 함수를 부르고 결과를 표로 만듭니다.

# %%
import torch
from snippets.ch5_zero_sharding import lab
from snippets.common.zero_memory import zero_memory_breakdown, zero_memory_bytes

WORLD = 2
print("torch", torch.__version__, "| model dims", lab.DIMS, "| steps", lab.STEPS, "| processes", WORLD)

# %% [markdown]
# ## 1. ZeRO-1 을 손으로
#
# 모델 전체의 fp32 값을 한 줄로 펴고 ($\psi$ 개), rank $r$ 은 그 $r$ 번째 $1/N$ 조각의 master weight 와 Adam state 만
# 만듭니다. 세 step 뒤, sharding 없이 한 process 에서 평균 gradient 로 Adam 을 돌린 결과와 파라미터 합이 같은지 봅니다.

# %%
manual = lab.run(lab.manual_zero1_worker, WORLD)
reference = lab.reference_checksum(WORLD)
psi = manual[0]["psi"]
print(f"psi = {psi:,} parameters")
for r, m in enumerate(manual):
    print(f"rank {r}: params {m['params']:,} B, grads {m['grads']:,} B, optimizer {m['optimizer']:,} B, "
          f"checksum {m['checksum']:.6f}")
print(f"unsharded Adam checksum {reference:.6f} -> same result: {all(m['checksum'] == reference for m in manual)}")

# %% [markdown]
# 공식 (ZeRO-1): 파라미터 $2\psi$, gradient $2\psi$, optimizer state $K\psi/N$ ($K = 12$: fp32 master 4 + m 4 + v 4).

# %%
want = zero_memory_breakdown(psi, WORLD, stage=1)
for key in ("params", "grads", "optimizer"):
    print(f"{key:>9}: measured {manual[0][key]:>10,} B | formula {want[key]:>12,.0f} B | equal: {manual[0][key] == want[key]}")

# %% [markdown]
# ## 2. 같은 모델을 FSDP2 로
#
# `fully_shard` 는 각 파라미터를 dim-0 으로 나눈 DTensor 로 바꿉니다. 여기서는 mixed precision 없이 fp32 로
# 두었으므로 sharded 파라미터 자체가 master weight 역할을 하고, gradient 도 fp32 shard 로 남습니다.

# %%
fsdp = lab.run(lab.fsdp2_worker, WORLD)
for r, m in enumerate(fsdp):
    print(f"rank {r}: params {m['params']:,} B, grads {m['grads']:,} B, optimizer (μ, ν) {m['optimizer']:,} B")

# %% [markdown]
# 16-bit 사본이 없으므로 항목별로는 ZeRO-3 표와 다르게 나뉩니다 (파라미터 $4\psi/N$, gradient $4\psi/N$, m·v
# $8\psi/N$). 그래도 합은 ZeRO-3 의 $(4+K)\psi/N = 16\psi/N$ 과 같습니다.

# %%
total = sum(fsdp[0][k] for k in ("params", "grads", "optimizer"))
print(f"FSDP2 per-rank total {total:,} B | ZeRO-3 formula (4+K)psi/N = {zero_memory_bytes(psi, WORLD, 3):,.0f} B "
      f"| equal: {total == zero_memory_bytes(psi, WORLD, 3)}")
print(f"ZeRO-1 by hand per-rank total {sum(manual[0][k] for k in ('params', 'grads', 'optimizer')):,} B "
      f"| formula 4psi + Kpsi/N = {zero_memory_bytes(psi, WORLD, 1):,.0f} B")

# %% [markdown]
# ## 더 해보기
#
# - `WORLD = 4` 로 바꾸면 (core 가 4 개 이상인 머신에서) optimizer state 가 다시 절반이 되는지 보세요.
# - `manual_zero1_worker` 의 `reduce_scatter_single` 을 전체 `all_reduce` 로 바꾸고 자기 조각을 잘라 쓰면 DeepSpeed 0.19.8 의
#   기본 경로와 같은 모양이 되어, ring 으로 환산한 통신이 data parallel 의 1.5 배가 됩니다. 반대로 지금 코드에서 backward 직후
#   받은 자기 조각만 남기고 모델의 전체 gradient 를 버리면 (`model.zero_grad(set_to_none=True)`) ZeRO-2 가 되어, rank 당 gradient
#   bytes 가 $2\psi/N$ 이 되어야 합니다.

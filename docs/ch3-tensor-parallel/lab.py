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
# # Chapter 3 실습: Megatron 의 f 연산자와 g 연산자를 손으로, 그리고 DTensor 와 비교하기
#
# 이 노트북은 노트북 PC 의 CPU 에서 돕니다. gloo backend 로 process 2 개를 띄워
#
# 1. Megatron 의 두 연산자 **$\mathsf{f}$** (forward 항등, backward AllReduce) 와 **$\mathsf{g}$** (forward AllReduce, backward 항등) 를
#    `torch.autograd.Function` 으로 `dist.all_reduce` 위에 직접 만듭니다 ([Ch3-02](../02-column-row-split/) 정의 3.2.3).
# 2. 그 둘로 **TP MLP 를 손으로** 짭니다: column-parallel `fc1` → GELU → row-parallel `fc2` ([Ch3-03](../03-megatron-mlp/)).
# 3. 결과를 **unsharded MLP** 와, 그리고 **DTensor** 의 `ColwiseParallel` / `RowwiseParallel` 로 나눈 같은 MLP 와 비교하고,
#    두 구현이 내는 collective 를 `CommDebugMode` 로 셉니다.
#
# worker 함수는 새로 띄운 process 가 import 할 수 있도록 `snippets/ch3_tensor_parallel/lab.py` 에 있습니다
# (Linux 는 forkserver, macOS 는 spawn). 아래 셀들은 그 함수를 부르고 결과를 표로 만듭니다.

# %%
import inspect

import torch
from snippets.ch3_tensor_parallel import lab

WORLD = 2
print("torch", torch.__version__, "| h =", lab.H, "| b, s =", (lab.B, lab.S), "| processes", WORLD)

# %% [markdown]
# ## 1. $\mathsf{f}$ 와 $\mathsf{g}$
#
# 둘 다 몇 줄입니다. $\mathsf{f}$ 의 backward 와 $\mathsf{g}$ 의 forward 가 같은 `dist.all_reduce` (합) 이고, 나머지 방향은 아무것도 하지 않습니다.

# %%
print(inspect.getsource(lab.CopyToTP))
print(inspect.getsource(lab.ReduceFromTP))

# %% [markdown]
# ## 2. 손으로 짠 TP MLP
#
# Rank $r$ 은 `fc1` 의 출력 feature $4h/t$ 개 (weight 의 행 블록) 와 `fc2` 의 같은 입력 feature (weight 의 열 블록) 를 갖습니다.
# `fc2` 의 bias 는 $\mathsf{g}$ 의 합 *뒤에* 한 번만 더합니다 (앞에서 더하면 $t$ 번 더해집니다).

# %%
print(inspect.getsource(lab.HandTPMLP))

# %% [markdown]
# ## 3. 두 process 에서 실행: unsharded MLP 와, DTensor 와

# %%
ranks = lab.run(lab.tp_mlp_worker, WORLD)
for r, m in enumerate(ranks):
    print(f"rank {r}: hand collectives {m['comm']['hand']} | DTensor collectives {m['comm']['dtensor']}")
    print(f"        hand vs unsharded max|diff| {max(m['hand_vs_ref'].values()):.1e} | "
          f"DTensor vs unsharded {max(m['dtensor_vs_ref'].values()):.1e} | hand vs DTensor {max(m['hand_vs_dtensor'].values()):.1e} "
          f"(bitwise: {m['hand_equals_dtensor_bitwise']})")
    print(f"        local fc1 weight: hand {m['local_shapes']['hand_w1']}, DTensor {m['local_shapes']['dtensor_fc1']}")

# %% [markdown]
# 읽는 법:
#
# - 손으로 짠 MLP 는 forward 와 backward 에 `allreduce_` (c10d 의 이름) 를 한 번씩, DTensor 는 `all_reduce` (functional collective
#   의 이름) 를 한 번씩 냅니다. 이름만 다르고 같은 $\mathsf{f}$, $\mathsf{g}$ 입니다 (정리 3.3.3).
# - 두 구현 모두 unsharded MLP 와 float32 반올림 수준에서 같습니다. 서로 비트 단위로 같지 않을 수 있는 것은 bias 를 더하는 자리와 부분합을
#   더하는 순서가 다르기 때문입니다 ([Ch3-02](../02-column-row-split/) 실험 4).
# - Rank 마다 갖는 `fc1` weight 의 shape 이 같습니다: DTensor 의 `ColwiseParallel` 은 weight 의 dim 0 (출력 feature) 을 나눕니다.

# %% [markdown]
# ## 더 해보기
#
# - `HandTPMLP.forward` 에서 `CopyToTP.apply` 를 지워 보세요. Output 은 그대로이지만 입력 gradient 가 rank 마다 **부분합** 이 되어
#   unsharded 와 달라집니다 ($\mathsf{f}$ 의 backward 가 하는 일).
# - `+ self.b2` 를 `ReduceFromTP.apply(...)` 안으로 옮겨 보세요. Output 이 bias 의 $(t-1)$ 배만큼 어긋납니다.
# - `xh = x.clone()` 으로 (requires_grad 없이) 바꾸면 backward 의 collective 가 사라집니다 ([Ch3-03](../03-megatron-mlp/) 실험 4).

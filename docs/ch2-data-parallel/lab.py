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
# # Chapter 2 실습: DDP 를 손으로 만들고, torch 의 DDP 와 bit 단위로 비교하기
#
# 이 실습은 노트북 PC 의 CPU 에서 돕니다. gloo backend 로 process 를 3 개 띄워, 한 process 안에서 같은 모델 네 벌을 나란히
# 학습합니다.
#
# 1. torch 의 `DistributedDataParallel` (bucket 상한 `bucket_cap_mb=0.02`, 약 21 KB).
# 2. **손으로 만든 DDP** (`HandDDP`): parameter 마다 `register_post_accumulate_grad_hook` 을 걸어, gradient 가 준비되면 자기 bucket
#    의 flat buffer 에 $1/N$ 을 곱해 복사하고, bucket 이 다 차면 `dist.all_reduce(..., async_op=True)` 를 bucket 순서로 던집니다.
#    Step 0 은 bucket 하나, step 1 부터는 step 0 에서 *관찰한* gradient 준비 순서로 bucket 을 다시 짭니다 (Ch2-03 의 정의 2.3.2).
# 3. 같은 것을 "합한 뒤 $N$ 으로 나누기" 로 바꾼 것.
# 4. 같은 것을 parameter 하나에 bucket 하나로 바꾼 것.
#
# 매 step 뒤 각 모델의 parameter 의 SHA-256 을 비교합니다. 네 모델은 rank 마다 다른 seed 로 만들지만, DDP 와 `HandDDP` 모두 rank 0
# 의 parameter 를 broadcast 하므로 같은 값에서 시작합니다.
#
# Worker 함수는 새로 띄운 process 가 import 할 수 있도록 `snippets/ch2_data_parallel/lab.py` 에 있습니다 (Linux 는 forkserver, macOS
# 는 spawn). 아래 셀들은 그 함수를 부르고 결과를 표로 만듭니다.

# %%
import torch
from snippets.ch2_data_parallel import lab

print("torch", torch.__version__, "| model: head, embed,", lab.LAYERS, f"× Linear({lab.D}, {lab.D}) | steps", lab.STEPS,
      "| bucket_cap_mb", lab.CAP_MB)

# %% [markdown]
# ## 1. 손으로 만든 Reducer
#
# 핵심은 세 가지입니다. (1) gradient 를 bucket 에 복사하면서 $1/N$ 을 곱한다 (DDP 의 Reducer 는 `mul_out` 으로 이렇게 합니다).
# (2) bucket 은 index 순서로만 AllReduce 를 시작한다. (3) 첫 step 뒤, 관찰한 준비 순서로 bucket 을 한 번 다시 짠다.

# %%
import inspect

print(inspect.getsource(lab.HandDDP))

# %% [markdown]
# ## 2. $N = 3$: torch 의 DDP 와 비교

# %%
VARIANTS = ["ddp/ddp", "sum_then_divide/ddp", "ddp/per_param"]
LABEL = {"ddp/ddp": "HandDDP: ×1/N 후 합, DDP 의 bucket",
         "sum_then_divide/ddp": "합한 뒤 ÷N, DDP 의 bucket",
         "ddp/per_param": "×1/N 후 합, parameter 마다 bucket"}


def report(res):
    r0 = res[0]
    print(f"rank 끼리 DDP 의 parameter 가 bit 단위로 같음 (모든 step): {all(r['ddp'] == r0['ddp'] for r in res)}")
    for k in VARIANTS:
        same = [a == b for a, b in zip(r0["ddp"], r0[k])]
        diffs = ", ".join(f"{v:.1e}" for v in r0["max_abs_diff"][k])
        print(f"{LABEL[k]:<34} torch DDP 와 bit 단위로 같은 step: {sum(same)}/{len(same)}   max|Δθ| per step: {diffs}")


three = lab.run(lab.compare_worker, 3)
report(three)
print("\nstep 1 부터의 bucket (HandDDP 가 관찰한 순서):")
for i, b in enumerate(three[0]["hand_buckets"]):
    print(f"  bucket {i}: {b}")

# %% [markdown]
# 순서를 그대로 재현한 `HandDDP` 는 torch 의 DDP 와 **모든 step 에서 bit 단위로 같습니다**. 나눗셈의 위치만 바꾸거나 (합한 뒤
# $\div 3$), bucket 의 배치만 바꿔도 (parameter 마다) bit 가 달라집니다. 차이는 fp32 의 반올림 크기입니다: 수학은 같고 순서만
# 다릅니다 (Ch2-01 의 정리 2.1.5).
#
# - $x \cdot \mathrm{fl}(1/3)$ 과 $x / 3$ 은 fp32 에서 다른 수일 수 있고, $(a + b + c)/3$ 과 $a/3 + b/3 + c/3$ 도 그렇습니다.
# - gloo 의 AllReduce 는 buffer 를 조각내 rank 들 사이에서 더하므로, 한 원소가 어느 조각에 있느냐 (곧 bucket 안의 위치) 에 따라
#   세 rank 의 값을 더하는 순서가 달라질 수 있습니다.
#
# ## 3. $N = 2$ 와 $N = 4$: 언제 순서가 상관없는가

# %%
for world in (2, 4):
    print(f"--- N = {world}")
    report(lab.run(lab.compare_worker, world))

# %% [markdown]
# - $N = 2$ 에서는 세 방식이 모두 torch 와 같습니다. $1/2$ 은 정확히 표현되어 $x \cdot \tfrac12$ 과 $x / 2$ 가 같은 수이고 (지수만
#   하나 줄어듭니다), 두 수의 덧셈은 교환법칙만으로 순서가 정해지기 때문입니다 ($a + b = b + a$ 는 부동소수점에서도 정확).
# - $N = 4$ 에서도 $1/4$ 은 2 의 거듭제곱이라 나눗셈의 위치는 상관없지만, 네 수의 합은 결합 순서가 여럿이므로 bucket 의 배치가
#   달라지면 bit 가 달라질 수 있습니다.
#
# 그래서 bit 단위의 재현은 "같은 $N$, 같은 collective 알고리즘, 같은 bucket 배치, 같은 나눗셈 위치" 가 모두 맞을 때만 기대할 수
# 있고, 어느 것이든 바뀌면 결과는 반올림 크기만큼 달라집니다. 그래도 **rank 끼리는** 언제나 같습니다: AllReduce 가 모든 rank 에
# 같은 bits 를 돌려주기 때문입니다.
#
# ## 4. 스스로 해 보기
#
# 1. `lab.CAP_MB` 를 바꾸면 `hand_buckets` 가 어떻게 바뀌는지 `snippets.common.ddp_buckets.assign_buckets` 로 먼저 예측하고 확인하세요.
# 2. `HandDDP._ready` 에서 `torch.mul(grad, 1.0 / n, out=view)` 를 `torch.div(grad, n, out=view)` 로 바꾸면 $N = 3$ 에서 torch 와
#    같은가요? ($x \cdot \mathrm{fl}(1/3)$ 과 $\mathrm{fl}(x/3)$ 는 같은 수인가요?)
# 3. Step 0 에서 bucket 을 다시 짜지 않으면 (layout 을 step 0 의 bucket 하나로 고정) 어느 step 부터 torch 와 달라지나요?

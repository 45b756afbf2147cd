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
# # Chapter 1 실습 — send/recv 로 만드는 Ring AllReduce
#
# 이 노트북은 [Ch1-03](../03-ring-allreduce/) 의 ring AllReduce 를 `torch.distributed` 의 point-to-point 연산
# (`dist.isend`, `dist.irecv`) 만으로 직접 만들고, 두 가지를 확인합니다.
#
# 1. **정확성**: 직접 만든 ring 의 결과가 `dist.all_reduce` 와 **비트 단위로 같은가** (정수 값만 쓰므로 float 합도 정확합니다).
# 2. **시간**: 두 구현의 시간을 메시지 크기별로 재고, [Ch1-05](../05-bandwidth-latency/) 의 α-β 모델로 읽습니다.
#
# 노트북 CPU 에서 gloo backend 로 process 2 개를 띄우며, 1 분 안쪽으로 끝납니다. Process 는 `torch.multiprocessing` 으로
# 띄웁니다 (Linux 는 forkserver: torch 를 한 번 import 한 process 에서 fork 합니다. macOS 는 spawn). 두 방식 모두 새 process 가
# 함수를 import 해서 실행하므로, 각 process 가 실행할 함수는 노트북이 아니라 import 할 수 있는 모듈 `snippets/ch1_collective/lab.py` 에 있습니다. Process 들은 임시 디렉터리의 파일 (`file://` init method) 로 서로를 찾으므로
# 포트를 고를 필요가 없습니다.

# %%
import inspect
import pathlib
import sys

# 저장소 루트 (snippets/ 가 있는 곳) 를 import 경로에 넣습니다: 노트북이 어느 디렉터리에서 실행되든 동작합니다.
here = pathlib.Path.cwd().resolve()
root = next((p for p in [here, *here.parents] if (p / "snippets" / "ch1_collective").is_dir()), None)
if root is None:
    raise RuntimeError("이 노트북은 저장소 안에서 실행해야 합니다 (snippets/ch1_collective/lab.py 를 import 합니다): "
                       "저장소를 clone 한 뒤 docs/ch1-collective/ 에서 여십시오.")
sys.path.insert(0, str(root))

import numpy as np
import torch

from snippets.ch1_collective import lab
from snippets.common.alphabeta import fit_alpha_beta

print("torch", torch.__version__)

# %% [markdown]
# ## 1. Ring AllReduce 를 send/recv 로
#
# Rank r 은 오른쪽 r+1 에게만 보내고 왼쪽 r−1 에게서만 받습니다. 메시지를 N 개 chunk 로 나눈 뒤
#
# - **reduce-scatter** N−1 step: chunk (r−t) 를 보내고, 받은 chunk (r−1−t) 를 자기 것에 **더합니다**.
# - **all-gather** N−1 step: chunk (r+1−t) 를 보내고, 받은 chunk (r−t) 를 **그대로 둡니다**.
#
# `isend` 와 `irecv` 를 함께 걸고 둘 다 기다리는 것은, 모든 rank 가 동시에 보내기만 하다가 서로를 기다리는 교착 (deadlock) 을
# 피하기 위해서입니다. 아래가 실제로 실행되는 코드입니다.

# %%
print(inspect.getsource(lab.ring_allreduce_p2p))

# %% [markdown]
# 각 process 는 `worker` 를 실행합니다: 같은 입력으로 직접 만든 ring 과 `dist.all_reduce` 를 한 번씩 돌려 결과를 비교하고,
# 그다음 두 구현을 각각 여러 번 잽니다. 한 번의 시간은 `barrier` 뒤 호출 하나이고, rank 들 중 **가장 느린 rank** 의 시간을
# 씁니다 (collective 는 가장 느린 rank 가 끝나야 끝납니다). 여러 번 중 **median** 을 보고합니다.

# %%
print(inspect.getsource(lab.worker))

# %% [markdown]
# ## 2. 실행: process 2 개, 1 KiB – 4 MiB
#
# 실행하는 머신의 core 수보다 많은 process 를 띄우면 collective 가 아니라 OS scheduler 를 재게 됩니다
# ([Ch1-05 실험 3](../05-bandwidth-latency/)). 그래서 시간은 process 2 개로 잽니다.

# %%
print("CPU cores:", __import__("os").cpu_count())
out = lab.run_lab(sizes=(1 << 10, 1 << 14, 1 << 18, 1 << 22), iters=10, world=2)
rows = out["rows"]
print(f"world = {out['world']}, iters = {out['iters']} (median)\n")
print(f"{'S (bytes)':>10} | {'결과 일치':>8} | {'p2p ring (µs)':>14} | {'dist.all_reduce (µs)':>20} | {'비':>6}")
for r in rows:
    print(f"{r['bytes']:>10,} | {str(r['exact']):>8} | {r['p2p_ring_us']:>14,.0f} | {r['all_reduce_us']:>20,.0f} | "
          f"{r['p2p_ring_us'] / r['all_reduce_us']:>5.1f}×")
assert all(r["exact"] for r in rows), "직접 만든 ring 과 dist.all_reduce 의 결과가 다릅니다"

# %% [markdown]
# 모든 크기에서 결과가 정확히 일치합니다 (위의 `assert` 가 통과했습니다). 시간은 실행할 때마다, 특히 다른 프로그램이
# CPU 를 쓰고 있으면 크게 흔들립니다. 그래도 보통 보이는 경향은 **작은 메시지에서 직접 만든 ring 이 훨씬 느리고, 메시지가
# 커질수록 두 구현의 비가 줄어든다** 는 것입니다. α-β 모델로 말하면 차이가 주로 α 항에 있다는 뜻입니다.
#
# - **step 마다 Python 을 거칩니다.** 직접 만든 ring 은 step 마다 Python 에서 `isend`/`irecv` 를 부르고 기다립니다. 이 비용은
#   메시지 수에 비례하므로 α 를 키웁니다.
# - **보내는 bytes 는 같습니다.** 두 구현 모두 ring 이므로 rank 당 2(N−1)/N·S bytes 를 보냅니다. 큰 메시지에서는 이 대역폭 항이
#   시간을 정하므로 비가 1 쪽으로 갑니다. 남는 차이는 gloo 의 ring 이 chunk 를 segment 로 나눠 보내기와 더하기를 겹치는
#   (pipeline) 반면, 직접 만든 ring 은 둘을 번갈아 한다는 점 등에서 옵니다.

# %%
first, last = rows[0], rows[-1]
print(f"가장 작은 크기 ({first['bytes']:,} B) 의 비: {first['p2p_ring_us'] / first['all_reduce_us']:.1f}×, "
      f"가장 큰 크기 ({last['bytes']:,} B) 의 비: {last['p2p_ring_us'] / last['all_reduce_us']:.1f}×")

# %% [markdown]
# ## 3. α-β 모델로 읽기
#
# 두 구현 모두 ring 이므로 비용 모델은 T = 2(N−1)·α + 2(N−1)/N·S·β 입니다. 측정 네 점에
# `snippets/common/alphabeta.py` 의 `fit_alpha_beta` 로 α 와 β 를 맞추고, 경계 크기 S* = N·α/β 를 구합니다.
# 점이 네 개뿐이고 실행마다 흔들리므로, 숫자 자체보다 두 구현의 **차이가 어느 항에 있는지** 를 보십시오.

# %%
n = out["world"]
sizes = np.array([r["bytes"] for r in rows], dtype=float)
for key, name in (("p2p_ring_us", "p2p ring"), ("all_reduce_us", "dist.all_reduce")):
    secs = np.array([r[key] for r in rows]) * 1e-6
    alpha, beta, rel = fit_alpha_beta(np.full_like(sizes, 2 * (n - 1)), 2 * (n - 1) / n * sizes, secs)
    bw = f"{1 / beta / 1e9:.2f} GB/s" if beta > 0 else "(β ≤ 0: 측정 흔들림이 대역폭 항보다 큼)"
    s_star = f"{n * alpha / beta / 1024:,.0f} KiB" if beta > 0 and alpha > 0 else "정의되지 않음"
    print(f"{name:>16}: α = {alpha * 1e6:8.1f} µs, 1/β = {bw}, S* = {s_star}, "
          f"최대 |상대 오차| = {np.max(np.abs(rel)):.0%}")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.loglog(sizes, [r["p2p_ring_us"] for r in rows], "o-", label="p2p ring (isend/irecv)")
ax.loglog(sizes, [r["all_reduce_us"] for r in rows], "s-", label="dist.all_reduce (gloo)")
ax.set_xlabel("message size S (bytes)")
ax.set_ylabel("median time (us)")
ax.set_title(f"ring AllReduce, {n} processes, gloo")
ax.grid(True, alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# ## 4. 더 해 보기
#
# - `lab.run_lab(sizes=(40, 4000), iters=2, world=3)` 처럼 N = 3 이나 N 으로 나누어떨어지지 않는 크기로 돌려 보십시오.
#   `torch.tensor_split` 이 chunk 크기를 다르게 나누어도 결과는 여전히 정확히 같습니다 (테스트
#   `tests/ch1_collective/test_d05_bandwidth_latency.py` 가 이 경우를 실제 process 로 확인합니다).
# - core 가 4 개 이상인 노트북이라면 `world=4` 로 시간을 재고, 작은 메시지의 시간이 step 수 비 (6/2 = 3 배) 만큼 늘어나는지
#   보십시오. core 보다 process 가 많으면 그보다 훨씬 크게 늘어납니다.
# - `ring_allreduce_p2p` 의 reduce-scatter 단계만 남기면 reduce-scatter 가 됩니다. 그 시간이 all-reduce 의 절반 근처인지
#   재 보십시오 (gloo 의 `reduce_scatter_single` 은 전체 all_reduce 를 돌리므로 그렇지 않습니다: Ch1-05 실험 2).

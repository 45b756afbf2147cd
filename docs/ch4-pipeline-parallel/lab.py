# %% [markdown]
# # Chapter 4 실습: GPipe 와 1F1B 를 손으로 쓰고, `torch.distributed.pipelining` 과 비교하기
#
# 이 노트북은 노트북 PC 의 CPU 에서 돕니다. gloo backend 로 process 2 개를 띄워, 4 층짜리 모델 (`Linear` + `tanh`) 의 앞 절반을
# rank 0 에, 뒤 절반과 손실 함수를 rank 1 에 둡니다. Batch 는 micro-batch $m = 4$ 개로 나눕니다.
#
# 1. **GPipe 를 손으로**: rank 0 은 forward 네 개를 하고 activation 을 `dist.isend` 로 보낸 뒤, gradient 를 `dist.recv` 로 받아
#    backward 네 개를 합니다. Rank 1 은 그 반대입니다.
# 2. **1F1B 를 손으로**: 같은 코드에서 순서만 바꿉니다. Rank $r$ 은 forward 를 $p - 1 - r$ 개 먼저 하고, 그 뒤로 forward 하나,
#    backward 하나를 번갈아 합니다.
# 3. 같은 모델을 **`ScheduleGPipe` / `Schedule1F1B`** 로 돌려 실행 순서와 gradient 를 비교합니다.
# 4. 잰 시간으로 Gantt 그림을 그리고, 시뮬레이터 (`snippets/common/pipeline_sim.py`) 의 예측과 bubble 을 비교합니다.
#
# 2 core 를 나눠 쓰는 머신에서도 schedule 이 보이도록, forward 마다 4 ms, backward 마다 8 ms 를 잠듭니다 (`lab.SLEEP`).
# Worker 함수는 새로 띄운 process 가 import 할 수 있도록 `snippets/ch4_pipeline_parallel/lab.py` 에 있습니다.

# %%
import torch
from IPython.display import HTML, display

from snippets.ch4_pipeline_parallel import lab
from snippets.common import figures
from snippets.common import pipeline_sim as ps

P = 2
print("torch", torch.__version__, "| p =", P, "| m =", lab.M, "| rows per micro-batch", lab.ROWS, "| width", lab.D)
reference = lab.reference_grads()
print("reference gradients (one process):", [len(g) for g in reference], "numbers per stage")

# %% [markdown]
# ## 1. GPipe 와 1F1B 를 손으로
#
# `manual_worker` 의 핵심은 두 함수 `forward(j)` 와 `backward(j)` 입니다. Rank 0 의 `forward` 는 stage 를 계산하고 결과를 보내며,
# backward 때 쓸 출력을 `held` 에 보관합니다. `backward` 는 rank 1 이 보낸 gradient 를 받아 `held` 에서 꺼낸 출력에 대해 backward
# 합니다. Rank 1 은 받은 activation 으로 forward 와 손실을 계산하고, backward 뒤 입력의 gradient 를 rank 0 에 보냅니다. `held` 의
# 크기의 최댓값이 이 rank 가 동시에 들고 있던 micro-batch 수입니다.

# %%
manual = {s: lab.run(lab.manual_worker, s) for s in ("gpipe", "1f1b")}
for s, ranks in manual.items():
    print(f"[{s}] gradient max |hand − one process| = {lab.max_grad_error(ranks, reference):.1e}; "
          f"peak held micro-batches per rank = {[r['peak_held'] for r in ranks]}")
    for r, acts in enumerate(lab.rows(ranks)):
        print(f"   rank {r}: {' '.join(a['op'] + str(a['mb']) for a in acts)}")

# %% [markdown]
# 두 schedule 모두 gradient 가 한 process 의 결과와 (부동소수점 반올림 안에서) 같습니다. GPipe 는 두 rank 가 모두 $m = 4$ 개를
# 들고 있고, 1F1B 는 rank 0 이 $p - 0 = 2$ 개, rank 1 이 $p - 1 = 1$ 개만 들고 있습니다 (Ch4-03 의 정리 4.3.4).

# %%
fig, axes = figures.new(7.5, 3.2, nrows=2, squeeze=False)
for ax, (s, ranks) in zip(axes[:, 0], manual.items()):
    ps.gantt(ax, lab.rows(ranks), f"손으로 쓴 {s} (측정)", unit=1e-3)
axes[-1, 0].set_xlabel("ms")
fig.tight_layout()
display(HTML(figures.svg(fig)))

# %% [markdown]
# ## 2. 같은 모델을 `torch.distributed.pipelining` 으로
#
# `library_worker` 는 같은 stage 모듈로 `PipelineStage` 를 만들고 `ScheduleGPipe` 또는 `Schedule1F1B` 를 돌립니다. Stage 의
# `forward_one_chunk` / `backward_one_chunk` 를 감싸 호출 시각을 기록하고, 손으로 쓴 버전과 같은 시간만큼 잠듭니다.

# %%
library = {s: lab.run(lab.library_worker, s) for s in ("gpipe", "1f1b")}
for s in ("gpipe", "1f1b"):
    hand = [[(a["op"], a["mb"]) for a in acts] for acts in lab.rows(manual[s])]
    lib = [[(a["op"], a["mb"]) for a in acts] for acts in lab.rows(library[s])]
    sim = [[(o, i) for o, i, _ in ps.rank_order(s, r, P, lab.M)] for r in range(P)]
    print(f"[{s}] same order as the hand-written one: {hand == lib}; as the simulator: {lib == sim}; "
          f"gradient max |library − one process| = {lab.max_grad_error(library[s], reference):.1e}")

# %% [markdown]
# ## 3. Bubble: 측정 대 시뮬레이터
#
# 각 실행에서 잰 평균 forward / backward 시간을 시뮬레이터에 넣어 예측하고, 두 bubble 정의 (Ch4-01 의 정의 4.1.2) 로 비교합니다.
# 공식은 $\mathcal{B}_\text{tot} = (p-1)/(m+p-1)$, $\mathcal{B}_\text{ideal} = (p-1)/m$ 입니다.

# %%
print(f"formula: fraction of total {float(ps.gpipe_bubble_fraction(P, lab.M)):.3f}, "
      f"relative to ideal {float(ps.gpipe_bubble_relative(P, lab.M)):.3f}")
for label, runs in (("hand", manual), ("library", library)):
    for s, ranks in runs.items():
        rws = lab.rows(ranks)
        b = ps.measured_bubbles(rws)
        tf = sum(a["end"] - a["start"] for r in rws for a in r if a["op"] == "F") / (P * lab.M)
        tb = sum(a["end"] - a["start"] for r in rws for a in r if a["op"] == "B") / (P * lab.M)
        sim = ps.simulate(s, P, lab.M, t_f=tf, t_b=tb, t_w=0.0)
        print(f"{label:8s} {s:5s}: measured {b['fraction']:.3f} / {b['relative']:.3f}  "
              f"simulated with measured T_F={tf * 1e3:.1f} ms, T_B={tb * 1e3:.1f} ms: "
              f"{sim.bubble_fraction():.3f} / {sim.bubble_relative():.3f}  (fraction of total / relative to ideal)")

# %%
fig, axes = figures.new(7.5, 3.2, nrows=2, squeeze=False)
for ax, (s, ranks) in zip(axes[:, 0], library.items()):
    ps.gantt(ax, lab.rows(ranks), f"torch.distributed.pipelining: {s} (측정)", unit=1e-3)
axes[-1, 0].set_xlabel("ms")
fig.tight_layout()
display(HTML(figures.svg(fig)))

# %% [markdown]
# 측정과 시뮬레이션의 차이는 주로 두 가지에서 옵니다. 시뮬레이터는 경계를 건너는 시간 (send/recv 와 schedule 의 Python 처리) 을 0 으로
# 두었고, 같은 op 의 시간이 호출마다 다른 것을 평균 하나로 대신합니다 (Ch4-02 의 실험 2, 4). 차이의 크기는 실행마다 다릅니다.
#
# ## 더 해보기
#
# - `lab.M` 을 8 로 바꾸면 (모듈 맨 위) GPipe 의 `held` 는 8 이 되고 1F1B 는 그대로 2 / 1 인지 보세요.
# - `manual_worker` 의 `dist.isend` 를 `dist.send` 로 바꿔 보세요. 1F1B 에서 rank 0 이 activation 을 보내는 동안 rank 1 이 gradient 를
#   보내려 하면, 구현에 따라 두 rank 가 서로를 기다릴 수 있습니다. 실제 구현이 비동기 send/recv (`batch_isend_irecv`) 를 쓰는 이유입니다.
# - `SLEEP` 을 0 으로 두고 진짜 계산만 재 보세요. 이 작은 모델에서 측정된 bubble 중 얼마가 계산이 아니라 통신과 Python 처리의
#   몫인지, 위의 예측과 비교해 보세요.

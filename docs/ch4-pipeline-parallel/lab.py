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
# # Chapter 4 실습: GPipe 와 1F1B 를 손으로 쓰고, `torch.distributed.pipelining` 과 비교하기
#
# 이 노트북은 노트북 PC 의 CPU 에서 돕니다 (1 분 안팎). gloo backend 로 process 2 개를 띄워, 4 층짜리 모델 (`Linear` + `tanh`) 의
# 앞 절반을 rank 0 에, 뒤 절반과 손실 함수를 rank 1 에 둡니다. Batch 는 micro-batch $m = 4$ 개로 나눕니다.
#
# 1. **GPipe 와 1F1B 를 손으로**: `dist.isend` / `dist.recv` 로 activation 과 gradient 를 주고받는 worker 를 직접 읽고 돌립니다.
# 2. 같은 모델을 **`ScheduleGPipe` / `Schedule1F1B`** 로 돌려 실행 순서와 gradient 를 비교합니다.
# 3. 잰 bubble 을 공식과 비교하고, **그 차이가 무엇으로 이루어지는지** 잰 값으로 나눠 봅니다.
#
# 2 core 를 나눠 쓰는 머신에서도 schedule 이 보이도록 forward 마다 4 ms, backward 마다 8 ms 를 잠듭니다 (`lab.SLEEP`).
# Worker 함수는 새로 띄운 process 가 import 할 수 있도록 `snippets/ch4_pipeline_parallel/lab.py` 에 있고, 아래에 그 소스를 그대로 보입니다.
#
# 저장소를 clone 한 뒤 노트북으로 열어도 되고, 저장소 루트에서 `python docs/ch4-pipeline-parallel/lab.py` 로 스크립트처럼 실행해도 됩니다.
# 스크립트로 실행하면 출력은 터미널에, 그림은 현재 폴더의 `ch4_lab_figures/` 에 SVG 로 저장됩니다 (`lab.show`). 새 process 가 이
# 파일을 다시 실행하지 않도록 `lab.run` 이 process 를 띄우는 동안만 이 파일의 이름을 multiprocessing 에서 가립니다 (그 docstring 참고).

# %%
import inspect
import pathlib
import sys

# 저장소 루트 (snippets/ 가 있는 곳) 를 import 경로에 넣습니다: 스크립트로는 이 파일의 위치에서, 노트북으로는 현재 폴더에서 찾습니다.
here = pathlib.Path(globals().get("__file__") or pathlib.Path.cwd() / "notebook").resolve().parent
root = next((d for d in [here, *here.parents] if (d / "snippets" / "ch4_pipeline_parallel").is_dir()), None)
if root is None:
    raise RuntimeError("이 실습은 저장소 안에서 실행해야 합니다 (snippets/ch4_pipeline_parallel/lab.py 를 import 합니다).")
sys.path.insert(0, str(root))

import torch

from snippets.ch4_pipeline_parallel import lab
from snippets.common import figures
from snippets.common import pipeline_sim as ps

P = 2
print(f"torch {torch.__version__} | stage (= rank) 수 p = {P} | micro-batch 수 m = {lab.M} | micro-batch 당 행 {lab.ROWS} | 폭 {lab.D}")
reference = lab.reference_grads()
print("기준 gradient (process 하나, pipeline 없음):", [len(g) for g in reference], "개 숫자 (stage 별)")

# %% [markdown]
# ## 1. GPipe 와 1F1B 를 손으로
#
# 아래가 손으로 쓴 worker 전체입니다. 핵심은 두 함수 `forward(j)` 와 `backward(j)` 입니다. Rank 0 의 `forward` 는 stage 를 계산하고
# 결과를 `isend` 로 보내며, backward 때 쓸 출력을 `held` 에 보관합니다. `backward` 는 rank 1 이 보낸 gradient 를 `recv` 로 받아 `held`
# 에서 꺼낸 출력에 대해 backward 합니다. Rank 1 은 받은 activation 으로 forward 와 손실을 계산하고, backward 뒤 입력의 gradient 를
# rank 0 에 보냅니다. 두 schedule 의 차이는 맨 아래 몇 줄, `forward` 와 `backward` 를 부르는 **순서** 뿐입니다.

# %%
print(inspect.getsource(lab.manual_worker))

# %% [markdown]
# **예측해 보세요.** `held` 의 크기의 최댓값은 이 rank 가 동시에 들고 있던 micro-batch 수입니다. GPipe 와 1F1B 에서 rank 0 과 rank 1 의
# 최댓값은 각각 얼마일까요? (Ch4-02 정리 4.2.5, Ch4-03 정리 4.3.4.) 예측을 적은 뒤 다음 셀을 실행하세요.

# %%
manual = {s: lab.run(lab.manual_worker, s) for s in ("gpipe", "1f1b")}
for s, ranks in manual.items():
    print(f"[{s}] gradient 의 최대 |손 − process 하나| = {lab.max_grad_error(ranks, reference):.1e}; "
          f"rank 별 held 의 최댓값 = {[r['peak_held'] for r in ranks]} (정리의 예측: "
          f"{[lab.M] * P if s == 'gpipe' else [min(P - r, lab.M) for r in range(P)]})")
    for r, acts in enumerate(lab.rows(ranks)):
        print(f"   rank {r}: {' '.join(a['op'] + str(a['mb']) for a in acts)}")

# %%
fig, axes = figures.new(7.5, 3.2, nrows=2, squeeze=False)
for ax, (s, ranks) in zip(axes[:, 0], manual.items()):
    ps.gantt(ax, lab.rows(ranks), f"손으로 쓴 {s} (측정)", unit=1e-3)
axes[-1, 0].set_xlabel("ms")
fig.tight_layout()
lab.show(figures.svg(fig), "hand_written")

# %% [markdown]
# ## 2. 같은 모델을 `torch.distributed.pipelining` 으로
#
# `library_worker` 는 같은 stage 모듈로 `PipelineStage` 를 만들고 `ScheduleGPipe` 또는 `Schedule1F1B` 를 돌립니다. Stage 의
# `forward_one_chunk` / `backward_one_chunk` 를 감싸 호출 시각을 기록하고, 손으로 쓴 버전과 같은 시간만큼 잠듭니다. 첫 호출의 시작부터
# 마지막 호출의 끝까지 (**기록 구간**) 가 아래에서 bubble 을 재는 구간입니다.
#
# `PipelineStage` 의 준비 (shape 추론, buffer 할당) 는 torch 2.13 에서 `step` 이 시작하자마자, 첫 `forward_one_chunk` *보다 먼저*
# 돕니다 (schedule 의 `_initialize_stage`; 두 번째 step 부터는 바로 돌아옵니다). 그러니 기록 구간에는 그 준비가 들어가지 않습니다.
# 그래서 worker 는 `sched.step` 호출 전체의 시작과 끝, 그리고 준비 함수 안에서 보낸 시간도 잽니다. 첫 step (cold step) 은 기록하되
# 따로 두고, 그 뒤 `lab.STEPS` 개의 step 중 기록 구간이 median 인 step (warm step) 을 분석에 씁니다. 두 step 의 비교는 3 절 끝에 있습니다.

# %%
print(inspect.getsource(lab.library_worker))
raw = {s: lab.run(lab.library_worker, s) for s in ("gpipe", "1f1b")}
library = {s: lab.warm_median(ranks) for s, ranks in raw.items()}  # the median warm step
for s in ("gpipe", "1f1b"):
    hand = [[(a["op"], a["mb"]) for a in acts] for acts in lab.rows(manual[s])]
    lib = [[(a["op"], a["mb"]) for a in acts] for acts in lab.rows(library[s])]
    sim = [[(o, i) for o, i, _ in ps.rank_order(s, r, P, lab.M)] for r in range(P)]
    print(f"[{s}] 손으로 쓴 것과 같은 순서: {hand == lib}; 시뮬레이터와 같은 순서: {lib == sim}; "
          f"gradient 의 최대 |library − process 하나| = {lab.max_grad_error(library[s], reference):.1e}")

# %% [markdown]
# ## 3. Bubble: 공식, 측정, 그리고 그 차이
#
# **예측해 보세요.** 공식은 총 시간 대비 $\mathcal{B}_\text{tot} = (p-1)/(m+p-1) = 1/5$ 입니다. 잰 값은 이보다 클까요, 작을까요? 차이가
# 있다면 무엇 때문일까요?
#
# 아래 셀은 잰 bubble 을 단계별로 설명합니다. (1) 공식: op 시간이 모두 같고 통신이 0. (2) 이 실행에서 잰 평균 forward / backward 시간을
# 시뮬레이터에 넣은 값. (3) 여기에 stage 경계의 비용 $T_\text{hop}$ 를 더한 값: rank 사이의 의존성마다 "받는 쪽이 준비된 뒤 실제로 시작하기까지
# 걸린 시간" 을 재어 그 median 을 씁니다 (send/recv 와 schedule 의 Python 처리). (4) 남는 것: 같은 op 의 호출마다 다른 길이, 호출 사이의
# schedule 자신의 일, 다른 작업과 나눠 쓰는 2 core.

# %%
# the library runs only: their recorded calls end before the schedule sends, so a cross-rank gap is the boundary's
# cost; the hand-written worker posts its isend before it sleeps, so its receiver may start before the sender's call "ends"
for label, runs in (("library", library),):
    for s, ranks in runs.items():
        g = lab.gap_parts(ranks, s)
        print(f"[{label} {s}] 공식 {g['formula']:.3f} → 잰 op 시간 (T_F {g['t_f'] * 1e3:.1f} ms, T_B {g['t_b'] * 1e3:.1f} ms) "
              f"{g['with_durations']:.3f} → + 경계 T_hop {g['hop'] * 1e3:.2f} ms {g['with_hops']:.3f} → 측정 {g['measured']:.3f} "
              f"(남은 몫 {g['rest']:+.3f}). 측정 − 공식 = {g['measured'] - g['formula']:+.3f} 중 op 시간의 몫 "
              f"{g['with_durations'] - g['formula']:+.3f}, 경계의 몫 {g['with_hops'] - g['with_durations']:+.3f}. "
              f"입력이 이미 와 있는데도 같은 rank 의 두 호출 사이가 빈 시간 (schedule 자신의 처리와 core 를 기다린 시간) 합 "
              f"{g['own'] * 1e3:.1f} ms = 총 rank 시간의 {g['own_share']:.3f}")
        print("   → 읽기: " + lab.gap_reading(g))

# %% [markdown]
# 읽는 법: 마지막 항 (입력이 준비된 뒤에도 rank 가 다음 호출을 시작하지 않은 시간) 은 "남은 몫" 의 한 부분입니다 (각 "읽기" 줄이 두
# 숫자를 비교합니다). 한 rank 의 빈 시간은 그만큼 bubble 로 세어지고, 그것이 상대 rank 의 입력을 늦추면 상대 rank 에서 한 번 더 세어집니다. 경계 하나에 $T_\text{hop}$ 가 걸리면 파이프를 채우고 비우는 사슬에 $2(p-1)$ 번 더해지고 (Ch4-01 정리 4.1.6), 1F1B 의 steady
# state 에서는 쌍마다 끼어들 수 있습니다. 남은 몫이 크면 그 실행은 호출마다의 흔들림이나 core 를 나눠 쓴 영향이 컸다는 뜻이고, 실행마다 달라집니다.
#
# 위 분해는 warm step 의 것입니다. 첫 step (cold) 은 무엇이 다를까요? 준비가 기록 구간 *앞에서* 돈다면, cold step 의 bubble 이 더
# 클 이유가 있을까요? 아래 셀이 두 step 을 세 가지로 잽니다: `sched.step` 호출 전체 (처음 들어간 rank 부터 마지막으로 나온 rank 까지),
# 그것을 나눈 세 조각 (첫 기록 호출 전, 기록 구간, 마지막 호출 뒤), 그리고 준비 함수 안의 시간. 잰 op 시간에서 잠든 시간 (forward
# `SLEEP`, backward `2·SLEEP`) 을 뺀 나머지는 호출 자체의 비용 (계산, OS 의 깨우기 지연) 입니다. 각 "읽기" 줄은 그 숫자에서 나옵니다.

# %%
for s in raw:
    d = lab.cold_warm(raw[s], s)
    print(f"[library {s}] 잠든 시간 T_F {lab.SLEEP * 1e3:.1f} ms, T_B {2 * lab.SLEEP * 1e3:.1f} ms; warm = median of {lab.STEPS}. "
          + lab.cold_warm_reading(d))

# %%
fig, axes = figures.new(7.5, 3.2, nrows=2, squeeze=False)
for ax, (s, ranks) in zip(axes[:, 0], library.items()):
    ps.gantt(ax, lab.rows(ranks), f"torch.distributed.pipelining: {s} (측정)", unit=1e-3)
axes[-1, 0].set_xlabel("ms")
fig.tight_layout()
lab.show(figures.svg(fig), "library")

# %% [markdown]
# ## 더 해보기
#
# - `lab.M` 을 8 로 바꾸면 (모듈 맨 위) GPipe 의 `held` 는 8 이 되고 1F1B 는 그대로 2 / 1 인지 보세요.
# - `manual_worker` 의 `dist.isend` 를 `dist.send` 로 바꿔 보세요. 1F1B 에서 rank 0 이 activation 을 보내는 동안 rank 1 이 gradient 를
#   보내려 하면, 구현에 따라 두 rank 가 서로를 기다릴 수 있습니다. 실제 구현이 비동기 send/recv (`batch_isend_irecv`) 를 쓰는 이유입니다.
# - `SLEEP` 을 0 으로 두고 진짜 계산만 재 보세요. 위 셀의 분해에서 경계의 몫이 어떻게 커지는지 보세요.

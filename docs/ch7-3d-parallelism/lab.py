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
# # Chapter 7 실습: 배치마다 오가는 bytes 를 예측하고, 실제 mesh 에서 재기
#
# 이 실습은 노트북 PC 의 CPU 에서 1 분 안팎에 돕니다. GPU 는 필요 없고, CPU process 4 개 (gloo) 를 두 번 띄웁니다.
#
# [Ch7-01](../01-3d-parallelism/) 의 planner 는 후보를 줄여 줄 뿐, 가정의 폭 안에 있는 후보는 재서 골라야 합니다. 여기서는 그 "재기" 의
# 가장 작은 판을 합니다. 시간은 재지 않습니다 (core 보다 process 가 많으면 scheduler 를 잽니다). 대신 **축마다 rank 가 보내는 collective 의
# 수와 bytes** 를 먼저 식으로 예측하고, 실제 `DeviceMesh` 위에서 잽니다. 어느 배치도 강제하지 않습니다: 두 배치를 모두 돌리고 비교합니다.
#
# 1. 70B·64 GPU 에서 planner 의 상위 후보와, 가정 하나가 바뀔 때 순위가 어떻게 움직이는지.
# 2. 작은 모델 (MLP block 4 개) 을 4 process 에 놓는 두 배치: $(d, p, t) = (2, 1, 2)$ 와 $(1, 2, 2)$. 축마다 보낼 양을 예측합니다.
# 3. 두 배치를 `gpu_runs/mesh_pp.py` (pipelining stage + DTensor TP + FSDP2) 로 실제로 실행합니다. Worker 코드를 그대로 보입니다.
# 4. 예측과 측정을 rank 마다 맞춥니다.

# %%
import inspect
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import snippets
from snippets.ch7_3d_parallelism import d01_3d_parallelism as page
from snippets.common import planner_3d as pl

ROOT = Path(snippets.__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# %% [markdown]
# ## 1. 70B 를 H100 64 개에: planner 의 상위 5 개
#
# 입력은 Ch7-01 과 같습니다 (Llama-2-70B 의 모양, node 당 8 GPU, GPU 당 72 GB, step 당 약 4M token). 기본 가정 (TP overlap 0 %, MFU 가
# $t$ 와 무관) 의 상위 5 개를 보고, TP overlap 만 70 % 로 바꿔 다시 봅니다.

# %%
M, C, B = pl.LLAMA70B, pl.H100_64, pl.BATCH_4M
for name, a in (("기본 가정", pl.Assumptions()), ("TP overlap 70 %", replace(pl.Assumptions(), tp_overlap=0.7))):
    rows = pl.plan(M, C, B, assume=a)
    top = ", ".join(f"{r['d']}·{r['t']}·{r['p']} ({r['step_s']:.1f} s)" for r in rows[:5])
    print(f"{name}: 상위 5 개 {top}")
    print(f"  1 위와 5 위의 차이 {rows[4]['step_s'] / rows[0]['step_s'] - 1:.1%}, TP 는 모두 node 안: "
          f"{all(r['links']['tp'] == 'intra' for r in rows[:5])}")

# %% [markdown]
# 상위 후보들이 몇 % 안에 모여 있고, 가정 하나로 순서가 바뀝니다. 그래서 고르는 것은 측정입니다. 이 노트북 PC 에서 잴 수 있는 것은
# 시간이 아니라 *양* 이므로, 작은 모델로 축마다 오가는 양을 재 봅니다.
#
# ## 2. 작은 모델, 작은 cluster
#
# MLP block $L = 4$ 개 (폭 $h = 16$, 안쪽 $4h$), global batch $B = 16$ 행, micro-batch $m = 4$ 개, CPU process 4 개.
# 두 배치를 비교합니다.
#
# - **A = $(d, p, t) = (2, 1, 2)$**: TP 2 개 × DP 2 개 (FSDP2), pipeline 없음.
# - **B = $(1, 2, 2)$**: TP 2 개 × pipeline stage 2 개, DP 없음.
#
# **예측해 보세요** (다음 cell 을 실행하기 전에 적어 두십시오): rank 하나가 step 하나에 보내는 TP all-reduce 는 A 와 B 중 어느 쪽이 많은가?
# Pipeline 의 send 는 B 의 stage 0 에서 몇 번인가? FSDP2 의 all-gather 는 A 에서 block 당 몇 번인가 (micro-batch 4 개, forward 와
# backward 에 한 번씩이면 8 번)?

# %%
from gpu_runs import mesh_pp

cfg = dict(mesh_pp.PRESETS["tiny"])   # the preset the runs below use: L, h, B, m, schedule
layouts = {"A": (2, 1, 2), "B": (1, 2, 2)}
pred = {k: {pp_rank: page.mesh_pp_prediction(cfg, d, p, t, pp_rank) for pp_rank in range(p)}
        for k, (d, p, t) in layouts.items()}
for k, (d, p, t) in layouts.items():
    for s, x in pred[k].items():
        print(f"배치 {k} (d, p, t) = ({d}, {p}, {t}), stage {s}: TP all-reduce {x['tp_all_reduce']} 번 "
              f"({x['tp_all_reduce_bytes']:,} B), PP send {x['p2p_isend']} 번 ({x['p2p_bytes_each_way']:,} B), "
              f"FSDP all-gather {x['fsdp_all_gather']} 번 ({x['fsdp_all_gather_bytes']:,} B), "
              f"reduce-scatter {x['fsdp_reduce_scatter']} 번")

# %% [markdown]
# 예측의 근거: TP 는 micro-batch 마다 block 당 forward 1 번, backward 1 번 (첫 stage 의 첫 block 만 backward 0 번), 크기는 micro-batch 의
# activation $(B/(d m)) \cdot h \cdot 4$ bytes 입니다. A 는 한 rank 가 block 4 개를 모두 갖고 micro-batch 가 작으며 ($B/(dm) = 2$ 행), B 는
# stage 가 block 2 개만 갖고 micro-batch 가 큽니다 (4 행). FSDP2 의 all-gather 수는 1F1B 의 순서가 정합니다 (Ch7-01 실험 6):

# %%
from snippets.common import pipeline_sim as ps

print(inspect.getsource(page.fsdp_gathers_in_pipeline))
order = ps.rank_order("1f1b", 0, 1, 4)
print("p = 1 의 순서:", " ".join(a + str(mb) for a, mb, _ in order), "→ block 당 all-gather",
      page.fsdp_gathers_in_pipeline(order), "번")

# %% [markdown]
# ## 3. 가장 작은 판을 실제로: 2×2 mesh
#
# 각 process 가 실행하는 코드입니다 (`gpu_runs/mesh_pp.py`): 자기 stage 의 block 만 만들고, TP 를 걸고, $d > 1$ 이면 FSDP2 를 겁니다.
# 그다음 `Schedule1F1B` 가 micro-batch 를 흘리고, 세는 장치 셋 (TP 의 functional collective, FSDP2 의 호출, pipeline 의 P2P) 이 그 step 을 셉니다.

# %%
print(inspect.getsource(mesh_pp.build_stage))
src = inspect.getsource(mesh_pp.measure)
print(src[src.index("        mb_losses = []"):src.index("        opt.zero_grad()") + len("        opt.zero_grad()")])

# %% [markdown]
# 두 배치를 `torchrun` 으로 4 process 에 띄웁니다 (각각 10 초 안팎). 프로그램은 같은 모델을 한 process 에서 같은 batch 로 학습한 결과와
# loss, parameter 를 비교합니다.

# %%
env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
torchrun = str(Path(sys.executable).with_name("torchrun"))
runs = {}
for k, (d, p, t) in layouts.items():
    out = Path(tempfile.mkdtemp(prefix=f"ch7-lab-{k}-"))
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node=4", "gpu_runs/mesh_pp.py", "--preset", "tiny",
                           "--pp", str(p), "--tp", str(t), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs[k] = json.loads(next(out.glob("*.json")).read_text())
    m = runs[k]["measurements"]
    print(f"배치 {k}: mesh {m['mesh']}; 한 process 와의 loss 최대 차이 {m['max_abs_loss_diff']:.1e}, "
          f"parameter 최대 차이 {m['max_abs_param_diff']:.1e}")

# %% [markdown]
# ## 4. 계획과 측정
#
# rank 마다 측정을 예측과 맞춥니다. 같은 stage 의 rank 는 같은 수를 부릅니다.

# %%
for k, (d, p, t) in layouts.items():
    m = runs[k]["measurements"]
    ok = True
    for rk in m["ranks"]:
        meas = page.mesh_pp_measured(rk)
        same = meas == pred[k][rk["pp_rank"]]
        ok &= same
        print(f"배치 {k}, rank {rk['rank']} (dp {rk['dp_rank']}, pp {rk['pp_rank']}, tp {rk['tp_rank']}): TP {meas['tp_all_reduce']} 번 "
              f"{meas['tp_all_reduce_bytes']:,} B, PP send {meas['p2p_isend']} 번, FSDP all-gather {meas['fsdp_all_gather']} 번 "
              f"{meas['fsdp_all_gather_bytes']:,} B → 예측과 같은가 {same}")
    print(f"배치 {k}: 예측과 측정이 모든 rank 에서 같은가: {ok}")
a0, b0 = page.mesh_pp_measured(runs["A"]["measurements"]["ranks"][0]), page.mesh_pp_measured(runs["B"]["measurements"]["ranks"][0])
a_fsdp = a0["fsdp_all_gather_bytes"] + a0["fsdp_reduce_scatter_bytes"]
a_sum, b_sum = a0["tp_all_reduce_bytes"] + a_fsdp, b0["tp_all_reduce_bytes"] + b0["p2p_bytes_each_way"]
print(f"\nrank 0 의 collective 크기 S 의 합 (nccl-tests 의 S: all-reduce 는 입력, all-gather 는 모은 출력, reduce-scatter 는 입력): "
      f"배치 A 는 TP {a0['tp_all_reduce_bytes']:,} + FSDP (all-gather + reduce-scatter) {a_fsdp:,} = {a_sum:,}, "
      f"배치 B 는 TP {b0['tp_all_reduce_bytes']:,} + PP {b0['p2p_bytes_each_way']:,} = {b_sum:,}. "
      f"이 작은 모델에서는 {'A' if a_sum > b_sum else 'B'} 가 더 많이 옮깁니다.")

# %% [markdown]
# 이 작은 모델은 parameter 에 비해 activation 이 작아서 FSDP2 의 all-gather (parameter) 가 TP 의 all-reduce (activation) 보다 큽니다. 70B 에서는
# 반대입니다 (Ch7-01 정리 7.1.3: step 당 token 이 수백만이면 TP 의 양이 DP 의 수백 배). 같은 식이 두 경우를 모두 맞힙니다: 예측과 측정이
# 같다는 것은 *식의 구조* 가 맞다는 뜻이고, 어느 배치가 빠른지는 그 양을 각 링크의 대역폭으로 나눈 뒤에야 정해집니다.
#
# ## 해볼 것
#
# - `gpu_runs/mesh_pp.py` 의 tiny preset 에서 `B` 를 64 로 키우면 (token 을 늘리면) 배치 A 와 B 의 TP bytes 와 FSDP bytes 는 각각 어떻게 변하는가? 먼저 식으로 예측하십시오.
# - `--schedule GPipe` 로 배치 A 를 다시 돌리면 FSDP2 의 all-gather 는 block 당 몇 번인가? (`page.fsdp_gathers_in_pipeline` 에 GPipe 의 순서를 넣어 보십시오.)
# - 1 절에서 `micro_batch=2` 로 바꾸면 상위 5 개는 어떻게 바뀌는가? 왜 $t = 4$ 배치가 사라지는가?

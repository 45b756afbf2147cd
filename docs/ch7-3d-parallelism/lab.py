# %% [markdown]
# # Chapter 7 실습: planner 로 배치를 고르고, 가장 작은 판을 실제로 돌려 비교하기
#
# 이 실습은 노트북 PC 의 CPU 에서 1 분 안팎에 돕니다. GPU 는 필요 없고, 마지막 단계에서 CPU process 4 개 (gloo) 를 띄웁니다.
#
# 1. [Ch7-01](01-3d-parallelism.md) 의 planner (`snippets/common/planner_3d.py`) 로 모델 하나를 cluster 하나에 배치합니다:
#    모든 $(d, t, p)$ 를 평가하고 memory, 축별 통신, bubble, step 시간으로 순위를 매깁니다.
# 2. 같은 planner 를 아주 작은 "cluster" (node 당 2 개, GPU 4 개) 와 작은 모델에 적용해, $p = 1$ 로 제한했을 때 고르는
#    $d \times t$ 배치를 봅니다.
# 3. 그 배치의 가장 작은 판 — 2×2 (dp, tp) `DeviceMesh` 위의 FSDP2 over DTensor TP — 를 `gpu_runs/mesh_3d.py` 로 실제로 돌립니다.
# 4. rank 당 parameter bytes 와 step 당 collective 를 planner 와 정리 7.1.5 의 예측과 비교합니다.

# %%
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import snippets
from snippets.common import planner_3d as pl
from snippets.common import tp_cost as tc

ROOT = Path(snippets.__file__).resolve().parents[1]

# %% [markdown]
# ## 1. 70B 를 H100 64 개에: planner 의 상위 5 개
#
# 입력은 Ch7-01 과 같습니다 (Llama-2-70B 의 모양, node 당 8 GPU, GPU 당 72 GB 사용 가능, step 당 약 4M token).

# %%
rows = pl.plan(pl.LLAMA70B, pl.H100_64, pl.BATCH_4M)
print(f"{'d·t·p':>8} {'m':>5} {'links tp/pp/dp':>18} {'mem GB':>7} {'TP s':>6} {'PP s':>6} {'DP s':>6} {'bubble':>7} {'step s':>7}")
for r in rows[:5]:
    c = r["comm_s"]
    print(f"{r['d']}·{r['t']}·{r['p']:<3} {r['m']:>5} {'/'.join(r['links'][a] for a in ('tp', 'pp', 'dp')):>18} "
          f"{r['mem']['total'] / 1e9:7.1f} {c['tp']:6.2f} {c['pp']:6.2f} {c['dp']:6.2f} {r['bubble']:7.1%} {r['step_s']:7.1f}")
print("TP 가 node 안 (intra) 인가, 상위 5 개 모두:", all(r["links"]["tp"] == "intra" for r in rows[:5]))

# %% [markdown]
# ## 2. 작은 모델, 작은 cluster
#
# Node 당 2 개씩 4 개의 "GPU", ZeRO-3 (FSDP), pipeline 없음 ($p = 1$: 층이 작아 pipeline 의 이득이 없다고 가정). 모델은 3 절에서
# 실제로 돌릴 MLP block 두 개의 크기입니다. ZeRO-3 의 model state 는 어느 배치든 $\psi/N$ 이므로 배치를 가르는 것은 activation 입니다.
# GPU 의 memory 를 $t = 1$ 배치와 $t = 2$ 배치의 필요량 사이에 두면 — activation 을 TP 로 나눠야만 들어가는 상황 — planner 가
# 무엇을 고르는지 봅니다. (Planner 의 activation 식은 transformer layer 용이라 MLP 에는 근사입니다; 여기서는 배치의 *구조* 를 봅니다.)

# %%
L, h = 2, 16
psi = L * (h * 4 * h + 4 * h + 4 * h * h + h)
small = pl.Model(layers=L, hidden=h, heads=4, seq=8, vocab=0, psi=psi)
batch = pl.Batch(global_batch=8, micro_batch=1)
probe = pl.Cluster(gpus=4, gpus_per_node=2, mem_bytes=float("inf"), intra_bw=100e9, inter_bw=10e9)
need = {t: pl.evaluate(small, probe, batch, 4 // t, t, 1, zero_stage=3)["mem"]["total"] for t in (1, 2)}
cluster = pl.Cluster(gpus=4, gpus_per_node=2, mem_bytes=(need[1] + need[2]) / 2, intra_bw=100e9, inter_bw=10e9)
print(f"필요 memory: t = 1 {need[1]:,.0f} B, t = 2 {need[2]:,.0f} B → GPU 당 {cluster.mem_bytes:,.0f} B 로 둠")
plan = [r for r in pl.plan(small, cluster, batch, zero_stage=3) if r["p"] == 1]
for r in plan:
    print(f"d·t·p = {r['d']}·{r['t']}·{r['p']}: model states {sum(r['mem'][k] for k in ('params', 'grads', 'optimizer')):,.0f} B, "
          f"activation {r['mem']['activations']:,.0f} B, 들어가는가 {r['fits']}, links {r['links']}")
best = next(r for r in plan if r["fits"])
print(f"\n선택: d = {best['d']}, t = {best['t']} (TP 는 {best['links']['tp']}, DP 는 {best['links']['dp']})")

# %% [markdown]
# ## 3. 가장 작은 판을 실제로: 2×2 mesh
#
# `gpu_runs/mesh_3d.py` 의 tiny preset 을 `torchrun` 으로 4 개 process 에 띄웁니다. 이 프로그램은 한 process 에서 같은 모델을 같은
# batch 로 학습한 결과와 loss, parameter 를 비교하고, pass 마다 collective 를 셉니다.

# %%
assert (best["d"], best["t"]) == (2, 2), best
out = Path(tempfile.mkdtemp(prefix="ch7-lab-"))
env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
torchrun = str(Path(sys.executable).with_name("torchrun"))
proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node=4", "gpu_runs/mesh_3d.py", "--preset", "tiny",
                       "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
assert proc.returncode == 0, proc.stderr[-2000:]
run = json.loads(next(out.glob("*.json")).read_text())
m = run["measurements"]
print(f"world {run['hardware']['world_size']}, mesh {m['mesh']}; 한 process 와의 loss 최대 차이 {m['max_abs_loss_diff']:.1e}, "
      f"parameter 최대 차이 {m['max_abs_param_diff']:.1e}")

# %% [markdown]
# ## 4. 계획과 측정
#
# Planner 의 model state 는 ZeRO-3 (FSDP) 에서 rank 당 $\psi/(t \cdot d)$ 개 parameter 입니다. 측정은 fp32 parameter 의 local shard 입니다.
# 차이는 TP 가 복제하는 `RowwiseParallel` 의 bias ($L \cdot h$ 개) 뿐이라는 것이 정리 7.1.5 입니다. 통신은 TP 가 block 마다 forward 1 번
# (transformer layer 는 attention 과 MLP 에 하나씩 2 번: `tp_cost`), backward 는 첫 block 을 빼고 1 번, FSDP 는 block 마다 all-gather
# 2 번과 reduce-scatter 1 번입니다.

# %%
d, t = best["d"], best["t"]
plan_params = psi / (t * d)
replicated = L * h
for rk in m["ranks"]:
    local = rk["local_param_bytes"] / 4
    c = rk["counts_step0"]
    print(f"rank {rk['rank']} (dp {rk['dp_rank']}, tp {rk['tp_rank']}): parameter {local:,.0f} = 계획 {plan_params:,.0f} "
          f"+ 복제 bias 몫 {replicated * (1 / d - 1 / (d * t)):,.0f} → {local == plan_params + replicated * (1 / d - 1 / (d * t))}; "
          f"TP all-reduce fwd/bwd {c['tp_forward'].get('all_reduce')}/{c['tp_backward'].get('all_reduce')}, "
          f"FSDP AG {c['dp_forward']['all_gather_single']['calls']}+{c['dp_backward']['all_gather_single']['calls']}, "
          f"RS {c['dp_backward']['reduce_scatter_single']['calls']}")
per_layer = tc.tp_collectives_per_layer()
ok = all(rk["counts_step0"]["tp_forward"].get("all_reduce") == L * per_layer["forward"]["all_reduce"] // 2
         and rk["counts_step0"]["tp_backward"].get("all_reduce") == L - 1
         and rk["counts_step0"]["dp_backward"]["reduce_scatter_single"]["calls"] == L for rk in m["ranks"])
print("계획과 측정이 모든 rank 에서 맞는가:", ok)

# %% [markdown]
# ## 해볼 것
#
# - 2 절의 `mem_bytes` 를 `need[1]` 보다 크게 하면 planner 는 무엇을 고르는가? 그 배치에서 TP 는 왜 필요 없어지는가?
# - `intra_bw` 와 `inter_bw` 를 바꿔 TP 를 node 밖으로 내보내면 (node 당 1 개) 1 절의 순위는 어떻게 바뀌는가? (`max_t` 인자도 보세요.)

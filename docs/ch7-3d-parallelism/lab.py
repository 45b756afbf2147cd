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
# 5. 잰 bytes 를 Ch7-01 의 링크 속도로 시간으로 바꾸고, 70B 의 planner 숫자 옆에 둡니다.

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
# **예측해 보세요** (다음 cell 을 실행하기 전에 적어 두십시오): rank 하나가 step 하나에 보내는 TP AllReduce 는 A 와 B 중 어느 쪽이 많은가?
# Pipeline 의 send 는 B 의 stage 0 에서 몇 번인가? FSDP2 의 AllGather 는 A 에서 block 당 몇 번인가 (micro-batch 4 개, forward 와
# backward 에 한 번씩이면 8 번)?

# %%
from gpu_runs import mesh_pp

cfg = dict(mesh_pp.PRESETS["tiny"])   # the preset the runs below use: L, h, B, m, schedule
layouts = {"A": (2, 1, 2), "B": (1, 2, 2)}
pred = {k: {pp_rank: page.mesh_pp_prediction(cfg, d, p, t, pp_rank) for pp_rank in range(p)}
        for k, (d, p, t) in layouts.items()}
for k, (d, p, t) in layouts.items():
    for s, x in pred[k].items():
        print(f"배치 {k} (d, p, t) = ({d}, {p}, {t}), stage {s}: TP AllReduce {x['tp_all_reduce']} 번 "
              f"({x['tp_all_reduce_bytes']:,} B), PP send {x['p2p_isend']} 번 ({x['p2p_bytes_each_way']:,} B), "
              f"FSDP AllGather {x['fsdp_all_gather']} 번 ({x['fsdp_all_gather_bytes']:,} B), "
              f"ReduceScatter {x['fsdp_reduce_scatter']} 번")

# %% [markdown]
# 예측의 근거: TP 는 micro-batch 마다 block 당 forward 1 번, backward 1 번 (첫 stage 의 첫 block 만 backward 0 번), 크기는 micro-batch 의
# activation $(B/(d m)) \cdot h \cdot 4$ bytes 입니다. A 는 한 rank 가 block 4 개를 모두 갖고 micro-batch 가 작으며 ($B/(dm) = 2$ 행), B 는
# stage 가 block 2 개만 갖고 micro-batch 가 큽니다 (4 행). FSDP2 의 AllGather 수는 1F1B 의 순서가 정합니다 (Ch7-01 실험 6):

# %%
from snippets.common import pipeline_sim as ps

print(inspect.getsource(page.fsdp_gathers_in_pipeline))
order = ps.rank_order("1f1b", 0, 1, 4)
print("p = 1 의 순서:", " ".join(a + str(mb) for a, mb, _ in order), "→ block 당 AllGather",
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
              f"{meas['tp_all_reduce_bytes']:,} B, PP send {meas['p2p_isend']} 번, FSDP AllGather {meas['fsdp_all_gather']} 번 "
              f"{meas['fsdp_all_gather_bytes']:,} B → 예측과 같은가 {same}")
    print(f"배치 {k}: 예측과 측정이 모든 rank 에서 같은가: {ok}")
a0, b0 = page.mesh_pp_measured(runs["A"]["measurements"]["ranks"][0]), page.mesh_pp_measured(runs["B"]["measurements"]["ranks"][0])
a_fsdp = a0["fsdp_all_gather_bytes"] + a0["fsdp_reduce_scatter_bytes"]
a_sum, b_sum = a0["tp_all_reduce_bytes"] + a_fsdp, b0["tp_all_reduce_bytes"] + b0["p2p_bytes_each_way"]
print(f"\nrank 0 의 collective 크기 S 의 합 (nccl-tests 의 S: AllReduce 는 입력, AllGather 는 모은 출력, ReduceScatter 는 입력): "
      f"배치 A 는 TP {a0['tp_all_reduce_bytes']:,} + FSDP (AllGather + ReduceScatter) {a_fsdp:,} = {a_sum:,}, "
      f"배치 B 는 TP {b0['tp_all_reduce_bytes']:,} + PP {b0['p2p_bytes_each_way']:,} = {b_sum:,}. "
      f"이 작은 모델에서는 {'A' if a_sum > b_sum else 'B'} 가 더 많이 옮깁니다.")

# %% [markdown]
# 이 작은 모델은 parameter 에 비해 activation 이 작아서 FSDP2 의 AllGather (parameter) 가 TP 의 AllReduce (activation) 보다 큽니다. 70B 에서는
# 반대입니다 (Ch7-01 정리 7.1.3: step 당 token 이 수백만이면 TP 의 양이 DP 의 수백 배). 같은 식이 두 경우를 모두 맞힙니다: 예측과 측정이
# 같다는 것은 *식의 구조* 가 맞다는 뜻이고, 어느 배치가 빠른지는 그 양을 각 링크의 대역폭으로 나눈 뒤에야 정해집니다.
#
# ## 5. bytes 를 시간으로: Ch7-01 의 링크에서
#
# 위에서 잰 rank 0 의 축마다의 호출 수와 bytes 를, Ch7-01 의 planner 가 쓰는 H100 링크 (`pl.H100_64`: node 안 NVLink 와 node 사이 NIC 의
# 방향당 대역폭, message 당 $\alpha$) 로 ring 의 $\alpha$-$\beta$ 시간 (Ch1-03, Ch3-05) 으로 바꿉니다. 4 process 를 GPU 2 개짜리 node 2 개로
# 보고, planner 의 규칙대로 TP 를 node 안에 둘 때와 node 밖으로 낼 때를 비교합니다. 그 옆에 같은 두 모양 (TP + DP, TP + PP) 의 70B·64 GPU
# 배치 ($t = 8$) 를 Ch7-01 실험 1 의 bytes 와 planner 의 시간으로 둡니다.
#
# **예측해 보세요**: bytes 로 더 많이 옮기는 A 가, 시간으로도 더 느린가? TP 를 node 밖으로 내면 순서가 바뀌는가?

# %%
from snippets.common import alphabeta as ab
from snippets.common import tp_cost as tc

LINKS = {"intra": (pl.H100_64.alpha_intra, 1 / pl.H100_64.intra_bw), "inter": (pl.H100_64.alpha_inter, 1 / pl.H100_64.inter_bw)}
n = 2   # every axis of the 2×2 mesh has 2 ranks


def axis_seconds(x: dict, axis: str, link: str) -> tuple[float, float]:
    """Rank 0's measured calls and bytes on one axis → (seconds, of which α), ring α-β with S = bytes per call."""
    al, be = LINKS[link]
    ring = {"tp": [(ab.ring_allreduce_time, x["tp_all_reduce"], x["tp_all_reduce_bytes"])],
            "dp": [(tc.ring_allgather_time, x["fsdp_all_gather"], x["fsdp_all_gather_bytes"]),
                   (tc.ring_allgather_time, x["fsdp_reduce_scatter"], x["fsdp_reduce_scatter_bytes"])]}
    if axis == "pp":                                   # one point-to-point message per send: α + Sβ
        return x["p2p_isend"] * al + x["p2p_bytes_each_way"] * be, x["p2p_isend"] * al
    total = sum(c * float(f(n, b / c, al, be)) for f, c, b in ring[axis] if c)
    return total, sum(c * float(f(n, b / c, al, 0.0)) for f, c, b in ring[axis] if c)


outer = {"A": "dp", "B": "pp"}
meas0 = {"A": a0, "B": b0}
calls = {"tp": lambda x: (x["tp_all_reduce"], x["tp_all_reduce_bytes"]),
         "dp": lambda x: (x["fsdp_all_gather"] + x["fsdp_reduce_scatter"], x["fsdp_all_gather_bytes"] + x["fsdp_reduce_scatter_bytes"]),
         "pp": lambda x: (x["p2p_isend"], x["p2p_bytes_each_way"])}
placements = {"TP 가 node 안": {"tp": "intra", "outer": "inter"}, "TP 가 node 밖": {"tp": "inter", "outer": "intra"}}
secs = {}
for where, lk in placements.items():
    for k in layouts:
        x, o = meas0[k], outer[k]
        tp_s, tp_a = axis_seconds(x, "tp", lk["tp"])
        o_s, o_a = axis_seconds(x, o, lk["outer"])
        secs[where, k] = tp_s + o_s
        print(f"배치 {k}, {where}: TP {calls['tp'](x)[0]} 번 {calls['tp'](x)[1]:,} B → {tp_s * 1e6:.2f} µs, "
              f"{o.upper()} {calls[o](x)[0]} 번 {calls[o](x)[1]:,} B → {o_s * 1e6:.2f} µs; 합 {(tp_s + o_s) * 1e6:.2f} µs "
              f"(그중 α {(tp_a + o_a) * 1e6:.2f} µs)")

more = "A" if a_sum > b_sum else "B"
fast = {where: min(layouts, key=lambda k: secs[where, k]) for where in placements}
flips = [where for where in placements if fast[where] == more]
print(f"\n읽기 (작은 모델): bytes 로는 {more} 가 더 많이 옮깁니다 ({max(a_sum, b_sum):,} 대 {min(a_sum, b_sum):,} B). 시간으로는 "
      + ", ".join(f"{where}일 때 {fast[where]} 가 {max(secs[where, 'A'], secs[where, 'B']) / min(secs[where, 'A'], secs[where, 'B']):.1f} 배"
                  for where in placements) + " 빠릅니다"
      + (": bytes 가 시간이 되어도 더 빠른 배치는 뒤집히지 않습니다." if not flips
         else f": {', '.join(flips)} 에서 더 빠른 배치가 뒤집힙니다 (bytes 가 많은 쪽이 빠름)."))
alpha_share = {k: sum(axis_seconds(meas0[k], ax, placements['TP 가 node 안'][lk])[1]
                      for ax, lk in (("tp", "tp"), (outer[k], "outer"))) / secs["TP 가 node 안", k] for k in layouts}
print(f"이 크기에서 시간의 대부분은 α 입니다 (TP 가 node 안일 때 A {alpha_share['A']:.1%}, B {alpha_share['B']:.1%}): message 가 수백 "
      "bytes 라 호출 수가 시간을 정하고, bytes 는 거의 보태지 않습니다.")

print()
M70, C70, B70 = pl.LLAMA70B, pl.H100_64, pl.BATCH_4M
big = {"A": (8, 8, 1), "B": (1, 8, 8)}    # (d, t, p): TP + DP and TP + PP, t = 8 = GPUs per node
ev70, by70, link_s, comm70 = {}, {}, {}, {}
for k, (d, t, p) in big.items():
    ev70[k], by70[k] = pl.evaluate(M70, C70, B70, d, t, p), page.bytes_per_step(M70, B70, d, t, p)
    bw = {"intra": C70.intra_bw, "inter": C70.inter_bw}
    link_s[k] = sum(by70[k][ax] / bw[ev70[k]["links"][ax]] for ax in ("tp", "pp", "dp"))
    comm70[k] = comm = sum(v for key, v in ev70[k]["comm_s"].items() if key != "tp_hidden")
    print(f"70B, {k} 의 모양 (d, t, p) = ({d}, {t}, {p}): bytes TP {by70[k]['tp'] / 1e9:,.1f} GB ({ev70[k]['links']['tp']}), "
          f"PP {by70[k]['pp'] / 1e9:,.1f} GB, DP {by70[k]['dp'] / 1e9:,.1f} GB → 링크 시간 {link_s[k]:.2f} s; planner 의 통신 "
          f"{comm:.2f} s, 계산 {ev70[k]['compute_s']:.1f} s, bubble {ev70[k]['bubble']:.1%}, step {ev70[k]['step_s']:.1f} s, "
          f"{C70.mem_bytes / 1e9:.0f} GB 예산에 "
          f"{'들어감' if ev70[k]['fits'] else '안 들어감'}")
more70 = max(big, key=lambda k: sum(by70[k].values()))
fast70, step70 = min(big, key=lambda k: link_s[k]), min(big, key=lambda k: ev70[k]["step_s"])
print(f"\n읽기 (70B): bytes 로는 {more70} 가 더 많이 옮기고, 링크 시간으로는 {fast70} 가 빠릅니다"
      + (" (뒤집히지 않음)" if fast70 != more70 else " (뒤집힘)")
      + f". 두 배치의 TP bytes 는 같아 ({by70['A']['tp'] / 1e9:,.1f} GB, 모두 NVLink) 차이는 DP 대 PP 의 몇십 GB 뿐입니다. "
      f"Planner 의 step 으로는 {step70} 가 빠릅니다: 통신의 차이 "
      f"{abs(comm70['A'] - comm70['B']):.2f} s 보다 step 의 차이 {abs(ev70['A']['step_s'] - ev70['B']['step_s']):.2f} s 가 크고, "
      "그 나머지는 가장 느린 stage 의 계산과 bubble 이 정합니다"
      + ("" if all(ev70[k]["fits"] for k in big)
         else f". 또 {', '.join(k for k in big if not ev70[k]['fits'])} 의 모양은 {C70.mem_bytes / 1e9:.0f} GB 예산에 들어가지 않습니다")
      + ". 작은 모델과 달리 70B 의 시간은 α 가 아니라 bytes 가 정합니다.")

# %% [markdown]
# ## 해볼 것
#
# 1. `gpu_runs/mesh_pp.py` 의 tiny preset 에서 `B` 를 64 로 키우면 (token 을 늘리면) 배치 A 와 B 의 TP bytes 와 FSDP bytes 는 각각 어떻게 변하는가? 먼저 식으로 예측하십시오.
# 2. `--schedule GPipe` 로 배치 A 를 다시 돌리면 FSDP2 의 AllGather 는 block 당 몇 번인가? (`page.fsdp_gathers_in_pipeline` 에 GPipe 의 순서를 넣어 보십시오.)
# 3. 1 절에서 `micro_batch=2` 로 바꾸면 상위 5 개는 어떻게 바뀌는가? 왜 $t = 4$ 배치가 사라지는가?
#
# <details><summary>해설</summary>
#
# **1.** TP 의 AllReduce 하나는 micro-batch 의 activation $S = (B/(dm)) \cdot h \cdot 4$ bytes 이고 호출 수는 shape 에서 정해지므로, $B$ 를
# 4 배로 하면 TP bytes 는 두 배치 모두 4 배가 됩니다. 배치 B 의 PP send 도 같은 $S$ 라 4 배입니다. FSDP2 의 AllGather 와 ReduceScatter 는
# block 의 parameter 조각을 옮기므로 token 수와 무관해 그대로입니다. 그래서 A 의 합에서 TP 의 몫이 커지지만 $B = 64$ 에서도 FSDP 가 더 크고,
# 아래 cell 이 TP 가 FSDP 를 넘는 $B$ 를 셉니다 (70B 는 token 이 수백만이라 그 너머에 있습니다). 실제로 돌리면 (preset 의 `B` 를 64 로 바꾸고
# 2–4 절을 다시 실행) 예측 cell 의 값과 측정이 다시 rank 마다 같습니다: `mesh_pp_prediction` 은 $B$ 를 preset 에서 읽고, 바뀌는 것은 $S$ 뿐입니다.
#
# **2.** 배치 A 는 $p = 1$ 이라 한 rank 의 순서가 GPipe 에서는 F0 F1 F2 F3 B0 B1 B2 B3, 1F1B 에서는 F0 B0 F1 B1 … 입니다. 규칙은 "parameter 가
# 나뉘어 있으면 모은다, forward 뒤에는 다시 나눈다 (`reshard_after_forward=True`), backward 뒤에는 마지막 micro-batch 까지 모은 채 둔다" 입니다.
# GPipe 는 forward 마다 모으고 (4 번) 첫 backward 에서 한 번 더 모아 block 당 5 번, 1F1B 는 첫 forward 와 backward 마다 모아 역시 5 번입니다.
# 어느 순서든 forward 뒤에는 다시 나뉘니 forward 다음의 작업 ($m$ 번) 과 맨 첫 작업이 모으고, backward 다음의 작업만 모으지 않습니다: 순서가
# backward 로 끝나는 한 $m + 1$ 이라 답은 1F1B 와 같습니다 (아래 cell 이 $p = 2$ 의 stage 0 에서도 셉니다). 횟수를 바꾸는 것은 순서가 아니라
# `reshard_after_forward` 입니다 (`False` 면 첫 한 번). `--schedule GPipe` 로 돌린 실행도 rank 마다 AllGather 20 번 (block 4 개 × 5) 을 기록하고,
# 예측 cell 의 값과 같습니다.
#
# **3.** Micro-batch 를 2 로 키우면 layer 당 activation 이 2 배가 됩니다. 첫 stage 에 in-flight 인 micro-batch 수 $\min(p, m)$ 은 $m$ 이 반이
# 되어도 $p$ 에 묶여 그대로라 activation memory 가 거의 2 배가 되고, $t = 4$ 배치는 모두 72 GB 예산을 넘습니다. 들어가는 배치는 $t = 8$
# 뿐이라 1 위가 $t = 8$ 로 바뀌고, 상위 5 개 가운데 나머지는 예산에 안 들어가는 배치입니다 (planner 는 들어가는 배치를 먼저, 나머지를 뒤에
# 세웁니다). 아래 cell 이 $t = 4$ 의 가장 작은 memory 를 예산과, nvidia-smi 가 보고하는 HBM 용량에 댑니다: 그 배치를 지우는 것은 72 GB
# 라는 여유 가정입니다.
#
# </details>
#
# 해설의 수를 세는 cell 입니다 (먼저 풀어 본 뒤 실행하십시오).

# %%
pred64 = {k: page.mesh_pp_prediction({**cfg, "B": 64}, d, p, t, 0) for k, (d, p, t) in layouts.items()}
for k in layouts:
    x16, x64 = pred[k][0], pred64[k]
    print(f"1. 배치 {k}, rank 0, B = 16 → 64: TP {x16['tp_all_reduce_bytes']:,} → {x64['tp_all_reduce_bytes']:,} B "
          f"(×{x64['tp_all_reduce_bytes'] / x16['tp_all_reduce_bytes']:.0f}), PP {x16['p2p_bytes_each_way']:,} → {x64['p2p_bytes_each_way']:,} B, "
          f"FSDP {x16['fsdp_all_gather_bytes'] + x16['fsdp_reduce_scatter_bytes']:,} → "
          f"{x64['fsdp_all_gather_bytes'] + x64['fsdp_reduce_scatter_bytes']:,} B")
tp_per_row = pred["A"][0]["tp_all_reduce_bytes"] / cfg["B"]
fsdp_a = pred["A"][0]["fsdp_all_gather_bytes"] + pred["A"][0]["fsdp_reduce_scatter_bytes"]
step_b = layouts["A"][0] * cfg["m"]                       # B must divide into d·m micro-batch rows
b_cross = next(b for b in range(step_b, 100_000, step_b) if b * tp_per_row > fsdp_a)
print(f"   배치 A 에서 TP bytes 가 FSDP bytes ({fsdp_a:,} B) 를 넘는 가장 작은 B: {b_cross} 행")
for sched in ("gpipe", "1f1b"):
    o1, o2 = ps.rank_order(sched, 0, 1, cfg["m"]), ps.rank_order(sched, 0, 2, cfg["m"])
    print(f"2. {sched}: p = 1 의 순서 {' '.join(a + str(mb) for a, mb, _ in o1)} → block 당 AllGather "
          f"{page.fsdp_gathers_in_pipeline(o1)} 번 (배치 A 의 rank 당 {cfg['L'] * page.fsdp_gathers_in_pipeline(o1)} 번); "
          f"p = 2 의 stage 0 이면 {page.fsdp_gathers_in_pipeline(o2)} 번")
b2 = pl.plan(M, C, replace(B, micro_batch=2))
t4 = min((r for r in b2 if r["t"] == 4), key=lambda r: r["mem"]["total"])
t4_b1 = pl.evaluate(M, C, B, t4["d"], t4["t"], t4["p"])                 # the same layout at micro_batch=1
print(f"3. micro_batch=2 의 상위 5 개: " + ", ".join(f"{r['d']}·{r['t']}·{r['p']} ({r['step_s']:.1f} s, "
                                                 f"{'들어감' if r['fits'] else '안 들어감'})" for r in b2[:5]))
print(f"   t = 4 의 가장 작은 memory {t4['d']}·{t4['t']}·{t4['p']}: {t4['mem']['total'] / 1e9:.1f} GB (activation "
      f"{t4['mem']['activations'] / 1e9:.1f} GB, micro_batch=1 에서는 {t4_b1['mem']['activations'] / 1e9:.1f} GB) > 예산 {C.mem_bytes / 1e9:.0f} GB; nvidia-smi 가 보고하는 "
      f"{page.H100_80GB_HBM / 1e9:.1f} GB 에는 {'들어감' if t4['mem']['total'] <= page.H100_80GB_HBM else '안 들어감'}")

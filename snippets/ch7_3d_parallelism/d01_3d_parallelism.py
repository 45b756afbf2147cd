"""Ch7-01 3D Parallelism: the code the page runs and the tests import.

The planner itself is shared (snippets/common/planner_3d.py: the lab and the browser calculators use it
too); this module holds what only the page needs: the bytes each axis sends per step (Theorem 7.1.3),
the TP/DP ratio in closed form (Corollary 7.1.4), the planner's table, and the predictions checked
against the real 2×2 (dp, tp) mesh run (gpu_runs/mesh_3d.py).
"""
from __future__ import annotations

from snippets.common import alphabeta as ab
from snippets.common import planner_3d as pl
from snippets.common import tp_cost as tc
from snippets.common import zero_memory as zm


# --8<-- [start:traffic]
def bytes_per_step(model: pl.Model, batch: pl.Batch, d: int, t: int, p: int, zero_stage: int = 1) -> dict:
    """Bytes one GPU sends per training step on each axis (ring collectives, 16-bit tensors).

    TP: 4 collectives per layer per micro-batch, each 2(t−1)/t·S with S = b·s·h·e (Ch3-05), L/p layers, m
    micro-batches. PP: one activation forward and one gradient backward per micro-batch, S/t each (SP
    scatters the boundary tensor). DP: a ring all-reduce of e·ψ/(t·p) gradient bytes (Ch1-03), plus a ring
    all-gather of the parameters under ZeRO-3. Ring bytes come from alphabeta with α = 0, β = 1 s/byte."""
    b, s, h, L = batch.micro_batch, model.seq, model.hidden, model.layers
    m = batch.global_batch // (d * b)
    tp = float(tc.tp_bytes_sent_per_rank_per_layer(t, b, s, h)) * (L / p) * m if t > 1 else 0.0
    pp = 2 * m * tc.tp_allreduce_bytes(b, s, h) / t if p > 1 else 0.0
    shard = zm.GRAD_BYTES * model.psi / (t * p)
    dp = float(ab.ring_allreduce_time(d, shard, 0.0, 1.0)) if d > 1 else 0.0
    if zero_stage == 3 and d > 1:
        dp += float(tc.ring_allgather_time(d, shard, 0.0, 1.0))
    return {"tp": tp, "pp": pp, "dp": dp}


def tp_over_dp(t: int, d: int, tokens: float, h: int) -> float:
    """Corollary 7.1.4 with ψ = 12Lh²: V_TP / V_DP = (t−1)/(d−1) · (tokens per step)/(3h)."""
    return (t - 1) / (d - 1) * tokens / (3 * h)
# --8<-- [end:traffic]


def traffic_rows(model: pl.Model, cluster: pl.Cluster, batch: pl.Batch, d: int, t: int, p: int) -> list[list]:
    """Bytes per step per axis, and their time over the intra-node and inter-node link."""
    v = bytes_per_step(model, batch, d, t, p)
    return [[axis.upper(), f"{v[axis] / 1e9:,.2f}", f"{v[axis] / cluster.intra_bw:,.3f}",
             f"{v[axis] / cluster.inter_bw:,.3f}"] for axis in ("tp", "pp", "dp")]


# --8<-- [start:table]
def planner_table(rows: list[dict], k: int | None = None, extra: list[dict] = ()) -> list[list]:
    """Rows of the planner's ranking as table cells (rank, layout, links, memory, comm, bubble, step)."""
    out = []
    for i, r in enumerate(list(rows[:k] if k else rows) + list(extra)):
        mem, c = r["mem"], r["comm_s"]
        rank = rows.index(r) + 1 if r in rows else "—"
        out.append([rank, f"{r['d']}·{r['t']}·{r['p']}", r["m"],
                    "/".join(r["links"][a][:5] for a in ("tp", "pp", "dp")),
                    f"{(mem['params'] + mem['grads'] + mem['optimizer']) / 1e9:.1f}", f"{mem['activations'] / 1e9:.1f}",
                    f"{mem['total'] / 1e9:.1f}" + ("" if r["fits"] else " ✗"),
                    f"{c['tp']:.2f}", f"{c['pp']:.2f}", f"{c['dp']:.2f}", f"{100 * r['bubble']:.1f}%",
                    f"{r['step_s']:.1f}"])
    return out


TABLE_HEADER = ["순위", "d·t·p", "m", "링크 tp/pp/dp", "model states GB", "activation GB", "합 GB",
                "TP s", "PP s", "DP s", "bubble (이상 시간 대비)", "step s"]
# --8<-- [end:table]


def find(rows: list[dict], d: int, t: int, p: int) -> dict:
    return next(r for r in rows if (r["d"], r["t"], r["p"]) == (d, t, p))


# --8<-- [start:mesh]
def mesh_prediction(params: dict, d: int, t: int) -> dict:
    """What the (dp, tp) mesh run must show, from the model's shape alone.

    TP (DTensor, Megatron MLP): one all-reduce per block forward (after RowwiseParallel), one per block
    backward (before ColwiseParallel) except the first block, whose input needs no gradient.
    FSDP2 (reshard_after_forward=True): per block one all-gather forward, one all-gather and one
    reduce-scatter backward. Bytes per rank: every tensor is split d·t ways, except the row-parallel
    bias, which TP replicates (Replicate on tp) and FSDP2 splits d ways only."""
    L, h = params["L"], params["h"]
    per_block = (h * 4 * h + 4 * h) + (4 * h * h + h)
    total = L * per_block
    replicated = L * h                                # RowwiseParallel's bias
    local = 4 * ((total - replicated) / (d * t) + replicated / d)
    return {"tp_forward_all_reduce": L, "tp_backward_all_reduce": L - 1,
            "dp_all_gather_forward": L, "dp_all_gather_backward": L, "dp_reduce_scatter": L,
            "total_params": total, "local_param_bytes": local,
            "dp_all_gather_bytes": d * local}        # forward total of the gathered outputs (S, nccl-tests)


def mesh_rows(r) -> list[list]:
    """Predicted vs measured, every rank."""
    m, p = r.measurements, r.params
    pred = mesh_prediction(p, m["d"], m["t"])
    out = []
    for k in m["ranks"]:
        c = k["counts_step0"]
        meas = {"tp_forward_all_reduce": c["tp_forward"].get("all_reduce", 0),
                "tp_backward_all_reduce": c["tp_backward"].get("all_reduce", 0),
                "dp_all_gather_forward": c["dp_forward"]["all_gather_single"]["calls"],
                "dp_all_gather_backward": c["dp_backward"]["all_gather_single"]["calls"],
                "dp_reduce_scatter": c["dp_backward"]["reduce_scatter_single"]["calls"],
                "local_param_bytes": k["local_param_bytes"],
                "dp_all_gather_bytes": c["dp_forward"]["all_gather_single"]["bytes"]}
        out.append({"rank": k["rank"], "dp_rank": k["dp_rank"], "tp_rank": k["tp_rank"], "measured": meas,
                    "predicted": {key: pred[key] for key in meas}, "same_every_step": k["counts_same_every_step"]})
    return out
# --8<-- [end:mesh]


def mesh_tables(r) -> tuple[str, str]:
    """One mesh_3d results file as two Markdown tables: loss against one process, and the collectives
    per step against Theorem 7.1.5 on every rank."""
    from snippets import results

    m = r.measurements
    losses = results.markdown_table(["step", f"{m['d']}×{m['t']} mesh 의 loss", "한 process 의 loss", "|차이|"],
                                    [[i, f"{a:.9f}", f"{b:.9f}", f"{abs(a - b):.1e}"]
                                     for i, (a, b) in enumerate(zip(m["losses"], m["ref_losses"]))])
    names = {"tp_forward_all_reduce": "TP all-reduce, forward", "tp_backward_all_reduce": "TP all-reduce, backward",
             "dp_all_gather_forward": "FSDP all-gather, forward", "dp_all_gather_backward": "FSDP all-gather, backward",
             "dp_reduce_scatter": "FSDP reduce-scatter, backward"}
    ranks = mesh_rows(r)
    counts = results.markdown_table(["collective (step 당)", "예측 (정리 7.1.5, Ch3)", f"측정 (rank 0–{len(ranks) - 1})"],
                                    [[v, ranks[0]["predicted"][k], ", ".join(str(x["measured"][k]) for x in ranks)]
                                     for k, v in names.items()])
    return losses, counts


# --8<-- [start:gemm]
def gemm_efficiency(r) -> list[dict]:
    """One gemm_bench results file: every swept GEMM's measured TFLOP/s as a fraction of the same file's
    measured peak (measurements["peak"]["tflops"]). Families: square, and the Megatron TP shard shapes
    mlp_up, mlp_down, qkv, attn_out of a layer of width h split t ways."""
    peak = float(r.measurements["peak"]["tflops"])
    return [{**g, "efficiency": float(g["tflops"]) / peak} for g in r.measurements["sweep"]]
# --8<-- [end:gemm]


GEMM_FAMILIES = ("square", "mlp_up", "mlp_down", "qkv", "attn_out")


def planner_comparable(plat, r, dtype: str = "bfloat16") -> bool:
    """Whether a gemm_bench file may be set against the planner's F and MFU: only a GPU's, and only when its
    peak was measured in the planner's dtype (F is a bf16 dense peak). scripts/runs.py also runs gemm_bench on
    CPU, in float32: that file's efficiency is against its own peak, and comparing it with F would mix
    hardware and dtype."""
    return plat.is_gpu and r.measurements["peak"].get("dtype") == dtype


def gemm_table(r, mfu: float, focus: tuple[int, int] | None = None, flops: float | None = None,
               compare: bool = True) -> str:
    """A pivot of gemm_efficiency: one row per (h, t, tokens), one column per family (efficiency, %), and
    a closing line that sets the measured range, and the shards of the planner's layout `focus` = (h, t)
    when the sweep has it, beside the planner's assumed MFU. The table's efficiency is against the file's
    own measured peak; MFU is against the catalogue peak F (`flops`), so the line also gives the shards'
    TFLOP/s over F, the number comparable with the planner's F·MFU. compare=False (a CPU file, or a dtype
    other than the planner's: planner_comparable) leaves out F and the MFU and says why."""
    from snippets import results

    rows = gemm_efficiency(r)
    keys = sorted({(g["h"], g["t"]) for g in rows})
    fams = [f for f in GEMM_FAMILIES if any(g["family"] == f for g in rows)]
    cell = {(g["h"], g["t"], g["family"]): g for g in rows}  # square: h × h @ h × h, in its row t = 1
    tokens = sorted({g["tokens"] for g in rows if g["family"] != "square"})
    table = results.markdown_table(
        ["h", "t", *fams],
        [[h, t, *("—" if (h, t, f) not in cell else f"{cell[(h, t, f)]['efficiency']:.0%}" for f in fams)]
         for h, t in keys])
    table = f"GEMM TFLOP/s ÷ peak; shard 의 행 수 m = tokens = {', '.join(f'{n:,}' for n in tokens)}\n\n" + table
    shards = [g for g in rows if g["family"] != "square" and g["t"] > 1]
    peak = r.measurements["peak"]
    parts = [f"peak: {float(peak['tflops']):.3g} TFLOP/s ({peak.get('dtype', '')}"
             + (f", {peak['m']}×{peak['n']}×{peak['k']}" if all(k in peak for k in "mnk") else "") + ")"]
    if shards:
        eff = [g["efficiency"] for g in shards]
        parts.append(f"TP shard 모양 ($t > 1$) 의 GEMM 효율: {min(eff):.0%}–{max(eff):.0%}")
        if flops and compare:
            of_f = [float(g["tflops"]) * 1e12 / flops for g in shards]
            parts.append(f"같은 shard 의 TFLOP/s ÷ planner 의 F ({flops / 1e12:.0f} TFLOP/s): {min(of_f):.0%}–{max(of_f):.0%}")
    mine = [g for g in rows if focus and (g["h"], g["t"]) == tuple(focus)]
    if mine:
        parts.append(f"$h = {focus[0]}$, $t = {focus[1]}$ (실험 1 의 배치) 의 shard: "
                     + ", ".join(f"{g['family']} {g['efficiency']:.0%}" for g in mine))
    if compare:
        parts.append(f"planner 가 가정한 MFU: {mfu:.0%}. GEMM 효율은 그 GEMM 혼자의 상한이라, attention·LayerNorm·통신이 섞인 "
                     "step 의 MFU 는 그보다 낮습니다")
    else:
        parts.append(f"이 파일은 GPU 의 bf16 측정이 아니라서 ({peak.get('dtype', '?')}) planner 의 F 와 MFU (GPU 의 bf16 peak 기준) "
                     "와는 비교하지 않습니다. 효율은 이 하드웨어 자신의 peak 에 대한 비율입니다")
    line = "; ".join(parts) + "."
    return table + "\n\n" + line

"""Ch5-04 ZeRO-3 — Parameter Sharding: the code the page runs and the tests import.

The formulas (per-rank memory (4+K)ψ/N, communication 3ψ) live in snippets.common.zero_memory;
this module adds what is specific to ZeRO-3: DeepSpeed's per-tensor padding and persistence
rule, the per-layer gather/free schedule with and without prefetch, and the readers for the
DeepSpeed measurements saved by gpu_runs/zero_bench.py. Every reader takes the runs of one hardware
(a results.Platform's `.runs`), so the page's tabs compare each hardware's files with the formulas.
"""
from __future__ import annotations

import math

from snippets.common import zero_memory as zm


# --8<-- [start:formula]
def zero3_terms(psi: float, n: int, k: float = zm.K_ADAM) -> dict[str, float]:
    """Per-rank bytes of each model state under ZeRO-3: 2ψ/N, 2ψ/N, Kψ/N (shared formula)."""
    return zm.zero_memory_breakdown(psi, n, 3, k)


def comm_per_step(psi: float, n: int, stage: int, elem: int = 2) -> dict[str, float]:
    """Bytes per optimizer step for one rank, for 16-bit params/grads (elem bytes each).

    `volume` is the paper's count (units of ψ · elem): 2ψ for DP / ZeRO-1/2, 3ψ for ZeRO-3.
    `sent` is what a ring implementation actually sends per rank: each all-gather or
    reduce-scatter of S bytes sends (N−1)/N · S (Ch1-03), an all-reduce twice that.
    """
    volume = zm.zero_comm_volume(psi, stage) * elem
    return {"volume": volume, "sent": volume * (n - 1) / n}
# --8<-- [end:formula]


# --8<-- [start:padding]
def shard_numel(numel: int, n: int) -> int:
    """DeepSpeed pads each parameter tensor to a multiple of N and gives every rank ceil(numel/N).

    (deepspeed/runtime/zero/partition_parameters.py: _aligned_size = ds_numel + _padding_size,
    partition_size = aligned_size // world_size.)
    """
    return math.ceil(numel / n)


def predicted_rank_numel(numels, n: int, persistence_threshold: int = 100_000) -> dict[str, int]:
    """Elements one rank holds under DeepSpeed ZeRO-3 for parameter tensors of sizes `numels`.

    shards:     Σ ceil(numel_i / N) — every tensor is partitioned, the optimizer works on these
    persistent: Σ numel_i over tensors with numel_i ≤ threshold — these also stay gathered in
                full on every rank (param.ds_persist), so they are never all-gathered
    ideal:      ψ / N, the formula's share
    """
    numels = list(numels)
    psi = sum(numels)
    shards = sum(shard_numel(x, n) for x in numels)
    persistent = sum(x for x in numels if x <= persistence_threshold) if n > 1 else 0
    return {"psi": psi, "shards": shards, "padding": shards * n - psi, "persistent": persistent,
            "ideal": psi / n}
# --8<-- [end:padding]


# --8<-- [start:schedule]
def zero3_schedule(layers: int, prefetch: bool):
    """Event list of one ZeRO-3 step over `layers` layers, and the peak of gathered layers.

    forward : gather(l) [+ gather(l+1) issued early when prefetching], compute(l), free(l)
    backward: the same in reverse order, then reduce-scatter(grad l) after compute(l)
    """
    events, gathered, peak = [], set(), 0

    def gather(phase, l):
        nonlocal peak
        if l not in gathered and 0 <= l < layers:
            gathered.add(l)
            events.append((phase, "all-gather", l))
            peak = max(peak, len(gathered))

    for phase, order in (("forward", range(layers)), ("backward", range(layers - 1, -1, -1))):
        order = list(order)
        for i, l in enumerate(order):
            gather(phase, l)
            if prefetch and i + 1 < len(order):
                gather(phase, order[i + 1])
            events.append((phase, "compute", l))
            if phase == "backward":
                events.append((phase, "reduce-scatter", l))
            gathered.discard(l)
            events.append((phase, "free", l))
    return events, peak


def count_events(events) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for phase, kind, _ in events:
        out.setdefault(phase, {}).setdefault(kind, 0)
        out[phase][kind] += 1
    return out


def layer_time(layers: int, t_compute: float, t_gather: float, prefetch: bool) -> float:
    """Forward time of the schedule: gathers serialise with compute, or overlap the next layer's."""
    if not prefetch:
        return layers * (t_gather + t_compute)
    return t_gather + (layers - 1) * max(t_compute, t_gather) + t_compute
# --8<-- [end:schedule]


# --8<-- [start:large_n]
def large_n_rows(psis=(7e9, 70e9, 175e9), ns=(8, 16, 32, 64)):
    """ZeRO-3 per-rank model states (GB and GiB) and comm per rank vs DP, from the formulas."""
    rows = []
    for psi in psis:
        for n in ns:
            m = zm.zero_memory_bytes(psi, n, 3)
            z3, dp = comm_per_step(psi, n, 3), comm_per_step(psi, n, 0)
            rows.append({"psi": psi, "N": n, "GB": m / zm.GB, "GiB": m / zm.GIB,
                         "dp_GB": zm.zero_memory_bytes(psi, n, 0) / zm.GB,
                         "sent_GB": z3["sent"] / zm.GB, "ratio": z3["sent"] / dp["sent"]})
    return rows
# --8<-- [end:large_n]


# --8<-- [start:measured]
def stage3_records(runs) -> list[tuple]:
    """(result, stage-3 record) for every zero_bench results file, sorted by world size N."""
    out = [(r, m) for r in runs for m in r.measurements if m["stage"] == 3]
    return sorted(out, key=lambda rm: rm[1]["world_size"])


def param_numels(params: dict) -> list[int]:
    """zero_bench's model: `layers` × Linear(dim, dim) — a weight dim² and a bias dim per layer."""
    return [params["dim"] ** 2, params["dim"]] * params["layers"]


def memory_rows(runs, k: int = zm.K_ADAM) -> list[dict]:
    """Measured per-rank bytes under ZeRO-3 next to (4+K)ψ/N and to DeepSpeed's padded shard sizes.

    grads_peak_predicted: this rank's gradient partition (2 bytes × its shard elements), plus the
    reduce bucket (one layer's full 16-bit gradient, reduce_bucket_size = one layer here), plus the
    next weight's full gradient that autograd has produced but not yet copied into the bucket.
    """
    rows = []
    for r, m in stage3_records(runs):
        n, psi = m["world_size"], m["psi"]
        numels = param_numels(r.params)
        pred = predicted_rank_numel(numels, n, r.params["zero_config"]["3"]["stage3_param_persistence_threshold"])
        formula = zero3_terms(psi, n, k)
        mine = m["per_rank_bytes"]
        layer = r.params["dim"] ** 2 + r.params["dim"]
        rows.append({
            "N": n, "psi": psi,
            "measured": mine, "formula": formula,
            "padded": {"params": 2 * pred["shards"], "grads": 2 * pred["shards"], "optimizer": k * pred["shards"]},
            "padding_elements": pred["padding"],
            "padding_measured": [x["padding_elements"] for x in m["per_rank_bytes_all"]],
            "grads_after_backward": [x["grads_end_of_backward"] for x in m["per_rank_bytes_all"]],
            "grads_peak_predicted": 2 * pred["shards"] + 2 * layer + 2 * r.params["dim"] ** 2,
            "ranks_equal": all(x[key] == mine[key] for x in m["per_rank_bytes_all"] for key in mine),
            "step_counters": m["per_rank_bytes_all"][0]["optimizer_parts"]["step"],
        })
    return rows


def comm_rows(runs, elem: int = 2) -> list[dict]:
    """Bytes per step of each collective (the op's size S, summed over calls) against eψ per op, 3eψ in all."""
    rows = []
    for r, m in stage3_records(runs):
        n, psi = m["world_size"], m["psi"]
        c = m["comm"]
        ag, rs = c.get("all_gather_into_tensor", {}), c.get("reduce_scatter_tensor", {})
        model_ops = {"all_gather_into_tensor", "reduce_scatter_tensor"}
        rows.append({
            "N": n, "psi": psi,
            "ag_calls": ag.get("calls", 0), "ag_bytes": ag.get("bytes", 0),
            "rs_calls": rs.get("calls", 0), "rs_bytes": rs.get("bytes", 0),
            "total_S": ag.get("bytes", 0) + rs.get("bytes", 0),
            "predicted_S": zm.zero_comm_volume(psi, 3) * elem,
            "sent_per_rank": (ag.get("bytes", 0) + rs.get("bytes", 0)) * (n - 1) / n,
            "predicted_sent": comm_per_step(psi, n, 3, elem)["sent"],
            "other": {op: v for op, v in c.items() if op not in model_ops},
            "by_phase": m["comm_by_phase"],
        })
    return rows


def allgather_rows(runs) -> list[dict]:
    """All-gather calls counted in forward and backward against the schedule of Definition 5.4.2."""
    rows = []
    for r, m in stage3_records(runs):
        layers = m["zero3_allgathers"]["layers"]
        model = count_events(zero3_schedule(layers, prefetch=False)[0])
        rows.append({"N": m["world_size"], "layers": layers,
                     "forward": m["zero3_allgathers"]["forward"], "backward": m["zero3_allgathers"]["backward"],
                     "model_forward": model["forward"]["all-gather"], "model_backward": model["backward"]["all-gather"],
                     "rs_calls": m["comm"].get("reduce_scatter_tensor", {}).get("calls", 0)})
    return rows
# --8<-- [end:measured]


# --8<-- [start:figure]
def memory_figure(runs) -> str:
    """Measured per-rank bytes (stacked: params, grads after backward, optimizer) vs (4+K)ψ/N, and the grad peak."""
    from snippets.common import figures

    rows = memory_rows(runs)
    fig, ax = figures.new(6.5, 3.6)
    xs = [str(r["N"]) for r in rows]
    bottom = [0.0] * len(rows)
    parts = (("params", lambda r: r["measured"]["params"], "#4c72b0"),
             ("grads (backward 뒤)", lambda r: r["grads_after_backward"][0], "#dd8452"),
             ("optimizer", lambda r: r["measured"]["optimizer"], "#55a868"))
    for label, get, color in parts:
        vals = [get(r) / 2 ** 20 for r in rows]
        ax.bar(xs, vals, bottom=bottom, color=color, label=f"측정: {label}")
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(rows):
        ax.hlines(sum(r["formula"].values()) / 2 ** 20, i - 0.42, i + 0.42, colors="k", linewidth=2,
                  label="(4+K)ψ/N" if i == 0 else None)
    ax.plot(xs, [(r["measured"]["params"] + r["measured"]["grads"] + r["measured"]["optimizer"]) / 2 ** 20
                 for r in rows], "rv", label="grads 를 backward 중 peak 로 바꾼 합")
    ax.set_xlabel("N (GPUs)" if runs and runs[0].is_gpu else "N (processes)")
    ax.set_ylabel("rank 당 bytes (MiB = 2^20 B)")
    ax.set_title(f"DeepSpeed ZeRO-3, ψ = {rows[0]['psi']:,}")
    ax.legend(fontsize=8)
    return figures.svg(fig)
# --8<-- [end:figure]


def memory_table(rows: list[dict]) -> str:
    """The ZeRO-3 bytes table of one hardware, then the resident total per N against (4+K)ψ/N."""
    from snippets import results

    table = results.markdown_table(
        ["N", "params 측정", "2ψ/N", "optimizer 측정", "Kψ/N", "grads (backward 뒤)", "2ψ/N", "grads (backward 중 peak)",
         "peak 예측", "padding 원소 (측정/예측)", "모든 rank 같음"],
        [[r["N"], f"{r['measured']['params']:,}", f"{r['formula']['params']:,.0f}", f"{r['measured']['optimizer']:,}",
          f"{r['formula']['optimizer']:,.0f}", f"{r['grads_after_backward'][0]:,}", f"{r['formula']['grads']:,.0f}",
          f"{r['measured']['grads']:,}", f"{r['grads_peak_predicted']:,}",
          f"{max(r['padding_measured'])} / {r['padding_elements']}", r["ranks_equal"]] for r in rows])
    return table


def padding_table(params: dict, ns=(2, 3, 4, 5, 6, 7, 8)) -> str:
    """DeepSpeed's per-tensor padding and persistence rule for the model of one results file, over N."""
    from snippets import results

    numels = param_numels(params)
    rows = []
    for n in ns:
        a = predicted_rank_numel(numels, n, persistence_threshold=0)
        b = predicted_rank_numel(numels, n)  # DeepSpeed's default threshold, 1e5 elements
        rows.append([n, f"{a['shards']:,}", f"{a['ideal']:,.2f}", a["padding"], f"{a['shards'] - a['ideal']:.2f}",
                     f"{b['persistent']:,}", f"{2 * b['persistent'] / (2 * a['ideal']):.2%}"])
    return results.markdown_table(["N", "rank 의 shard 원소 Σ⌈ψ_i/N⌉", "ψ/N", "padding 원소 (전체)", "rank 당 초과 원소",
                                   "기본 threshold 에서 통째로 상주하는 원소", "그 16-bit bytes ÷ 2ψ/N"], rows)


def zero_init_table(runs) -> str:
    """Right after deepspeed.zero.Init: each rank's shard bytes against 2·Σ⌈ψ_i/N⌉, and what param.data keeps."""
    from snippets import results

    rows = []
    for run, rec in stage3_records(runs):
        n = rec["world_size"]
        want = predicted_rank_numel(param_numels(run.params), n, persistence_threshold=0)
        for r in rec["zero_init"]["per_rank"]:
            rows.append([n, r["rank"], f"{r['psi']:,}", r["shard_dtype"], f"{r['shard_bytes']:,}",
                         f"{2 * want['shards']:,}", f"{r['param_data_numel']:,}"])
    return results.markdown_table(["N", "rank", "ψ", "shard dtype", "shard bytes (zero.Init 직후, 측정)",
                                   "2 · Σ⌈ψ_i/N⌉ (예측)", "param.data 에 남은 원소"], rows)


def comm_table(rows: list[dict]) -> str:
    from snippets import results

    table = results.markdown_table(
        ["N", "AllGather 호출", "AllGather S 합", "ReduceScatter 호출", "ReduceScatter S 합", "모델 데이터 S 합", "3eψ",
         "ring 으로 보내는 bytes/rank", "3(N−1)eψ/N", "그 밖의 collective"],
        [[r["N"], r["ag_calls"], f"{r['ag_bytes']:,}", r["rs_calls"], f"{r['rs_bytes']:,}", f"{r['total_S']:,}",
          f"{r['predicted_S']:,.0f}", f"{r['sent_per_rank']:,.0f}", f"{r['predicted_sent']:,.0f}",
          "; ".join(f"{op} {v['calls']}×/{v['bytes']} B" for op, v in r["other"].items()) or "없음"] for r in rows])
    r = rows[-1]
    by_phase = f"N = {r['N']} 의 phase 별: " + "; ".join(
        f"{ph}: " + ", ".join(f"{op} {v['calls']}×/{v['bytes']:,} B" for op, v in ops.items())
        for ph, ops in r["by_phase"].items())
    return table + "\n\n" + by_phase


# --8<-- [start:threshold]
# ASSUMED (not measured in this book): an A100-like GPU sustaining 156 TFLOP/s of bf16 (312 peak × 50 % MFU),
# and the per-GPU bus bandwidth a ring collective reaches on two kinds of link.
ASSUMED_FLOPS = 0.5 * 312e12
ASSUMED_LINKS = {"NVLink, node 안 (240 GB/s 가정)": 240e9, "InfiniBand 200 Gb/s, node 사이 (20 GB/s 가정)": 20e9}


def threshold_rows(flops: float = ASSUMED_FLOPS, links=None, ns=(8, 64, 512)) -> list[dict]:
    """τ* of ZeRO-3 (shared formula) and of plain DP for each link and N. DP's AllReduce (2eψ(N−1)/N bytes) can only
    hide behind the backward (4ψτ FLOPs), so its threshold is F·2e(N−1)/N / (4·BW): the same as ZeRO-3's."""
    rows = []
    for name, w in (links or ASSUMED_LINKS).items():
        for n in ns:
            z3 = zm.zero3_breakeven_tokens(flops, w, n)
            dp = flops * zm.zero_comm_volume(1, 0) * 2 * (n - 1) / n / (4 * w)  # bf16 gradients, backward only
            rows.append({"link": name, "W": w, "N": n, "zero3": z3, "dp": dp})
    return rows
# --8<-- [end:threshold]


# --8<-- [start:zero_r]
# ZeRO-R (Rajbhandari et al. §6) in numbers. ASSUMED example: a 7B-like model (L = 32, h = 4096), micro-batch 8 of
# 4096 tokens, one activation checkpoint (the 16-bit layer input, b·s·h elements) per layer, tensor parallelism t = 8.
ZERO_R_EXAMPLE = {"layers": 32, "hidden": 4096, "seq": 4096, "micro_batch": 8, "tp": 8, "elem": 2}


def deepspeed_bucket_defaults() -> dict[str, int]:
    """reduce_bucket_size / allgather_bucket_size (elements) as the installed DeepSpeed's ZeRO config defines them."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    return {k: int(DeepSpeedZeroConfig.model_fields[k].default) for k in ("reduce_bucket_size", "allgather_bucket_size")}


def zero_r_rows(ex: dict = ZERO_R_EXAMPLE, psis=(3e9, 7e9, 70e9), elem: int = 2) -> dict:
    """P_a: the checkpoints Megatron-style TP keeps whole on each of its t ranks, and the 1/t share with P_a.
    C_B: DeepSpeed's constant-size buckets (elements × 16-bit bytes) next to one fused fp32 buffer of all ψ
    gradients (the paper's 3B → 12 GB example), which grows with ψ."""
    ckpt = ex["layers"] * ex["micro_batch"] * ex["seq"] * ex["hidden"] * ex["elem"]
    buckets = deepspeed_bucket_defaults()
    return {"ckpt_replicated": ckpt, "ckpt_pa": ckpt / ex["tp"], "tp": ex["tp"], "buckets": buckets,
            "bucket_bytes": {k: v * elem for k, v in buckets.items()},
            "fused_fp32": {psi: 4 * psi for psi in psis}}
# --8<-- [end:zero_r]

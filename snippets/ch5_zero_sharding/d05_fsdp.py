"""Ch5-05 FSDP — PyTorch Fully Sharded Data Parallel: the code the page runs and the tests import.

FSDP2 (torch.distributed.fsdp.fully_shard, torch 2.13) facts used here, read from
torch/distributed/fsdp/_fully_shard/:
  * a parameter becomes a DTensor with placement Shard(0): torch.chunk along dim 0 into N
    pieces of ceil(R/N) rows (the last ranks get fewer or none); each rank stores its piece
    zero-padded to ceil(R/N) rows (_fsdp_param.py, _fsdp_common._chunk_with_empty);
  * one fully_shard call = one parameter group = one all-gather in forward, one more in
    backward if the group was resharded after forward, one reduce-scatter of its gradients
    (_fsdp_param_group.py, _fsdp_collectives.foreach_all_gather / foreach_reduce), issued
    through dist.all_gather_single / dist.reduce_scatter_single.
Memory formulas come from snippets.common.zero_memory (never re-defined here).
"""
from __future__ import annotations

import math

from snippets import results
from snippets.common import zero_memory as zm

AG, RS = "all_gather_single", "reduce_scatter_single"


# --8<-- [start:shard]
def dim0_shard_rows(rows: int, n: int) -> list[int]:
    """Rows of a parameter's dim-0 shard on ranks 0..n-1, as FSDP2 cuts it (torch.chunk)."""
    c = math.ceil(rows / n)  # every rank *stores* c rows (zero-padded), rank 0 always has c real rows
    return [max(0, min(c, rows - r * c)) for r in range(n)]


def predicted_local_numel(params: list[dict], n: int) -> list[int]:
    """Real (unpadded) local elements per rank for parameters given as {'shape': [...]}."""
    out = [0] * n
    for p in params:
        row = math.prod(p["shape"][1:])
        for r, k in enumerate(dim0_shard_rows(p["shape"][0], n)):
            out[r] += k * row
    return out


def padded_numel(params: list[dict], n: int) -> int:
    """Elements of the padded unsharded buffer: n · ceil(R/n) · row, summed over parameters."""
    return sum(n * math.ceil(p["shape"][0] / n) * math.prod(p["shape"][1:]) for p in params)
# --8<-- [end:shard]


# --8<-- [start:comm]
def group_of(name: str) -> str:
    """fully_shard(block) for every block, then fully_shard(root): the root owns the rest."""
    parts = name.split(".")
    return f"blocks.{parts[1]}" if parts[0] == "blocks" else "root"


def predict_step_comm(params: list[dict], n: int, reshard, param_bytes: int = 4, reduce_bytes: int = 4):
    """Calls and bytes (nccl-tests size S) of one FSDP2 step, per phase (Theorem 5.5.4).

    reshard: True (every group re-gathers in backward), False (none does), None (the default:
    blocks do, the root does not). Bytes are the padded unsharded buffer of each group.
    """
    groups: dict[str, list[dict]] = {}
    for p in params:
        groups.setdefault(group_of(p["name"]), []).append(p)
    sizes = {g: padded_numel(ps, n) for g, ps in groups.items()}
    regather = [g for g in groups if reshard is True or (reshard is None and g != "root")]
    total = sum(sizes.values())
    return {
        "forward": {AG: {"calls": len(groups), "bytes": total * param_bytes}},
        "backward": {AG: {"calls": len(regather), "bytes": sum(sizes[g] for g in regather) * param_bytes},
                     RS: {"calls": len(groups), "bytes": total * reduce_bytes}},
    }


def measured_phase(rec: dict, phase: str, op: str) -> dict:
    return rec["comm"][phase].get(op, {"calls": 0, "bytes": 0})
# --8<-- [end:comm]


# ------------------------------------------------------------------ committed results

def pick_world(by_world: dict, want: int) -> tuple[int, str]:
    """The world size a cell reads on one hardware: `want` if measured there, else the nearest one
    measured (ties: the larger), with a sentence that says so ('' when `want` is there)."""
    if want in by_world:
        return want, ""
    n = min(by_world, key=lambda w: (abs(w - want), -w))
    return n, f"이 하드웨어에는 N = {want} 측정이 없어 N = {n} 의 측정을 읽습니다."


def unit(run) -> str:
    return "GPUs" if run.is_gpu else "processes"


def same_hardware(program: str, plat):
    """The Platform of another program's results on the hardware of `plat` (same kind, GPU model,
    backend and node count), or None when that program has no file there."""
    try:
        runs_ = results.experiment(program)
    except results.ResultsError:
        return None
    h = plat.runs[0].hardware
    key = (plat.kind, h.get("gpu_name"), h["backend"], int(h.get("nnodes") or 1))
    for q in results.platforms(runs_):
        g = q.runs[0].hardware
        if (q.kind, g.get("gpu_name"), g["backend"], int(g.get("nnodes") or 1)) == key:
            return q
    return None


def shard_rows_table(run) -> list[list]:
    m, n = run.measurements, run.hardware["world_size"]
    rows = []
    for p, got in zip(m["params"], zip(*m["per_rank_param_local_numel"])):
        row = math.prod(p["shape"][1:])
        pred = [k * row for k in dim0_shard_rows(p["shape"][0], n)]
        rows.append([f"`{p['name']}`", "×".join(map(str, p["shape"])), p["placement"],
                     " / ".join(map(str, got)), " / ".join(map(str, pred)), p["padded_rows"] * row])
    return rows


def comm_rows(run) -> list[list]:
    """Measured vs predicted (Theorem 5.5.4) for every configuration of one run."""
    m, n = run.measurements, run.hardware["world_size"]
    out = []
    for rec in m["configs"]:
        pb = 2 if rec["param_dtype"] == "bfloat16" else 4
        pred = predict_step_comm(m["params"], n, rec["reshard_after_forward"], pb, 4)
        cells = []
        for phase, op in (("forward", AG), ("backward", AG), ("backward", RS)):
            got, want = measured_phase(rec, phase, op), pred[phase][op]
            cells.append(f"{got['calls']} ({want['calls']}) · {got['bytes']:,} ({want['bytes']:,})")
        out.append([n, f"`{rec['name']}`", rec["param_dtype"], *cells,
                    f"{rec['held_after_forward_bytes']:,}", f"{rec['max_abs_diff_vs_reference']:.1e}"])
    return out


def volume_ratio(run, name: str) -> float:
    """(all-gather + reduce-scatter bytes of one step) / (ψ · 4 B): ZeRO's 3ψ vs 2ψ in ψ units."""
    m = run.measurements
    rec = next(c for c in m["configs"] if c["name"] == name)
    total = sum(v["bytes"] for ph in ("forward", "backward") for op, v in rec["comm"][ph].items() if op in (AG, RS))
    return total / (m["psi"] * 4)


def order_rows(run) -> list[list]:
    return [[f"`{o['name']}`", o["depth"] or "— (implicit)", " ".join(o["forward"]), " ".join(o["backward"])]
            for o in run.measurements["prefetch"]]


def blocks_ahead(order: list[str]) -> int:
    """Prefetch depth seen in a forward order: max over k of (blocks gathered before F_k) − (k + 1).

    The first all-gather is the root's; F_k marks block k starting to compute.
    """
    depth = 0
    for i, event in enumerate(order):
        if event.startswith("F"):
            k = int(event[1:])
            depth = max(depth, order[:i].count("AG") - 1 - (k + 1))
    return depth


# ------------------------------------------------------------------ large model, one process

# The large-model helpers (meta-device model, fake world, FSDP2 shard sizes, HSDP) are shared with
# gpu_runs/fsdp_bench.py and live in snippets/common/fsdp_shapes.py; re-exported here for the page and tests.
from snippets.common.fsdp_shapes import (  # noqa: E402,F401
    FSDP2_BYTES_PER_LOCAL_ELEMENT, LLAMA7B_LIKE, fake_world, fsdp2_local_numel, fsdp2_persistent_bytes, hsdp_rows,
    large_model_rows, llama_like_meta)


# ------------------------------------------------------------------ DeepSpeed ZeRO-3 comparison

# --8<-- [start:deepspeed]
# stage3_param_persistence_threshold's default, deepspeed/runtime/zero/config.py (0.19.8): 1e5 elements
DS_PERSISTENCE_THRESHOLD = 100_000


def deepspeed_zero3_cut(params: list[dict], n: int, threshold: int = DS_PERSISTENCE_THRESHOLD) -> dict:
    """How DeepSpeed ZeRO-3 would cut the same parameters (deepspeed/runtime/zero/partition_parameters.py).

    Every parameter is flattened and padded to a multiple of n elements (_aligned_size); each rank
    keeps ceil(numel/n) of it (ds_tensor), the same on every rank. Parameters with numel <= threshold
    are marked ds_persist: after their first gather they stay whole on every rank.
    """
    sizes = [math.prod(p["shape"]) for p in params]
    return {"partition_numel": sum(math.ceil(s / n) for s in sizes),
            "persistent_full_numel": sum(s for s in sizes if s <= threshold),
            "persistent_params": sum(1 for s in sizes if s <= threshold)}
# --8<-- [end:deepspeed]


def step_time_rows(runs_by_n) -> list[list]:
    """Timed configurations of one hardware's files (a file run with --no-timing has none)."""
    out = []
    for n, run in sorted(runs_by_n.items()):
        for rec in run.measurements["configs"]:
            if "step_ms_median" in rec:
                out.append([f"{n} {unit(run)} ({run.hardware['backend']})", f"`{rec['name']}`", rec["timed_iters"],
                            f"{rec['step_ms_median']:.1f} ms", f"{rec['step_ms_min']:.1f} ms"])
    return out


def large_rows_table(rows: list[dict]) -> list[list]:
    gb = zm.GB
    return [[r["N"], f"{r['psi']:,}", f"{r['local_rank0']:,}", f"{r['local_last']:,}", f"{r['psi'] / r['N']:,.0f}",
             f"{r['fsdp2_bytes'] / gb:.3f}", f"{r['zero3_bytes'] / gb:.3f}",
             f"{(r['fsdp2_bytes'] - r['zero3_bytes']) / 2**20:+.1f} MiB"] for r in rows]


def zero_bench_shapes(params: dict) -> list[dict]:
    """zero_bench's model: `layers` × Linear(dim, dim) with bias (gpu_runs/zero_bench.py make_model)."""
    d = params["dim"]
    return [{"name": f"{i}.{k}", "shape": s} for i in range(params["layers"])
            for k, s in (("weight", [d, d]), ("bias", [d]))]


def deepspeed_comparison_rows(ds_runs) -> list[dict]:
    """DeepSpeed ZeRO-3 measured (zero_bench) next to the FSDP2 and DeepSpeed cutting rules, same model.

    zero_bench runs ZeRO-3 with stage3_param_persistence_threshold = 0, so the DeepSpeed rule is
    applied with threshold 0; FSDP2 is predicted for fully_shard on every Linear (n_grp = layers).
    """
    out = []
    for run in ds_runs:
        shapes = zero_bench_shapes(run.params)
        for rec in run.measurements:
            if rec["stage"] != 3:
                continue
            n = rec["world_size"]
            if n < 2:  # nothing is sharded on one rank
                continue
            per_rank = [r["params"] // 2 for r in rec["per_rank_bytes_all"]]  # bf16 ds_tensor elements
            ds_rule = deepspeed_zero3_cut(shapes, n, threshold=0)["partition_numel"]
            fsdp = predicted_local_numel(shapes, n)
            ag = rec.get("zero3_allgathers", {})
            pred = predict_step_comm([{**s, "name": f"blocks.{s['name']}"} for s in shapes], n, True, 2, 2)
            out.append({"N": n, "psi": rec["psi"], "ds_measured": per_rank, "ds_rule": ds_rule, "fsdp2_rule": fsdp,
                        "ds_ag_forward": ag.get("forward"), "ds_ag_backward": ag.get("backward"),
                        "ds_ag_bytes_forward": rec["comm_by_phase"].get("forward", {})
                                                  .get("all_gather_into_tensor", {}).get("bytes", 0),
                        "fsdp2_ag_bytes_forward": pred["forward"][AG]["bytes"],
                        "layers": ag.get("layers"), "fsdp2_ag_forward": pred["forward"][AG]["calls"],
                        "fsdp2_ag_backward": pred["backward"][AG]["calls"], "label": run.label,
                        "ds_other": {f"{ph}: {op}": v["calls"] for ph, ops in rec["comm_by_phase"].items()
                                     for op, v in ops.items() if op not in ("all_gather_into_tensor",
                                                                            "reduce_scatter_tensor", AG, RS)}})
    return out


def comparison_table(cmp: list[dict]) -> str:
    """deepspeed_comparison_rows as a table (one hardware's zero_bench files)."""
    return results.markdown_table(
        ["N", "ψ", "DeepSpeed 측정: rank 별 ds_tensor 원소", "DeepSpeed 규칙", "FSDP2 규칙: rank 별",
         "all-gather fwd/bwd (DeepSpeed 측정)", "all-gather fwd/bwd (FSDP2 예측)",
         "forward all-gather bytes (측정 / FSDP2 예측)", "DeepSpeed 의 그 밖의 collective (횟수)"],
        [[r["N"], f"{r['psi']:,}", " / ".join(f"{v:,}" for v in r["ds_measured"]), f"{r['ds_rule']:,}",
          " / ".join(f"{v:,}" for v in r["fsdp2_rule"]), f"{r['ds_ag_forward']} / {r['ds_ag_backward']}",
          f"{r['fsdp2_ag_forward']} / {r['fsdp2_ag_backward']}",
          f"{r['ds_ag_bytes_forward']:,} / {r['fsdp2_ag_bytes_forward']:,}",
          ", ".join(f"{k} {v}" for k, v in r["ds_other"].items()) or "없음"] for r in cmp])


def large_memory_figure(rows: list[dict]):
    """Per-rank model-state GB vs N: ZeRO stages from the shared formula, FSDP2 shards from fully_shard."""
    import numpy as np

    from snippets.common import figures

    psi = rows[0]["psi"]
    ns = np.arange(min(r["N"] for r in rows), max(r["N"] for r in rows) + 1)
    fig, ax = figures.new(7, 4)
    for stage, style in zip(range(4), [":", "--", "-.", "-"]):
        ax.plot(ns, [zm.zero_memory_bytes(psi, int(n), stage) / zm.GB for n in ns], style, color="gray" if stage < 3 else "C0",
                lw=1, label=f"zero_memory_bytes(ψ, N, {stage})")
    ax.plot([r["N"] for r in rows], [r["fsdp2_bytes"] / zm.GB for r in rows], "o", color="C3",
            label="FSDP2: 16 · (rank 0 의 local shard 원소), fake world 에서 측정")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N (sharding group 크기)")
    ax.set_ylabel("rank 당 상주 model state (GB = 1e9 B)")
    ax.set_title(f"ψ = {psi / 1e9:.2f} × 10⁹, bf16 계산 + fp32 Adam")
    ax.legend(fontsize=7)
    return figures.svg(fig)


# --8<-- [start:gather_time]
def allgather_fit(plat, n: int = 2) -> tuple[float, float] | None:
    """α, β of the ring all-gather cost (N−1)α + (N−1)/N·S·β fitted to the all_gather runs of
    gpu_runs/collectives_bench.py on the same hardware as `plat` (gloo for CPU, NCCL for a GPU) at
    world size n; None when that hardware has no such file."""
    from snippets.common import alphabeta as ab

    coll = same_hardware("collectives_bench", plat)
    run = coll.by_world.get(n) if coll else None
    if run is None:
        return None
    rows = [m for m in run.measurements if m["op"] == "all_gather"]
    sizes = [m["bytes"] for m in rows]
    alpha, beta, _ = ab.fit_alpha_beta([n - 1] * len(rows), [(n - 1) / n * s for s in sizes],
                                       [m["time_us_median"] * 1e-6 for m in rows])
    return alpha, beta


def backward_gather_seconds(run, alpha: float, beta: float) -> float:
    """α-β time of the backward all-gathers that reshard_after_forward=True adds (one per group)."""
    m, n = run.measurements, run.hardware["world_size"]
    groups: dict[str, list[dict]] = {}
    for p in m["params"]:
        groups.setdefault(group_of(p["name"]), []).append(p)
    return sum((n - 1) * alpha + (n - 1) / n * 4 * padded_numel(ps, n) * beta for ps in groups.values())
# --8<-- [end:gather_time]

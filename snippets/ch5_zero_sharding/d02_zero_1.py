"""Ch5-02 ZeRO-1 — Optimizer State Sharding: the code the page runs and the tests import.

The memory and communication formulas come from snippets.common.zero_memory (never redefined
here). The DeepSpeed numbers come from the committed results of gpu_runs/zero_bench.py
(DeepSpeed 0.19.8, bf16, torch.optim.Adam; CPU + gloo at N = 1, 2, 4, and every GPU results file
beside it). Every reader takes one hardware's runs (a results.Platform's `.runs`), so each content
tab compares its own files with the formulas. Ch5-03 imports the readers.
"""
from __future__ import annotations

import numpy as np
import torch

from snippets import results
from snippets.common import figures
from snippets.common import zero_memory as zm
from snippets.common.alphabeta import BUSBW_FACTOR

ELEM = 2            # bytes per 16-bit element (bf16 params and grads), e in the page
ALIGN = 2           # DeepSpeed stage_1_and_2.py: nccl_start_alignment_factor = 2 (4-byte alignment / 2 B)
PROGRAM = "zero_bench"
BIG_OPS = ("all_reduce", "reduce", "reduce_scatter_tensor", "all_gather_into_tensor")
RING_FACTOR = {"all_reduce": BUSBW_FACTOR["all_reduce"], "reduce": BUSBW_FACTOR["reduce_scatter"],
               "reduce_scatter_tensor": BUSBW_FACTOR["reduce_scatter"],
               "all_gather_into_tensor": BUSBW_FACTOR["all_gather"], "broadcast": BUSBW_FACTOR["broadcast"]}


# --8<-- [start:equivalence]
def zero1_vs_dp(psi: int = 1_000, n: int = 4, steps: int = 3, seed: int = 0) -> dict:
    """One model, N ranks, `steps` Adam steps, done twice on the same per-rank gradients:
    DP   — every rank averages all gradients and runs Adam on the whole vector (state 3 × ψ each);
    ZeRO-1 — gradients reduce-scattered, rank r runs Adam on its ψ/N slice only, then all-gather.
    Returns the largest difference between the two parameter vectors and the state sizes."""
    gen = torch.Generator().manual_seed(seed)
    theta0 = torch.randn(psi, generator=gen)
    grads = [torch.randn(n, psi, generator=gen) for _ in range(steps)]   # grads[t][r] = rank r's gradient

    dp = theta0.clone().requires_grad_(True)                              # data parallel: full Adam
    opt_dp = torch.optim.Adam([dp], lr=1e-2)
    shards = [s.clone().requires_grad_(True) for s in theta0.chunk(n)]   # ZeRO-1: rank r owns shard r
    opts = [torch.optim.Adam([s], lr=1e-2) for s in shards]
    for g in grads:
        mean = g.sum(0) / n                                               # all-reduce (sum) ÷ N
        dp.grad = mean.clone()
        opt_dp.step()
        for r, (s, o) in enumerate(zip(shards, opts)):                    # reduce-scatter: slice r of the sum
            s.grad = mean.chunk(n)[r].clone()
            o.step()                                                      # Adam on ψ/N elements only
    gathered = torch.cat([s.detach() for s in shards])                    # all-gather the updated slices
    state = lambda o: sum(t.numel() for st in o.state.values() for k, t in st.items() if k != "step")
    return {"max_abs_diff": float((gathered - dp.detach()).abs().max()),
            "bitwise_equal": bool(torch.equal(gathered, dp.detach())),
            "state_elems_dp": state(opt_dp), "state_elems_per_rank": [state(o) for o in opts]}
# --8<-- [end:equivalence]


# --8<-- [start:predict]
def predict_rows(models=((1.5e9, 64), (7e9, 8), (13e9, 16), (70e9, 16), (175e9, 64), (70e9, 1024))):
    """Stage 0 vs stage 1 per-rank model states (GB = 1e9 B) from the shared formula module."""
    rows = []
    for psi, n in models:
        m0, m1 = (zm.zero_memory_bytes(psi, n, s) for s in (0, 1))
        b = zm.zero_memory_breakdown(psi, n, 1)
        rows.append({"psi": psi, "N": n, "stage0_GB": m0 / zm.GB, "stage1_GB": m1 / zm.GB,
                     "params_GB": b["params"] / zm.GB, "grads_GB": b["grads"] / zm.GB,
                     "optimizer_GB": b["optimizer"] / zm.GB, "saved_GB": (m0 - m1) / zm.GB,
                     "ratio": m0 / m1, "limit_ratio": (4 + zm.K_ADAM) / 4})
    return rows
# --8<-- [end:predict]


# --8<-- [start:deepspeed_rule]
def flat_padding(psi: int, n: int) -> int:
    """Elements DeepSpeed appends to the flat 16-bit buffer so it splits into N aligned partitions:
    the buffer is padded to a multiple of ALIGN·N (stage_1_and_2.py, `alignment`)."""
    return (-psi) % (ALIGN * n)


def stage12_predicted(psi: int, n: int, stage: int, k: int = zm.K_ADAM) -> dict:
    """Per-rank bytes DeepSpeed should hold under stage 1 or 2, padding included.
    params: the whole flat buffer; optimizer: K bytes for each element of the rank's partition;
    grads_rest: the rank's gradient partition after the reduction (stage 1 and 2 alike);
    grads_formula: the formula's gradient term (2ψ for stage 1, 2ψ/N for stage 2)."""
    padded = psi + flat_padding(psi, n)
    part = padded // n
    return {"params": ELEM * padded, "optimizer": k * part, "grads_rest": ELEM * part,
            "grads_formula": zm.zero_memory_breakdown(psi, n, stage)["grads"],
            "formula_total": zm.zero_memory_bytes(psi, n, stage)}
# --8<-- [end:deepspeed_rule]


def by_world(runs_) -> list:
    """One hardware's zero_bench files, sorted by world size N."""
    return sorted(runs_, key=lambda r: r.hardware["world_size"])


def unit(runs_) -> str:
    """What N counts on this hardware: GPUs (NCCL) or CPU processes (gloo)."""
    return "GPUs" if runs_ and runs_[0].is_gpu else "processes"


def missing_worlds(runs_, wanted) -> str:
    """A sentence naming the world sizes a cell wants and this hardware lacks ('' if none is missing)."""
    have = {r.hardware["world_size"] for r in runs_}
    lack = [n for n in wanted if n not in have]
    return ("" if not lack else
            f"이 하드웨어에는 N = {', '.join(map(str, lack))} 측정이 없습니다 (있는 것: N = "
            f"{', '.join(map(str, sorted(have)))}).")


def record(run, stage: int) -> dict:
    return next(m for m in run.measurements if m["stage"] == stage)


# --8<-- [start:measured]
def memory_rows(stage: int, runs_) -> list[dict]:
    """Measured per-rank bytes (every rank) next to the formula and DeepSpeed's padded rule."""
    rows = []
    for run in by_world(runs_):
        rec = record(run, stage)
        psi, n = rec["psi"], rec["world_size"]
        pred = stage12_predicted(psi, n, stage)
        for r in rec["per_rank_bytes_all"]:
            rows.append({"N": n, "rank": r["rank"], "psi": psi,
                         "params": r["params"], "params_pred": pred["params"],
                         "optimizer": r["optimizer"], "optimizer_pred": pred["optimizer"],
                         "grads_peak": r["grads"], "grads_rest": r["grads_end_of_backward"],
                         "grads_rest_pred": pred["grads_rest"], "grads_formula": pred["grads_formula"],
                         "padding": r["padding_elements"], "padding_pred": flat_padding(psi, n),
                         "bucket": r["reduce_bucket"],
                         "step_counters": r["optimizer_parts"]["step"]})
    return rows


def memory_figure(runs_) -> str:
    """Stacked bars: rank 0's measured params / grads (peak) / optimizer bytes for stages 0 and 1 at
    each N, with the formula total (4 + K)ψ or 4ψ + Kψ/N as a black tick."""
    fig, ax = figures.new(7.0, 3.8)
    x, labels = 0, []
    colors = {"params": "#4c72b0", "grads": "#dd8452", "optimizer": "#55a868"}
    for run in by_world(runs_):
        for stage in (0, 1):
            rec = record(run, stage)
            r0 = next(r for r in rec["per_rank_bytes_all"] if r["rank"] == 0)
            bottom = 0
            for key in ("params", "grads", "optimizer"):
                ax.bar(x, r0[key] / 2**20, bottom=bottom, color=colors[key],
                       label=key if x == 0 else None)
                bottom += r0[key] / 2**20
            total = zm.zero_memory_bytes(rec["psi"], rec["world_size"], stage) / 2**20
            ax.plot([x - 0.4, x + 0.4], [total, total], "k-", lw=2, label="공식 M_k" if x == 0 else None)
            labels.append(f"N={rec['world_size']}\nstage {stage}")
            x += 1
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("rank 0 의 bytes (MiB)")
    ax.set_title(f"ψ = {record(by_world(runs_)[0], 1)['psi']:,}", fontsize=9)
    ax.legend(fontsize=8)
    return figures.svg(fig)
# --8<-- [end:measured]


def memory_table(rows: list[dict], stage: int) -> str:
    """The measured-vs-rule table of one hardware (stage 1: with the gradient peak; stage 2: the partition)."""
    if stage == 1:
        return results.markdown_table(
            ["N", "rank", "params 측정", "2ψ'", "optimizer 측정", "Kψ'/N", "padding π", "grads peak", "공식 2ψ",
             "grads rest", "2ψ'/N"],
            [[r["N"], r["rank"], f"{r['params']:,}", f"{r['params_pred']:,}", f"{r['optimizer']:,}",
              f"{r['optimizer_pred']:,.0f}", r["padding"], f"{r['grads_peak']:,}", f"{r['grads_formula']:,.0f}",
              f"{r['grads_rest']:,}", f"{r['grads_rest_pred']:,}"] for r in rows])
    return results.markdown_table(
        ["N", "rank", "params 측정", "2ψ'", "grads rest 측정", "2ψ'/N", "optimizer 측정", "Kψ'/N", "padding π"],
        [[r["N"], r["rank"], f"{r['params']:,}", f"{r['params_pred']:,}", f"{r['grads_rest']:,}",
          f"{r['grads_rest_pred']:,}", f"{r['optimizer']:,}", f"{r['optimizer_pred']:,.0f}", r["padding"]]
         for r in rows])


def model_line(runs_) -> str:
    """The model this hardware's files measured (presets differ: the GPU preset is larger)."""
    r = by_world(runs_)[0]
    p, v = r.params, r.data["versions"]
    psi = r.measurements[0]["psi"]
    return (f"모델: {p['layers']} × `Linear({p['dim']}, {p['dim']})`, ψ = {psi:,}, preset `{p['preset']}`; "
            f"DeepSpeed {v['deepspeed']}, torch {v['torch']}")


# --8<-- [start:comm]
def ring_bytes(comm: dict, n: int) -> float:
    """Bytes one rank sends for these collectives with bandwidth-optimal (ring) algorithms:
    S·2(N−1)/N for all_reduce, S·(N−1)/N for reduce-scatter, all-gather and N rotating reduces."""
    return sum(RING_FACTOR[op](n) * v["bytes"] for op, v in comm.items())


def split_traffic(rec: dict, variant: bool = False) -> tuple[dict, dict]:
    """(gradient and parameter traffic, control messages) of one instrumented step.
    Control messages are the step's tiny all_reduces: the overflow flag (1 B, uint8, MAX) and the
    squared gradient norm (4 B, fp32, SUM) of stage_1_and_2.py has_overflow / get_grad_norm_direct."""
    if variant:
        comm = rec["comm_variant_reduce"]["comm"]
        return ({op: v for op, v in comm.items() if op != "all_reduce"},
                {op: v for op, v in comm.items() if op == "all_reduce"})
    ph = rec["comm_by_phase"]
    data = {op: dict(v) for op, v in ph.get("backward", {}).items()}
    control = {}
    for op, v in ph.get("step", {}).items():
        (control if op == "all_reduce" else data)[op] = dict(v)
    return data, control


def comm_rows(stage: int, runs_) -> list[dict]:
    """Per step: each collective's calls and size S (summed over calls) against the paper's 2ψ·e."""
    rows = []
    for run in by_world(runs_):
        rec = record(run, stage)
        psi, n = rec["psi"], rec["world_size"]
        variants = [("default (use_multi_rank_bucket_allreduce=True)", False)]
        if "comm_variant_reduce" in rec:
            variants.append(("use_multi_rank_bucket_allreduce=False", True))
        for name, alt in variants:
            data, control = split_traffic(rec, alt)
            paper = zm.zero_comm_volume(psi, stage) * ELEM * (n - 1) / n      # 2ψ·e·(N−1)/N
            sent = ring_bytes(data, n)
            rows.append({"N": n, "variant": name, "psi": psi, "data": data, "control": control,
                         "S_total": sum(v["bytes"] for v in data.values()), "psi_e": psi * ELEM,
                         "ring_sent": sent, "paper_sent": paper,
                         "ratio": sent / paper if paper else float("nan")})
    return rows
# --8<-- [end:comm]


def ops_cell(d: dict) -> str:
    return "<br>".join(f"`{op}` {v['calls']}× / {v['bytes']:,} B" for op, v in d.items()) or "—"


def comm_table(rows: list[dict]) -> str:
    return results.markdown_table(
        ["N", "DeepSpeed 경로", "gradient·파라미터 collective (호출 / S 합)", "제어 메시지", "ΣS / eψ",
         "ring 환산 rank 당 전송", "2(N−1)/N·eψ", "비율"],
        [[r["N"], r["variant"], ops_cell(r["data"]), ops_cell(r["control"]), f"{r['S_total'] / r['psi_e']:.0f}",
          f"{r['ring_sent']:,.0f}", f"{r['paper_sent']:,.0f}", "—" if r["N"] == 1 else f"{r['ratio']:.2f}"]
         for r in rows])


def allocator_table(stage: int, runs_) -> str:
    """GPU only: the caching allocator around the instrumented step (zero_bench writes cuda_allocated_before_step
    and cuda_peak_step on CUDA, None on CPU; reset at the step's start), next to the bytes the page counts from
    DeepSpeed's own tensors on the same rank (params + gradient peak + optimizer, per_rank_bytes). The allocator
    also holds the input batch, activations and DeepSpeed's buffers, so it bounds the counted bytes from above.
    Returns "" where no file of `runs_` has the fields (CPU)."""
    from snippets import results

    rows = []
    for run in by_world(runs_):
        rec = record(run, stage)
        before, peak = rec.get("cuda_allocated_before_step"), rec.get("cuda_peak_step")
        if before is None or peak is None:
            continue
        mine = rec["per_rank_bytes"]
        counted = mine["params"] + mine["grads"] + mine["optimizer"]
        rows.append([rec["world_size"], f"{before:,}", f"{peak:,}", f"{peak - before:+,}", f"{counted:,}",
                     f"{peak / counted:.2f}"])
    if not rows:
        return ""
    return ("CUDA caching allocator, 계측한 step 하나 (이 파일을 쓴 rank):\n\n"
            + results.markdown_table(["N", "step 직전 memory_allocated", "step 중 max_memory_allocated", "peak − 직전",
                                      "DeepSpeed tensor 로 센 params + grads peak + optimizer", "allocator peak / 센 합"], rows))

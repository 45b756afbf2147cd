"""Ch2-02 PyTorch DDP: construction broadcast, per-forward buffer sync, DistributedSampler, normalisation layers.

The sampler and normalisation cells call the installed torch classes in-process (DistributedSampler accepts
num_replicas and rank without a process group); the DDP measurements are the committed results of
gpu_runs/ddp_bench.py (sections construction, buffers, batch_stats), one tab per hardware.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from snippets import results


PROGRAM = "ddp_bench"


def _unit(plat) -> str:
    return "GPUs" if plat.is_gpu else "processes"


# --------------------------------------------------------------------- construction and buffers

def construction_rows(run) -> list[list]:
    c = run.measurements["construction"]
    n = run.hardware["world_size"]
    return [[n, r, f"`{c['before'][r]}`", f"`{c['after'][r]}`", f"`{c['init_sync_false'][r]}`"] for r in range(n)]


def construction_summary(run) -> dict:
    c = run.measurements["construction"]
    return {"distinct_before": len(set(c["before"])), "distinct_after": len(set(c["after"])),
            "after_is_rank0": all(a == c["before"][0] for a in c["after"]),
            "distinct_init_sync_false": len(set(c["init_sync_false"]))}


def buffer_rows(run) -> list[list]:
    n = run.hardware["world_size"]
    out = []
    for b in run.measurements["buffers"]:
        for r in b["rows"]:
            start = " / ".join(f"{v[0]:+.4f}" for v in r["at_forward_start"])
            after = " / ".join(f"{v[0]:+.4f}" for v in r["after_forward"])
            out.append([n, f"`{b['forward_sync_buffers']}`", r["step"], start, "✅" if r["equal_at_start"] else "❌",
                        after, "✅" if r["equal_after"] else "❌"])
    return out


def rank0_propagates(run) -> bool:
    """With forward_sync_buffers=True the value every rank sees at forward t+1 is rank 0's after forward t."""
    b = next(x for x in run.measurements["buffers"] if x["forward_sync_buffers"])
    rows = b["rows"]
    return all(rows[t + 1]["at_forward_start"][r] == rows[t]["after_forward"][0]
               for t in range(len(rows) - 1) for r in range(run.hardware["world_size"]))


# --8<-- [start:tabs]
def construction_tab(plat) -> str:
    """Experiment 1 on one hardware: digests before and after wrapping, per world size."""
    out = [results.markdown_table(["N", "rank", "감싸기 전", "`DDP(m)` 뒤", "`DDP(m, init_sync=False)` 뒤"],
                                  [row for r in plat.runs for row in construction_rows(r)])]
    for r in plat.runs:
        c = construction_summary(r)
        out.append(f"$N={r.hardware['world_size']}$ {_unit(plat)}: 서로 다른 상태의 수 — 감싸기 전 {c['distinct_before']}, "
                   f"뒤 {c['distinct_after']} (모두 rank 0 의 감싸기 전 값: {c['after_is_rank0']}), "
                   f"`init_sync=False` {c['distinct_init_sync_false']}")
    return "\n\n".join(out)


def buffers_tab(plat) -> str:
    """Experiment 2 on one hardware: running_mean[0] at each forward's start and after it."""
    table = results.markdown_table(["N", "`forward_sync_buffers`", "step", "forward 시작의 running_mean[0]", "rank 끼리 같음",
                                    "forward 뒤", "rank 끼리 같음"], [row for r in plat.runs for row in buffer_rows(r)])
    return (table + "\n\nforward t+1 의 시작 값 = rank 0 의 forward t 뒤 값 (모든 rank, `True`): "
            + ", ".join(f"$N={r.hardware['world_size']}$ **{rank0_propagates(r)}**" for r in plat.runs))


def batch_stats_tab(plat) -> str:
    """Experiment 4 on one hardware: local vs global batch statistics, and whether nn.SyncBatchNorm ran
    on this device (torch 2.13 runs it only on GPU-like devices)."""
    out = []
    for r in plat.runs:
        s = batch_stats_row(r)
        dev = "GPU" if plat.is_gpu else "CPU"
        line = (f"{s['N']} {_unit(plat)} ({r.hardware['backend']}): rank 별 local 평균 (feature 0) "
                f"{[round(v, 3) for v in s['local_mean0']]}, AllReduce (Σx, Σx², 개수) 로 만든 global 평균 "
                f"{s['global_mean0']:.3f}; {dev} 에서 `nn.SyncBatchNorm` 실행: **{s['syncbn_runs']}**")
        if s["syncbn_error"]:
            line += f" — `{s['syncbn_error']}`"
        if s.get("syncbn_running_mean_matches_global") is not None:
            line += (f"; SyncBatchNorm 의 running_mean 이 global 통계로 갱신한 값과 같음: "
                     f"**{s['syncbn_running_mean_matches_global']}**")
        out.append(line)
    return "\n\n".join(out)
# --8<-- [end:tabs]


# --------------------------------------------------------------------- DistributedSampler

# --8<-- [start:sampler]
def sampler_formula(d: int, n: int, rank: int, drop_last: bool, order: list[int]) -> list[int]:
    """Definition 2.2.3: pad (repeat from the front) or truncate `order` to N·c, then take every N-th from `rank`."""
    c = d // n if drop_last else math.ceil(d / n)
    total = n * c
    padded = (order * math.ceil(total / d))[:total] if total > d else order[:total]
    return padded[rank:total:n]


def torch_shards(d: int, n: int, *, shuffle: bool = False, drop_last: bool = False, seed: int = 0, epoch=None):
    """The index lists the installed torch DistributedSampler gives each rank (no process group needed)."""
    out = []
    for r in range(n):
        s = DistributedSampler(range(d), num_replicas=n, rank=r, shuffle=shuffle, seed=seed, drop_last=drop_last)
        if epoch is not None:
            s.set_epoch(epoch)
        out.append(list(s))
    return out
# --8<-- [end:sampler]


def cover_rows(cases=((12, 4), (10, 4), (10, 3), (3, 4), (7, 7))) -> list[dict]:
    rows = []
    for d, n in cases:
        for drop_last in (False, True):
            shards = torch_shards(d, n, drop_last=drop_last)
            flat = np.concatenate(shards) if any(shards) else np.array([], int)
            counts = np.bincount(flat, minlength=d) if flat.size else np.zeros(d, int)
            rows.append({"D": d, "N": n, "drop_last": drop_last, "per_rank": len(shards[0]),
                         "padded": max(0, int(flat.size - d)), "dropped": int((counts == 0).sum()),
                         "covered": int((counts > 0).sum()), "max_uses": int(counts.max()) if d else 0, "formula_ok": all(
                             shards[r] == sampler_formula(d, n, r, drop_last, list(range(d))) for r in range(n)),
                         "shards": shards})
    return rows


def epoch_rows(d: int = 8, n: int = 2) -> list[dict]:
    """Rank 0's shard over three epochs: calling set_epoch(e) or not."""
    rows = []
    for use_set_epoch in (False, True):
        s = DistributedSampler(range(d), num_replicas=n, rank=0, shuffle=True, seed=0)
        seen = []
        for e in range(3):
            if use_set_epoch:
                s.set_epoch(e)
            seen.append(list(s))
        rows.append({"set_epoch": use_set_epoch, "epochs": seen, "distinct": len({tuple(x) for x in seen})})
    return rows


# --------------------------------------------------------------------- normalisation layers

def norm_buffers() -> list[list]:
    d = 4
    mods = {"BatchNorm1d": torch.nn.BatchNorm1d(d), "SyncBatchNorm": torch.nn.SyncBatchNorm(d),
            "LayerNorm": torch.nn.LayerNorm(d), "GroupNorm(2 groups)": torch.nn.GroupNorm(2, d)}
    return [[f"`{k}`", ", ".join(f"`{n}`" for n, _ in m.named_buffers()) or "없음",
             ", ".join(f"`{n}`" for n, _ in m.named_parameters())] for k, m in mods.items()]


# --8<-- [start:syncbn]
def global_batch_stats(local_batches):
    """SyncBatchNorm's route: every rank's (mean, biased variance, count) gathered, then combined.

    torch/nn/modules/_functions.py SyncBatchNorm.forward all-gathers (mean, invstd, count) per rank and
    combines them (batch_norm_gather_stats_with_counts); Σx = b_r·mean_r and Σx² = b_r·(var_r + mean_r²).
    """
    gathered = [(x.mean(0), x.var(0, unbiased=False), x.shape[0]) for x in local_batches]  # the all_gather
    cnt = sum(c for _, _, c in gathered)
    mean = sum(c * m for m, _, c in gathered) / cnt
    return mean, sum(c * (v + m * m) for m, v, c in gathered) / cnt - mean * mean
# --8<-- [end:syncbn]


def syncbn_check(n: int = 2, b: int = 8, d: int = 4, seed: int = 0) -> dict:
    """Against BatchNorm on the concatenated batch: the all-reduced statistics are the global batch's."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(b, d, generator=g, dtype=torch.float64) + 2.0 * r for r in range(n)]
    mean, var = global_batch_stats(xs)
    bn = torch.nn.BatchNorm1d(d, momentum=1.0).double()  # momentum 1: running stats = this batch's stats
    bn(torch.cat(xs))
    cat = torch.cat(xs)
    return {"mean_err": float((mean - bn.running_mean).abs().max()),
            "var_err": float((var * (n * b) / (n * b - 1) - bn.running_var).abs().max()),  # running_var is unbiased
            "local_vs_global": max(float((x.mean(0) - mean).abs().max()) for x in xs),
            "biased_var_err": float((var - cat.var(0, unbiased=False)).abs().max())}


def batch_stats_row(run) -> dict:
    s = run.measurements["batch_stats"]
    return {"N": run.hardware["world_size"], **s}


def backends() -> list[list]:
    return [[name, fn()] for name, fn in (("gloo", dist.is_gloo_available), ("nccl", dist.is_nccl_available),
                                            ("mpi", dist.is_mpi_available))]

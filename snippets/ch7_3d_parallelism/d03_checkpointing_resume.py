"""Ch7-03 Checkpointing 과 Resume: the code the page runs and the tests import.

Reads gpu_runs/results/dcp_bench (DCP on FSDP2, reload in one process and into a TP layout, async_save,
exact resume with each part left out) and holds the checkpoint-size and stall formulas.
"""
from __future__ import annotations

from snippets.common import zero_memory as zm


# --8<-- [start:size]
def checkpoint_bytes(psi: float, n: int, k_opt: float = 8, param_bytes: float = 4) -> dict[str, float]:
    """Training-state bytes a checkpoint must hold, and the share of each of n ranks when sharded.

    fp32 training with Adam (this page's run): 4 B parameter + 8 B (m, v) = 12 B/param; mixed precision
    (Ch5): the fp32 master copy and m, v (K = 12) are the state, the 16-bit parameters can be recast from
    them. Gradients are not saved: a step ends with them consumed."""
    total = (param_bytes + k_opt) * psi
    return {"total": total, "per_rank": total / n}


def mixed_precision_checkpoint(psi: float, n: int) -> float:
    """Per-rank bytes of a sharded mixed-precision Adam checkpoint: the K = 12 B/param of Ch5 over n ranks."""
    return zm.K_ADAM * psi / n


def stall(bytes_per_rank: float, write_bw: float, copy_bw: float, asynchronous: bool) -> float:
    """Seconds training stops per checkpoint: write everything (sync), or only copy to host memory (async)."""
    return bytes_per_rank / (copy_bw if asynchronous else write_bw)
# --8<-- [end:size]


# --8<-- [start:read]
def resume_rows(r) -> list[dict]:
    """Each resume variant against the uninterrupted run: bitwise equal? first step that differs, max |Δ|."""
    res = r.measurements["resume"]
    ref = res["uninterrupted"]
    out = []
    for name, traj in res["resumed"].items():
        diff = [i for i, (a, b) in enumerate(zip(traj, ref)) if a != b]
        out.append({"variant": name, "bitwise": traj == ref, "first_diff_step": diff[0] if diff else None,
                    "max_abs": max(abs(a - b) for a, b in zip(traj, ref))})
    return out


def timing_summary(r) -> dict:
    t = r.measurements["timing"]
    return {"sync": t["sync_s_median"], "blocked": t["blocked_s_median"], "total": t["total_s_median"],
            "bytes": t["checkpoint_bytes"], "reps": len(t["sync_s"])}
# --8<-- [end:read]

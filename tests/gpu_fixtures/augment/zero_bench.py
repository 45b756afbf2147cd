"""What gpu_runs/zero_bench.py writes only on CUDA, added to the GPU-shaped copy of a CPU file.

run_stage records, for the instrumented step (harness.PeakMemory, reset at its start; None on CPU),
`cuda_allocated_before_step` (torch.cuda.memory_allocated() when the step starts) and `cuda_peak_step`
(torch.cuda.max_memory_allocated() during it), in every stage record, for the rank that writes the file.
Synthetic values: before the step the model states DeepSpeed holds between steps (16-bit params + fp32
master and Adam's moments, per_rank_bytes) plus the input batch; the peak adds the gradient peak and the
reduce bucket. Rounded up to the allocator's 512-byte blocks (c10/core/AllocatorConfig.h, kMinBlockSize).
Only the shape is meant to be true: the pages must show it.
"""
from __future__ import annotations

BLOCK = 512


def _round(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def augment(data: dict) -> None:
    p = data["params"]
    batch = 2 * p.get("batch", 8) * p.get("dim", 1)  # the bf16 input x
    for rec in data["measurements"]:
        mine = rec["per_rank_bytes"]
        before = _round(mine["params"]) + _round(mine["optimizer"]) + _round(batch)
        rank = next((r for r in rec.get("per_rank_bytes_all", []) if r.get("grads") == mine["grads"]), {})
        bucket = rank.get("reduce_bucket") or 0
        rec["cuda_allocated_before_step"] = before
        rec["cuda_peak_step"] = before + _round(mine["grads"]) + _round(bucket)

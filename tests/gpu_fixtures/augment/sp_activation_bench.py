"""What gpu_runs/sp_activation_bench.py writes only on CUDA, added to the GPU-shaped copy of a CPU file.

measure()'s CUDA branch records `cuda_allocated_after_forward`, torch.cuda.memory_allocated() after the
layer's forward minus before (None on CPU), on every rank of both variants. Synthetic value: the saved bytes
(the layer input, allocated before the baseline and saved by LayerNorm 1, leaves; the layer output, of the
same size and not saved, comes in) rounded up to the allocator's 512-byte blocks
(c10/core/AllocatorConfig.h, kMinBlockSize). It also records `cuda_peak_forward`, max_memory_allocated()
during the forward minus the same baseline (harness.PeakMemory.peak_above_base): synthetic value, the bytes
after forward plus the largest saved tensor again (one temporary of that size alive at the peak), rounded
the same way. Only the shape is meant to be true: the pages must show it.
"""
from __future__ import annotations

BLOCK = 512


def augment(data: dict) -> None:
    for variant in ("tp", "tp_sp"):
        for row in data["measurements"][variant]:
            row["cuda_allocated_after_forward"] = -(-row["saved_bytes"] // BLOCK) * BLOCK
            largest = max((e["bytes"] for e in row["saved_entries"]), default=0)
            row["cuda_peak_forward"] = row["cuda_allocated_after_forward"] + -(-largest // BLOCK) * BLOCK

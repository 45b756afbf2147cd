"""What gpu_runs/checkpoint_bench.py writes differently on CUDA, applied to the GPU-shaped copy of a CPU file.

On CUDA (one_mode's `dev.type == "cuda"` branch) the activation bytes of every mode come from the caching
allocator, not from MemTracker, and the row says so in `memory_source`: `act_after_forward` is
torch.cuda.memory_allocated() after forward minus before, `act_peak_backward` is max_memory_allocated()
during backward minus the same baseline, with every gradient allocated before that baseline. The field names and types are the CPU ones; only the method
string differs. The numbers stay the CPU file's (the fixture's `command` says they are not a GPU
measurement), so a GPU tab that models them with CUDA's widths (bool masks, fp32 LayerNorm statistics)
shows a difference: that is expected of a synthetic fixture, and it is what the tests check the tab
computes.
"""
from __future__ import annotations

# gpu_runs/checkpoint_bench.py one_mode, CUDA branch: every gradient is preallocated before the baseline
CUDA_SOURCE = ("torch.cuda.memory_allocated / max_memory_allocated minus the bytes before forward "
               "(gradients preallocated before it)")


def augment(data: dict) -> None:
    for row in data["measurements"]["modes"]:
        row["memory_source"] = CUDA_SOURCE

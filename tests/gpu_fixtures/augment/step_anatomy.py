"""What gpu_runs/step_anatomy.py writes differently on CUDA, applied to the GPU-shaped copy of a CPU file.

The program's CUDA branch (gpu_runs/step_anatomy.py, measure):
  * the model runs in bf16 (`dtype = torch.bfloat16 if device.type == "cuda"`): params["dtype"] is "bfloat16",
    every parameter's gradient holds 2 bytes an element (timeline "params" rows' "bytes" = numel · 2), Adam's
    exp_avg / exp_avg_sq are bf16 like the parameters (optimizer rows' "state_bytes" = 2 · 2 bytes an element;
    the fused step counter is a 0-dim tensor, not counted), and a step's minimum traffic is 7 · numel · 2
    ("bytes_min"; "GBps" = bytes_min / time);
  * the step of the timeline uses the fused Adam: params["default_impl"] = "fused";
  * the split check's tolerance is TOL[torch.bfloat16] = 1e-2;
  * params["timing"] names CUDA events recorded in the hooks and read after one synchronize per step.

The times stay the CPU file's (the fixture's `command` says they are not a GPU measurement); the GB/s of
the optimizer rows follow from them and the bf16 bytes, as the program computes them.
"""
from __future__ import annotations

BF16 = 2
BF16_TOL = 1e-2  # gpu_runs/step_anatomy.py TOL[torch.bfloat16]
CUDA_TIMING = ("CUDA events on the current stream, also inside post-accumulate-grad hooks, read after one "
               "synchronize per step; medians over steps after warm-up")


def augment(data: dict) -> None:
    if "measurements" not in data:
        raise ValueError("step_anatomy: no CPU result to mirror (run `make runs` first); this module only "
                         "converts a CPU file's copy")
    p, m = data["params"], data["measurements"]
    p.update(dtype="bfloat16", default_impl="fused", timing=CUDA_TIMING)
    for row in m["timeline"]["params"]:
        numel = 1
        for s in row["shape"]:
            numel *= s
        row["bytes"] = numel * BF16
    for row in m["optimizer"]:
        if not row.get("supported"):
            continue
        row["state_bytes"] = 2 * row["params"] * BF16
        row["bytes_min"] = 7 * row["params"] * BF16
        row["GBps"] = row["bytes_min"] / (row["ms_median"] / 1e3) / 1e9
    m["stages_check"]["tol"] = BF16_TOL

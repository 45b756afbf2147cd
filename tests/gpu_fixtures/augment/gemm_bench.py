"""What gpu_runs/gemm_bench.py writes differently on CUDA, applied to the GPU-shaped copy of a CPU file.

The program's CUDA branch (gpu_runs/gemm_bench.py, measure):
  * the products are bf16: `dtype = torch.bfloat16 if device.type == "cuda"`, so params["dtype"], the peak's
    and every sweep row's "dtype" are "bfloat16", and every check's tolerance is TOL[torch.bfloat16] = 2e-2;
  * params["bf16_reduced_precision_reduction"] is torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    (None on CPU). Its default in torch 2.13 is True: ATen's Context.h initialises allow_bf16_reduction_cublas to
    CuBLASReductionOption::AllowReducedPrecisionWithSplitK (torch/include/ATen/Context.h:504-505), which the
    Python getter (torch/backends/cuda/__init__.py:171-173) reports as True;
  * the timed products' reference is float64 on the device ("float64 on cuda"), and params["timing"] names
    CUDA events instead of time.perf_counter.

The times and TFLOP/s stay the CPU file's (the fixture's `command` says they are not a GPU measurement).
"""
from __future__ import annotations

BF16_TOL = 2e-2  # gpu_runs/gemm_bench.py TOL[torch.bfloat16]


def augment(data: dict) -> None:
    if "measurements" not in data:
        raise ValueError("gemm_bench: no CPU result to mirror (run `make runs` first); this module only "
                         "converts a CPU file's copy")
    p, m = data["params"], data["measurements"]
    p["dtype"] = "bfloat16"
    p["bf16_reduced_precision_reduction"] = True
    p["timing"] = p["timing"].replace("time.perf_counter", "CUDA events, read after one synchronize")
    m["peak"]["dtype"] = "bfloat16"
    for row in m["sweep"]:
        row["dtype"] = "bfloat16"
    for c in m["check"]["small_vs_float64"]:
        c["tol"] = BF16_TOL
    for c in m["check"]["timed"]:
        c["tol"] = BF16_TOL
        c["reference"] = "float64 on cuda"

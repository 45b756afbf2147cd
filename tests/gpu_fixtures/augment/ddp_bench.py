"""What gpu_runs/ddp_bench.py writes only on CUDA, added to the GPU fixtures mirrored from its CPU results.

batch_stats (Ch2-02 experiment 4): torch 2.13's nn.SyncBatchNorm runs only on GPU-like devices
(torch/nn/modules/batchnorm.py:844-854, SyncBatchNorm.forward raises ValueError unless the input is on
cuda/hpu/xpu/privateuse1), so on CUDA the
program's `batch_stats` takes its `try` branch: syncbn_runs True, syncbn_error None, and
syncbn_running_mean_matches_global a bool (gpu_runs/ddp_bench.py batch_stats). The fixture records the
outcome the program asserts for a correct SyncBatchNorm (True); it is not a measurement.

overlap and profile_summary (Ch2-03 experiment 3): on CUDA the overlap timeline's marks are CUDA events
(overlap's "clock": "CUDA events"), the profiler also records CUDA activity, so every event has a
device_total_us (the kernels' time; 0.0 on CPU), and the collectives are NCCL's, not gloo's: the event
names "gloo:all_reduce" become "nccl:all_reduce". Synthetic device times: half the CPU time for the
collective, a tenth for the rest. Only the shape is meant to be true.
"""
from __future__ import annotations


def augment(data: dict) -> None:
    stats = data["measurements"]["batch_stats"]
    stats.update({"syncbn_runs": True, "syncbn_error": None, "syncbn_running_mean_matches_global": True})

    if "overlap" in data["measurements"]:
        data["measurements"]["overlap"]["clock"] = "CUDA events"
    prof = data["measurements"].get("profile")
    if prof:
        for key in ("top", "comm_events"):
            for r in prof[key]:
                r["name"] = r["name"].replace("gloo:", "nccl:")
                comm = "all_reduce" in r["name"] or "nccl" in r["name"]
                r["device_total_us"] = r["cpu_total_us"] * (0.5 if comm else 0.1)

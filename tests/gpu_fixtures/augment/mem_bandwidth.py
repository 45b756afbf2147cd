"""What gpu_runs/mem_bandwidth.py writes only on CUDA, added to the GPU-shaped copy of a CPU file.

The program's CUDA branch (gpu_runs/mem_bandwidth.py):
  * device_to_device: `memory` is "HBM" (the copy is between two buffers in the GPU's own memory);
  * host_device(), for "host_to_device" and "device_to_host": {"applies": True, "pinned": rows, "pageable": rows},
    one row per size of params["host_sizes"], each with what timed_copies(..., wall=True) returns:
    bytes, iters_per_span, time_us_median, GBps, wall_us_median, wall_GBps (the host's wall clock of each span,
    closed by a synchronize: the second method);
  * best: host_to_device_{pinned,pageable}_GBps and device_to_host_{pinned,pageable}_GBps are the rows' maxima
    (None on CPU);
  * check.copies gains one entry per host copy ("host_to_device/pinned", ...);
  * params["timing"] names CUDA events.

The host↔device numbers are SYNTHETIC, from a stated model, not a measurement (the fixture's `command` says
so): time = latency + bytes / rate with pinned copies at 80 % of a PCIe Gen5 x16 link (device-to-host 95 % of
that) after 8 µs, pageable copies at 20 GB/s after 20 µs (a pageable copy stages through a driver buffer on
the host), and the host wall clock 2 % slower than the device clock. The device-to-device rows stay the CPU
file's numbers. Only the shape matters: the pages must render it.
"""
from __future__ import annotations

import math

PCIE_GEN5_X16 = 16 * 32e9 * 128 / 130 / 8  # bytes/s, one direction
MODEL = {  # (direction, memory) -> (latency s, rate bytes/s)
    ("host_to_device", "pinned"): (8e-6, 0.8 * PCIE_GEN5_X16),
    ("device_to_host", "pinned"): (8e-6, 0.95 * 0.8 * PCIE_GEN5_X16),
    ("host_to_device", "pageable"): (20e-6, 20e9),
    ("device_to_host", "pageable"): (20e-6, 20e9),
}
CUDA_TIMING = "CUDA events, read after one synchronize"


def _row(n: int, latency: float, rate: float, span_ms: float) -> dict:
    t = latency + n / rate
    wall = 1.02 * t
    return {"bytes": n, "iters_per_span": max(1, min(5000, math.ceil(span_ms / (t * 1e3)))),
            "time_us_median": t * 1e6, "GBps": n / t / 1e9, "wall_us_median": wall * 1e6, "wall_GBps": n / wall / 1e9}


def augment(data: dict) -> None:
    if "measurements" not in data:
        raise ValueError("mem_bandwidth: no CPU result to mirror (run `make runs` first); this module only "
                         "converts a CPU file's copy")
    p, m = data["params"], data["measurements"]
    p["timing"] = p["timing"].replace("time.perf_counter", CUDA_TIMING)
    m["device_to_device"]["memory"] = "HBM"
    for direction in ("host_to_device", "device_to_host"):
        block = {"applies": True}
        for memory in ("pinned", "pageable"):
            lat, rate = MODEL[(direction, memory)]
            block[memory] = [_row(n, lat, rate, p["span_ms"]) for n in p["host_sizes"]]
            m["best"][f"{direction}_{memory}_GBps"] = max(r["GBps"] for r in block[memory])
            m["check"]["copies"] += [{"copy": f"{direction}/{memory}", "bytes": n, "equal": True} for n in p["host_sizes"]]
        m[direction] = block

"""What gpu_runs/offload_bench.py writes only on CUDA, added to the GPU-shaped copy of a CPU file.

The program's CUDA branches (read from gpu_runs/offload_bench.py):
  * run_config, per configuration that started: `memcpy_bytes` {"DtoH", "HtoD", "DtoD"} summed from the
    profiler's memcpy events over `memcpy_steps` further steps (= cfg["memcpy_steps"], 3 in the full and gpu
    presets; the profiled loop calls fwd_bwd and engine.step only, no loss.item()),
    `gpu_max_allocated_bytes` (the configuration's peak: harness.PeakMemory resets it when the configuration
    starts) and `gpu_allocated_at_start_bytes` (what earlier configurations left allocated, PeakMemory.base);
  * cpu_adam("auto") on CUDA loads DeepSpeedCPUAdam (building the op if need be): the offloading
    configurations' `client_optimizer` is "DeepSpeedCPUAdam", and params["cpu_adam"] says it was used;
  * the inventory's `device` is where each tensor lives: "cuda" for what stays on the GPU;
  * host_probe, per rank: `pcie_bytes`, `pcie_h2d_GBps`, `pcie_d2h_GBps` (pinned copies over the link).

The numbers are synthetic (the fixture's `command` says so): the link bytes are what DeepSpeed 0.19.8's
source copies (snippets/ch5_zero_sharding/d06_zero_offload_infinity.DEEPSPEED_OFFLOAD_COPIES: fp32
gradient partition down, 16-bit update up, under ZeRO-2 offload; ZeRO-3 with parameter offload also fetches
the 16-bit parameter shards in forward and backward and sends the 16-bit gradient shard down); devices follow where DeepSpeed keeps each state on CUDA
(stage_1_and_2.py / stage3.py put the fp32 master, its gradient and Adam's state on the host when
`offload_optimizer.device == "cpu"`, the 16-bit shards too when `offload_param.device == "cpu"`); the
PCIe bandwidths are 80 % of a PCIe Gen5 x16 link. Only the shape matters: the pages must render them.
"""
from __future__ import annotations

PCIE_GEN5_X16 = 16 * 32e9 * 128 / 130 / 8  # bytes/s, one direction


def _devices(zero: dict) -> dict[str, str]:
    opt = zero.get("offload_optimizer", {}).get("device") == "cpu"
    par = zero.get("offload_param", {}).get("device") == "cpu"
    host = {"params16": par, "grads": opt, "master_fp32": opt, "adam_m": opt, "adam_v": opt}
    return {state: "cpu" if h else "cuda" for state, h in host.items()}


def _link_bytes(zero: dict, psi: int, n: int) -> tuple[int, int]:
    """(DtoH, HtoD) bytes of one step."""
    shard = psi // n
    if "offload_optimizer" not in zero and "offload_param" not in zero:
        return 0, 0
    if zero["stage"] == 2:
        return 4 * shard, 2 * shard
    down = 2 * shard                                   # 16-bit gradient shard to the host
    up = 2 * 2 * shard if "offload_param" in zero else 2 * shard  # shards fetched in forward and backward
    return down, up


def _memcpy_steps(p: dict) -> int:
    """cfg["memcpy_steps"] (params holds every cfg key); a CPU file written before the key existed: its preset's."""
    if "memcpy_steps" in p:
        return p["memcpy_steps"]
    from gpu_runs.offload_bench import PRESETS

    return PRESETS[p["preset"]]["memcpy_steps"]


def augment(data: dict) -> None:
    n = data["hardware"]["world_size"]
    p = data["params"]
    steps = _memcpy_steps(p)
    p["memcpy_steps"] = steps
    p["cpu_adam"] = {"used": True, "mode": "auto", "why": "loaded (prebuilt)"}
    left: dict[int, int] = {}  # per rank: bytes earlier configurations leave allocated (PeakMemory.base)
    for row in data["measurements"]:
        if row["config"] == "host_probe":
            bw = 0.8 * PCIE_GEN5_X16 / 1e9
            row["probe"].update({"pcie_bytes": 1 << 28, "pcie_h2d_GBps": round(bw, 2), "pcie_d2h_GBps": round(0.95 * bw, 2)})
            continue
        if not row["ok"]:
            continue
        zero = row["zero_optimization"]
        where = _devices(zero)
        for e in row["inventory"]:
            if e["device"] is not None:
                e["device"] = where[e["state"]]
        down, up = _link_bytes(zero, row["psi"], n)
        row["memcpy_bytes"] = {"DtoH": steps * down, "HtoD": steps * up, "DtoD": 0}
        row["memcpy_steps"] = steps
        offloads = "offload_optimizer" in zero
        row["client_optimizer"] = "DeepSpeedCPUAdam" if offloads else "AdamW"
        row["inner_optimizer"] = row["client_optimizer"]
        on_gpu = sum(e["bytes"] for e in row["inventory"] if e["device"] == "cuda")
        activations = 2 * p["batch"] * p.get("seq", 1) * 5 * p["hidden"] * p["layers"]  # bf16, fc1 out + GeLU + fc2 in
        base = left.get(row["rank"], 0)
        row["gpu_allocated_at_start_bytes"] = base
        row["gpu_max_allocated_bytes"] = base + on_gpu + activations
        left[row["rank"]] = base + (1 << 20)  # a MiB each configuration leaves (caching allocator, DeepSpeed buffers)

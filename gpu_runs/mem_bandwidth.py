"""Memory bandwidth: device-to-device copies (HBM on a GPU, DRAM memcpy on CPU) and host↔device copies
from pinned and pageable host memory, over a sweep of sizes, in GB/s.

These are the physical limits Ch1 (a GPU's own memory against its links) and Ch5-06 (what offloading
optimizer state over PCIe costs) read against.

For every size in the sweep it copies one buffer into another with Tensor.copy_:
  device_to_device   dst.copy_(src), both on env.device (on CPU: one host buffer into another);
  host_to_device     device.copy_(host, non_blocking=pinned), from pinned (page-locked,
                     torch.empty(pin_memory=True)) and from pageable host memory;
  device_to_host     host.copy_(device, non_blocking=pinned), into pinned and into pageable memory.
Timing is nccl-tests style: warm-up copies, then `spans` spans of back-to-back copies, each span one
interval (CUDA events on a GPU, read after one synchronize; time.perf_counter on CPU); per copy = span /
copies; the row's time is the median over spans. Host↔device rows also record the host's wall clock
over each span (a synchronize closes it): a second method, since a pageable copy stages through a
driver buffer on the host. GBps = bytes / time (bytes copied); for device_to_device also
traffic_GBps = 2·bytes / time (every byte is read once and written once: what a memory system
datasheet counts). The buffers hold random bytes (never zeros), the destination is poisoned first
and compared with the source after the timed copies.

On a machine without CUDA there is no device memory: host_to_device and device_to_host are recorded
as not applicable, with the reason, and no numbers.

    torchrun --nproc_per_node=1 gpu_runs/mem_bandwidth.py                   # CPU: DRAM memcpy only
    torchrun --nproc_per_node=1 gpu_runs/mem_bandwidth.py --preset gpu      # one GPU: HBM and PCIe
    torchrun --nproc_per_node=1 gpu_runs/mem_bandwidth.py --preset tiny --no-save
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

PROGRAM = "mem_bandwidth"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PRESETS = {
    "tiny": {"d2d_sizes": [4 * KiB, 64 * KiB, 1 * MiB], "host_sizes": [4 * KiB, 64 * KiB, 1 * MiB],
             "warmup": 1, "spans": 3, "span_ms": 2.0, "max_iters": 50},
    "full": {"d2d_sizes": [4 * KiB * 4 ** i for i in range(9)],                      # 4 KiB .. 256 MiB
             "host_sizes": [4 * KiB * 4 ** i for i in range(9)],
             "warmup": 2, "spans": 7, "span_ms": 30.0, "max_iters": 5000},
    "gpu": {"d2d_sizes": [4 * KiB * 4 ** i for i in range(11)],                       # 4 KiB .. 4 GiB
            "host_sizes": [4 * KiB * 4 ** i for i in range(10)],                     # 4 KiB .. 1 GiB
            "warmup": 3, "spans": 7, "span_ms": 20.0, "max_iters": 5000},
}
NOT_APPLICABLE = ("no CUDA device: host and 'device' memory are the same DRAM, so there is no host↔device "
                  "copy to measure (no numbers recorded; device_to_device is the DRAM memcpy)")


def random_bytes(n: int, device) -> torch.Tensor:
    """n random bytes on `device` (generated on the device; a CPU generator for CPU)."""
    g = torch.Generator(device=device).manual_seed(n % 1000003)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device=device, generator=g)


def timed_copies(dst: torch.Tensor, src: torch.Tensor, cfg, clock: harness.Clock, non_blocking: bool,
                 wall: bool) -> dict:
    """Per-copy median time of dst.copy_(src), back to back, as `spans` spans (and the host wall clock)."""
    def copy():
        dst.copy_(src, non_blocking=non_blocking)

    per, iters, walls = harness.span_times_ms(copy, clock, cfg["warmup"], cfg["spans"], cfg["span_ms"],
                                              cfg["max_iters"], wall=wall)
    n = src.numel() * src.element_size()
    t = statistics.median(per) / 1e3
    out = {"bytes": n, "iters_per_span": iters, "time_us_median": t * 1e6, "GBps": n / t / 1e9}
    if walls:
        out["wall_us_median"] = statistics.median(walls) * 1e3
        out["wall_GBps"] = n / (statistics.median(walls) / 1e3) / 1e9
    return out


def copy_ok(dst: torch.Tensor, src: torch.Tensor) -> bool:
    return bool(torch.equal(dst.to(src.device), src))


def device_to_device(cfg, device, clock) -> tuple[list[dict], list[dict]]:
    rows, checks = [], []
    for n in cfg["d2d_sizes"]:
        src = random_bytes(n, device)
        dst = torch.full((n,), 0xA5, dtype=torch.uint8, device=device)  # poisoned
        r = timed_copies(dst, src, cfg, clock, non_blocking=False, wall=False)
        r["traffic_GBps"] = 2 * r["GBps"]
        rows.append(r)
        checks.append({"copy": "device_to_device", "bytes": n, "equal": copy_ok(dst, src)})
        print(f"d2d {n:>12,} B: {r['time_us_median']:10.2f} us  {r['GBps']:9.2f} GB/s "
              f"(read+write {r['traffic_GBps']:.2f})", flush=True)
        del src, dst
    return rows, checks


def host_device(cfg, device, clock, direction: str) -> tuple[dict, list[dict]]:
    if device.type != "cuda":
        return {"applies": False, "reason": NOT_APPLICABLE}, []
    out, checks = {"applies": True}, []
    for memory in ("pinned", "pageable"):
        rows = []
        for n in cfg["host_sizes"]:
            on_device = random_bytes(n, device)
            host = torch.empty(n, dtype=torch.uint8, pin_memory=memory == "pinned")
            if direction == "host_to_device":
                host.copy_(on_device)  # the host buffer gets the random bytes; the device one is poisoned
                on_device.fill_(0xA5)
                src, dst = host, on_device
            else:
                host.fill_(0xA5)
                src, dst = on_device, host
            r = timed_copies(dst, src, cfg, clock, non_blocking=memory == "pinned", wall=True)
            rows.append(r)
            checks.append({"copy": f"{direction}/{memory}", "bytes": n, "equal": copy_ok(dst, src)})
            print(f"{direction} {memory:>8} {n:>12,} B: {r['time_us_median']:10.2f} us  {r['GBps']:7.2f} GB/s "
                  f"(host wall {r['wall_GBps']:.2f})", flush=True)
            del host, on_device, src, dst
        out[memory] = rows
    return out, checks


def measure(env, cfg, args):
    device = env.device
    clock = harness.Clock(device)
    d2d, checks = device_to_device(cfg, device, clock)
    h2d, c1 = host_device(cfg, device, clock, "host_to_device")
    d2h, c2 = host_device(cfg, device, clock, "device_to_host")
    checks += c1 + c2
    ok_here = all(c["equal"] for c in checks)
    flag = torch.tensor([1 if ok_here else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # on env.device: NCCL has no CPU backend
    ok = bool(flag.item())
    if not ok and env.is_main:
        print("error: a copy's destination differs from its source (measurements/check)", file=sys.stderr)
    best = {"device_to_device_GBps": max(r["GBps"] for r in d2d),
            "device_to_device_traffic_GBps": max(r["traffic_GBps"] for r in d2d)}
    for name, block in (("host_to_device", h2d), ("device_to_host", d2h)):
        for memory in ("pinned", "pageable"):
            best[f"{name}_{memory}_GBps"] = max(r["GBps"] for r in block[memory]) if block["applies"] else None
    memory = "HBM" if device.type == "cuda" else "DRAM"
    params = {"d2d_sizes": cfg["d2d_sizes"], "host_sizes": cfg["host_sizes"], "warmup": cfg["warmup"],
              "spans": cfg["spans"], "span_ms": cfg["span_ms"], "dtype": "uint8",
              "torch_threads": torch.get_num_threads(),
              "copy": "Tensor.copy_ (contiguous uint8 buffers; non_blocking=True from/into pinned memory only)",
              "timing": ("warm-up, one probe copy, then `spans` spans of back-to-back copies (about span_ms "
                         "each), each span one interval: "
                         + ("CUDA events, read after one synchronize" if device.type == "cuda"
                            else "time.perf_counter") + "; per copy = span / copies; median over spans"),
              "GBps": "bytes copied / time, 1 GB = 1e9 B; traffic_GBps (device_to_device) = 2·bytes / time"}
    measurements = {"device_to_device": {"memory": memory, "rows": d2d}, "host_to_device": h2d,
                    "device_to_host": d2h, "best": best, "check": {"ok": ok, "copies": checks}}
    return params, measurements, ok


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__))

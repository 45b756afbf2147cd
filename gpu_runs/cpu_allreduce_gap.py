"""Same-box AllReduce gap on CPU: gloo vs DeepSpeed's shared-memory all-reduce vs a memcpy ceiling.

On one machine every rank's buffer lives in the same DRAM, so an all-reduce is, physically,
memory traffic. This program measures three things on the same box, at the same sizes:

  * gloo      `torch.distributed.all_reduce` on a gloo process group (TCP loopback between
              the processes: every byte goes user buffer -> kernel socket -> user buffer);
  * ds_shm    DeepSpeed's CPU shared-memory all-reduce (`deepspeed.comm.inference_all_reduce`,
              op `ShareMemCommBuilder`, csrc/cpu/comm/shm.cpp): each rank copies its data into a
              shared segment, reduces its slice reading every rank's segment, copies the result back;
  * memcpy    `dst.copy_(src)` of S bytes on every rank at the same time: the rate at which this
              box moves bytes between two DRAM buffers, the ceiling of any same-box transfer.

Results are checked (exact small-integer sums) and written with provenance. GPUs are hidden: this
is a host-memory measurement, run on whatever box it is launched on (a GPU box's host included).

    torchrun --nproc_per_node=2 gpu_runs/cpu_allreduce_gap.py                  # committed CPU result
    torchrun --nproc_per_node=2 gpu_runs/cpu_allreduce_gap.py --preset tiny --no-save
"""
from __future__ import annotations

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # host-memory measurement: never pick a GPU

import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from snippets.common.alphabeta import BUSBW_FACTOR  # noqa: E402

PROGRAM = "cpu_allreduce_gap"
METHODS = ("gloo", "ds_shm", "memcpy")
PRESETS = {
    "tiny": {"min_bytes": 1 << 12, "max_bytes": 1 << 16, "factor": 16, "warmup": 1, "iters": 3, "max_iter_bytes": 1 << 20},
    "full": {"min_bytes": 1 << 14, "max_bytes": 64 << 20, "factor": 4, "warmup": 3, "iters": 30, "max_iter_bytes": 1 << 30},
    "gpu": {"min_bytes": 1 << 14, "max_bytes": 256 << 20, "factor": 4, "warmup": 5, "iters": 50, "max_iter_bytes": 1 << 32},
}
DTYPE, ITEM = torch.float32, 4


def shm_all_reduce():
    """DeepSpeed's CPU shm all-reduce, or None (with the reason) where this box cannot run it."""
    import deepspeed
    import deepspeed.comm as dscomm
    from deepspeed.comm import comm as ds_comm_module

    if os.environ.get("LOCAL_WORLD_SIZE") != os.environ.get("WORLD_SIZE"):
        return None, "ranks on more than one box: shared memory cannot reach them all"
    # DeepSpeed 0.19.8 shm_interface.cpp `initialize` maps the shared segments only when the env
    # var LOCAL_SIZE equals the world size (its own launcher sets it; torchrun sets LOCAL_WORLD_SIZE).
    # Without it the op is loaded but never initialised, and the first call segfaults.
    os.environ.setdefault("LOCAL_SIZE", os.environ["LOCAL_WORLD_SIZE"])
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)  # reuses the existing process group
    backend = ds_comm_module.cdb
    if getattr(backend, "shm_comm_op", None) is None:
        return None, "DeepSpeed's ShareMemCommBuilder op is not available on this box"
    if getattr(backend, "shm_vector_kernel_level", 0) < 1:
        return None, "the shm fp32 kernel needs AVX2"

    def run(t):
        dscomm.inference_all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    return run, deepspeed.__version__


def time_iters(env, fn, inp0, iters: int, warmup: int):
    """Per iteration: fresh input, barrier, time one call; returns (times, last result)."""
    for _ in range(warmup):
        fn(inp0.clone())
    times, box = [], {}
    for _ in range(iters):
        x = inp0.clone()
        times.append(harness.time_call(env, lambda: box.update(res=fn(x))))
    return times, box.get("res")


def measure(env, cfg, args):
    n = env.world_size
    shm, shm_info = shm_all_reduce()
    if shm is None and env.is_main:
        print(f"ds_shm skipped: {shm_info}", flush=True)
    rows, total_wrong = [], 0
    for size in harness.geometric(cfg["min_bytes"], cfg["max_bytes"], cfg["factor"]):
        count = size // ITEM
        # host tensors by design: this program hides the GPUs (a host-memory measurement), env.device is the CPU
        idx = torch.arange(count, dtype=DTYPE, device=env.device) % 97          # small integers: sums stay exact
        inp0, exp = idx + env.rank, n * idx + n * (n - 1) / 2
        iters = max(3, min(cfg["iters"], cfg["max_iter_bytes"] // size))
        dst = torch.empty_like(inp0)
        fns = {"gloo": lambda t: (dist.all_reduce(t), t)[1],
               "memcpy": lambda t: dst.copy_(t)}
        if shm is not None:
            fns["ds_shm"] = shm
        for method in METHODS:
            if method not in fns:
                continue
            times, res = time_iters(env, fns[method], inp0, iters, cfg["warmup"])
            wrong = int((res != (inp0 if method == "memcpy" else exp)).sum().item())
            t = harness.max_over_ranks(env, times)   # a collective lasts as long as its slowest rank
            [w] = harness.reduce_values(env, [wrong], "sum", torch.int64)
            w = int(w)
            total_wrong += w
            med = statistics.median(t)
            row = {"method": method, "bytes": size, "iters": iters, "time_us_median": med * 1e6,
                   "time_us_min": min(t) * 1e6, "wrong": w,
                   # memcpy: bytes copied per second on each rank (all ranks copying at once);
                   # all-reduce: nccl-tests' algbw = S/t and busbw = algbw·2(N−1)/N
                   "algbw_GBps": size / med / 1e9,
                   "busbw_GBps": (size / med / 1e9) * (1.0 if method == "memcpy" else BUSBW_FACTOR["all_reduce"](n))}
            rows.append(row)
            if env.is_main:
                print(f"{method:>7} {size:>10} B  {med * 1e6:>10.1f} us  algbw {row['algbw_GBps']:7.3f} GB/s  "
                      f"busbw {row['busbw_GBps']:7.3f} GB/s  wrong {w}", flush=True)
    params = {**cfg, "dtype": "float32", "methods": [m for m in METHODS],
              "ds_shm": "ran" if shm is not None else f"skipped: {shm_info}",
              "threads": torch.get_num_threads(),
              "timing": "per iteration: barrier, then time the call; max over ranks; median over iterations"}
    if shm is not None:  # DeepSpeed never unlinks its segments (2 MiB + 64 MiB per rank): remove ours
        dist.barrier()   # every rank is done with every segment
        seg = Path("/dev/shm") / (f"deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_"
                                  f"{os.environ.get('MASTER_PORT', '')}_{env.rank}")
        seg.unlink(missing_ok=True)
    return params, rows, f"{total_wrong} wrong elements" if total_wrong else ""


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2))

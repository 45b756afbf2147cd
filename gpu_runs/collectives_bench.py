"""Collectives benchmark in the manner of nccl-tests, for gloo (CPU) and NCCL (GPU).

For each collective and each message size S (bytes, nccl-tests' convention: the whole buffer
for all_reduce / broadcast / all_to_all, the whole gathered or scattered array for all_gather /
reduce_scatter), it runs warm-up iterations, then timed iterations, checks every result against
the exact expected values, and records time, algbw = S/t and busbw = algbw·factor(n)
(nccl-tests doc/PERFORMANCE.md; factors in snippets/common/alphabeta.py).

    torchrun --nproc_per_node=4 gpu_runs/collectives_bench.py                 # CPU, gloo
    torchrun --nproc_per_node=8 gpu_runs/collectives_bench.py --preset gpu    # 8 GPUs, NCCL
    torchrun --nproc_per_node=2 gpu_runs/collectives_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from snippets.common.alphabeta import BUSBW_FACTOR  # noqa: E402

PROGRAM = "collectives_bench"
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
PRESETS = {
    # bytes: min, max, factor; timed iterations shrink with size to bound the run time
    "tiny": {"min_bytes": 64, "max_bytes": 4096, "factor": 4, "warmup": 2, "iters": 5, "max_iter_bytes": 1 << 16},
    "full": {"min_bytes": 8, "max_bytes": 32 << 20, "factor": 2, "warmup": 5, "iters": 50, "max_iter_bytes": 1 << 30},
    "gpu": {"min_bytes": 8, "max_bytes": 1 << 30, "factor": 2, "warmup": 20, "iters": 100, "max_iter_bytes": 1 << 36},
}
DTYPE = torch.float32
ITEM = 4


def sizes(min_b: int, max_b: int, factor: int) -> list[int]:
    out, s = [], min_b
    while s <= max_b:
        out.append(s)
        s *= factor
    return out


def buffers(op: str, size: int, n: int, rank: int, device):
    """Input, output and expected output for one op at nccl-tests size `size` (bytes)."""
    count = max(size // ITEM, n)
    count -= count % n  # every op here needs count divisible by n
    per = count // n
    idx = torch.arange(count, device=device, dtype=DTYPE) % 97  # small integers: sums stay exact
    if op == "all_reduce":
        inp = idx + rank
        exp = n * idx + n * (n - 1) / 2
        return inp, torch.empty_like(inp), exp, count
    if op == "broadcast":
        inp = idx + 1000 if rank == 0 else torch.zeros(count, device=device, dtype=DTYPE)
        return inp, None, idx + 1000, count
    if op == "reduce_scatter":
        inp = idx + rank  # the whole array (count) on every rank, each rank keeps its 1/n block
        exp = (n * idx + n * (n - 1) / 2)[rank * per:(rank + 1) * per]
        return inp, torch.empty(per, device=device, dtype=DTYPE), exp, count
    if op == "all_gather":
        inp = idx[:per] + 1000 * rank
        exp = torch.cat([idx[:per] + 1000 * r for r in range(n)])
        return inp, torch.empty(count, device=device, dtype=DTYPE), exp, count
    if op == "all_to_all":
        # block j of rank r's input is (r, j); after the exchange block j of rank r holds (j, r)
        blocks = torch.arange(n, device=device, dtype=DTYPE).repeat_interleave(per)
        inp = 1000 * rank + blocks
        exp = 1000 * blocks + rank
        return inp, torch.empty_like(inp), exp, count
    raise ValueError(op)


def run_op(op: str, inp, out):
    if op == "all_reduce":
        out.copy_(inp)
        dist.all_reduce(out)
        return out
    if op == "broadcast":
        dist.broadcast(inp, src=0)
        return inp
    if op == "reduce_scatter":
        dist.reduce_scatter_tensor(out, inp)
        return out
    if op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
        return out
    if op == "all_to_all":
        dist.all_to_all_single(out, inp)
        return out
    raise ValueError(op)


def main(argv=None) -> int:
    parser = harness.base_parser(__doc__.splitlines()[0], PRESETS)
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    args = parser.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise harness.UsageError(f"unknown op(s) {bad}; choose from {list(OPS)}")
    env = harness.init(min_world_size=2)
    cfg = PRESETS[args.preset]
    n = env.world_size
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    rows = []
    for op in ops:
        seen = set()
        for size in sizes(cfg["min_bytes"], cfg["max_bytes"], cfg["factor"]):
            inp0, out, exp, count = buffers(op, size, n, env.rank, env.device)
            if count in seen:  # small sizes round up to N elements: measure each size once
                continue
            seen.add(count)
            iters = max(3, min(cfg["iters"], cfg["max_iter_bytes"] // max(size, 1)))
            for _ in range(cfg["warmup"]):
                run_op(op, inp0.clone(), out)
            sync()
            times, wrong = [], 0
            for _ in range(iters):
                inp = inp0.clone()
                dist.barrier()
                sync()
                t0 = time.perf_counter()
                res = run_op(op, inp, out)
                sync()
                times.append(time.perf_counter() - t0)
                wrong += int((res != exp).sum().item())
            # the collective lasts as long as its slowest rank: max over ranks, per iteration
            t = torch.tensor(times, dtype=torch.float64)
            w = torch.tensor([wrong], dtype=torch.int64)
            if env.backend == "nccl":
                t, w = t.to(env.device), w.to(env.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            dist.all_reduce(w, op=dist.ReduceOp.SUM)
            t, w = t.cpu().tolist(), int(w.item())
            med = statistics.median(t)
            s_bytes = count * ITEM
            algbw = s_bytes / med
            rows.append({"op": op, "bytes": s_bytes, "count": count, "iters": iters,
                         "time_us_median": med * 1e6, "time_us_min": min(t) * 1e6,
                         "time_us_p90": sorted(t)[int(0.9 * (len(t) - 1))] * 1e6,
                         "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * BUSBW_FACTOR[op](n) / 1e9,
                         "wrong": w})
            if env.is_main:
                print(f"{op:>15} {s_bytes:>10} B  {med * 1e6:>10.1f} us  algbw {algbw / 1e9:7.3f} GB/s  "
                      f"busbw {algbw * BUSBW_FACTOR[op](n) / 1e9:7.3f} GB/s  wrong {w}", flush=True)
    total_wrong = sum(r["wrong"] for r in rows)
    params = {"preset": args.preset, **cfg, "ops": ops, "dtype": "float32",
              "timing": "per iteration: barrier, then time the call; max over ranks; median over iterations"}
    harness.write_results(env, PROGRAM, __file__, params, rows, args.out, save=not args.no_save)
    harness.finish()
    if total_wrong:
        print(f"error: {total_wrong} wrong elements", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

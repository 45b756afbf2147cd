"""Collectives benchmark in the manner of nccl-tests, for gloo (CPU) and NCCL (GPU).

For each collective and each message size S (bytes, nccl-tests' convention: the whole buffer
for all_reduce / broadcast / all_to_all, the whole gathered or scattered array for all_gather /
reduce_scatter), it checks `checks` calls against the exact expected values, runs warm-up calls,
then times the collective the way nccl-tests does: `spans` spans of back-to-back calls, each span
one interval (CUDA events on a GPU, read after the span; time.perf_counter on CPU), time per call =
span / calls, the slowest rank's per span; the row's time is the median over spans. No barrier or
synchronize sits between two timed calls, so a small message's time is the collective's, not a
fence's. It records time, algbw = S/t and busbw = algbw·factor(n) (nccl-tests doc/PERFORMANCE.md;
factors in snippets/common/alphabeta.py).

    torchrun --nproc_per_node=4 gpu_runs/collectives_bench.py                 # CPU, gloo
    torchrun --nproc_per_node=8 gpu_runs/collectives_bench.py --preset gpu    # 8 GPUs, NCCL
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \
        --rdzv-id=bench gpu_runs/collectives_bench.py --preset gpu           # 2 nodes × 8 GPUs
    torchrun --nproc_per_node=2 gpu_runs/collectives_bench.py --preset tiny --no-save

Several nodes: run the same torchrun line on every node (c10d rendezvous at HOST, one of them);
each rank uses cuda:LOCAL_RANK of its node, and the results file records nodes × GPUs per node.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from snippets.common.alphabeta import BUSBW_FACTOR  # noqa: E402

PROGRAM = "collectives_bench"
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
PRESETS = {
    # bytes: min, max, factor; iters: timed calls per size (spans × calls per span), shrinking with size
    # (at most max_iter_bytes moved) to bound the run time; checks: verified calls per size (untimed)
    "tiny": {"min_bytes": 64, "max_bytes": 4096, "factor": 4, "warmup": 2, "iters": 6, "max_iter_bytes": 1 << 16,
             "spans": 3, "checks": 2},
    "full": {"min_bytes": 8, "max_bytes": 32 << 20, "factor": 2, "warmup": 5, "iters": 50, "max_iter_bytes": 1 << 30,
             "spans": 5, "checks": 2},
    "gpu": {"min_bytes": 8, "max_bytes": 1 << 30, "factor": 2, "warmup": 20, "iters": 100, "max_iter_bytes": 1 << 36,
            "spans": 5, "checks": 2},
}
METHOD = "back-to-back"  # nccl-tests: warm-up, then spans of back-to-back calls, time per call = span / calls
DTYPE = torch.float32
ITEM = 4


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


# torch 2.13 names the single-tensor collectives all_gather_single / reduce_scatter_single and deprecates
# all_gather_into_tensor / reduce_scatter_tensor (FutureWarning); older torch has only the older names.
# Looked up at each call, so that wrappers installed on torch.distributed (HARNESS_CHECK_DEVICES) apply.
def ALL_GATHER(out, inp):
    return (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)


def REDUCE_SCATTER(out, inp):
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)


def run_op(op: str, inp, out):
    """One checked call: the result is compared with the expected values (all_reduce starts from inp)."""
    if op == "all_reduce":
        out.copy_(inp)
    return launch(op, inp, out)


def launch(op: str, inp, out):
    """One call as the timed loop makes it: all_reduce in place on `out`, the others out of place
    (broadcast in place on `inp`); repeating it needs no fresh input."""
    if op == "all_reduce":
        dist.all_reduce(out)
        return out
    if op == "broadcast":
        dist.broadcast(inp, src=0)
        return inp
    if op == "reduce_scatter":
        REDUCE_SCATTER(out, inp)
        return out
    if op == "all_gather":
        ALL_GATHER(out, inp)
        return out
    if op == "all_to_all":
        dist.all_to_all_single(out, inp)
        return out
    raise ValueError(op)


def options(parser) -> None:
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))


def check(args, cfg) -> None:
    args.ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in args.ops if o not in OPS]
    if bad:
        raise harness.UsageError(f"unknown op(s) {bad}; choose from {list(OPS)}")


def span_times(env, op: str, inp, out, cfg, calls: int) -> list[float]:
    """Seconds per call of each span of `calls` back-to-back calls, the slowest rank's per span."""
    if op == "all_reduce":
        out.zero_()  # in place, repeated: zeros stay zeros (no growth, no overflow; SUM takes as long)
    for _ in range(cfg["warmup"]):
        launch(op, inp, out)
    per_call = [harness.time_loop(env, lambda: launch(op, inp, out), calls) for _ in range(cfg["spans"])]
    return harness.max_over_ranks(env, per_call)


def measure(env, cfg, args):
    n = env.world_size
    rows = []
    for op in args.ops:
        seen = set()
        for size in harness.geometric(cfg["min_bytes"], cfg["max_bytes"], cfg["factor"]):
            inp0, out, exp, count = buffers(op, size, n, env.rank, env.device)
            if count in seen:  # small sizes round up to N elements: measure each size once
                continue
            seen.add(count)
            wrong = 0
            for _ in range(cfg["checks"]):
                res = run_op(op, inp0.clone(), out)
                wrong += int((res != exp).sum().item())
            [wrong] = harness.reduce_values(env, [wrong], "sum", torch.int64)
            iters = max(cfg["spans"], min(cfg["iters"], cfg["max_iter_bytes"] // max(size, 1)))
            calls = max(1, iters // cfg["spans"])
            t = span_times(env, op, inp0.clone(), out, cfg, calls)
            med = statistics.median(t)
            s_bytes = count * ITEM
            algbw = s_bytes / med
            rows.append({"op": op, "bytes": s_bytes, "count": count, "iters": calls * cfg["spans"],
                         "spans": cfg["spans"], "calls_per_span": calls, "method": METHOD,
                         "time_us_median": med * 1e6, "time_us_min": min(t) * 1e6,
                         "time_us_p90": sorted(t)[int(0.9 * (len(t) - 1))] * 1e6,
                         "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * BUSBW_FACTOR[op](n) / 1e9,
                         "checked_calls": cfg["checks"], "wrong": int(wrong)})
            if env.is_main:
                print(f"{op:>15} {s_bytes:>10} B  {med * 1e6:>10.1f} us  algbw {algbw / 1e9:7.3f} GB/s  "
                      f"busbw {algbw * BUSBW_FACTOR[op](n) / 1e9:7.3f} GB/s  wrong {wrong}", flush=True)
    total_wrong = sum(r["wrong"] for r in rows)
    params = {**cfg, "ops": args.ops, "dtype": "float32", "method": METHOD,
              "timing": ("nccl-tests style: `checks` verified calls (untimed), warm-up, then `spans` spans of "
                         "back-to-back calls, each one interval ("
                         + ("CUDA events" if harness.on_cuda(env) else "time.perf_counter")
                         + ", a barrier and a synchronize before each span, none between calls); per call = "
                         "span / calls; max over ranks per span; median over spans")}
    return params, rows, f"{total_wrong} wrong elements" if total_wrong else ""


def main(argv=None) -> int:
    return harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, options=options, check=check,
                        argv=argv, min_world_size=2)


if __name__ == "__main__":
    sys.exit(main())

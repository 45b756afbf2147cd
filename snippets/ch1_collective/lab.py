"""Chapter 1 lab: a ring AllReduce built from point-to-point send/recv, checked and timed against
dist.all_reduce with real processes (gloo; snippets.common.procs: a forkserver on Linux, spawn elsewhere).

The worker functions live here (not in the notebook) because both start methods (forkserver on Linux, spawn on
macOS) import the function they run in the new process. Rendezvous is a file:// store in a temporary directory,
so no port is needed.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from snippets.common.procs import start_workers


# --8<-- [start:ring]
def ring_allreduce_p2p(x: torch.Tensor) -> torch.Tensor:
    """Sum x over all ranks in place with the ring of Ch1-03, using only isend/irecv.

    Rank r sends to r+1 and receives from r−1. Reduce-scatter step t: send chunk (r−t),
    receive chunk (r−1−t) and add it. All-gather step t: send chunk (r+1−t), receive chunk
    (r−t) and keep it. torch.tensor_split allows sizes not divisible by N.
    """
    n, r = dist.get_world_size(), dist.get_rank()
    if n == 1:
        return x
    chunks = list(torch.tensor_split(x.view(-1), n))
    right, left = (r + 1) % n, (r - 1) % n
    buf = torch.empty_like(chunks[0])
    for t in range(n - 1):  # reduce-scatter
        send_c, recv_c = (r - t) % n, (r - 1 - t) % n
        incoming = buf[: chunks[recv_c].numel()]
        reqs = [dist.isend(chunks[send_c], right), dist.irecv(incoming, left)]
        for q in reqs:
            q.wait()
        chunks[recv_c] += incoming
    for t in range(n - 1):  # all-gather
        send_c, recv_c = (r + 1 - t) % n, (r - t) % n
        reqs = [dist.isend(chunks[send_c], right), dist.irecv(chunks[recv_c], left)]
        for q in reqs:
            q.wait()
    return x
# --8<-- [end:ring]


def lab_input(count: int, rank: int) -> torch.Tensor:
    """Integer-valued float32 input: every partial sum is exact, so results compare with ==."""
    return (torch.arange(count, dtype=torch.float32) % 97) + 1000 * rank


# --8<-- [start:worker]
def _time_once(fn, x0: torch.Tensor) -> float:
    x = x0.clone()
    dist.barrier()
    t0 = time.perf_counter()
    fn(x)
    return time.perf_counter() - t0


def worker(rank: int, world: int, init_file: str, sizes: list[int], iters: int, out_path: str) -> None:
    """One process: check the p2p ring against dist.all_reduce, then time both (median, max over ranks)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        rows = []
        for size in sizes:
            count = max(size // 4, world)
            x0 = lab_input(count, rank)
            mine = ring_allreduce_p2p(x0.clone())
            ref = x0.clone()
            dist.all_reduce(ref)
            expected = sum(lab_input(count, q) for q in range(world))
            exact = bool(torch.equal(mine, ref) and torch.equal(ref, expected))
            ok = torch.tensor([int(exact)])
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            times = {}
            for name, fn in (("p2p_ring", ring_allreduce_p2p), ("all_reduce", dist.all_reduce)):
                fn(x0.clone())  # warm-up
                t = torch.tensor([_time_once(fn, x0) for _ in range(iters)], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a collective lasts as long as its slowest rank
                times[name] = statistics.median(t.tolist())
            rows.append({"bytes": count * 4, "exact": bool(ok.item()),
                         "p2p_ring_us": times["p2p_ring"] * 1e6, "all_reduce_us": times["all_reduce"] * 1e6})
        if rank == 0:
            Path(out_path).write_text(json.dumps({"world": world, "iters": iters, "rows": rows}))
    finally:
        dist.destroy_process_group()
# --8<-- [end:worker]


# --8<-- [start:run]
def run_lab(sizes=(1 << 10, 1 << 14, 1 << 18, 1 << 22), iters: int = 10, world: int = 2) -> dict:
    """Spawn `world` gloo processes running `worker`; return rank 0's measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_path = os.path.join(tmp, "store"), os.path.join(tmp, "out.json")
        start_workers(worker, (world, init_file, list(sizes), iters, out_path), world)
        return json.loads(Path(out_path).read_text())
# --8<-- [end:run]

"""Start a lab's gloo worker processes from a notebook or a test.

`fork` from a process that already runs threads (torch's intra-op pool, an earlier gloo group, pytest's
own) can deadlock a child on a lock some thread held at the fork: seen as a hung lab test. On Linux the
workers therefore come from a *forkserver*: a fresh single-threaded process that has imported torch and
the worker's module once and forks each worker from there (fast, and nothing is inherited mid-lock).
Elsewhere they are spawned. Worker functions must be importable (defined in a module, not a notebook).
"""
from __future__ import annotations

import multiprocessing
import sys

import torch.multiprocessing as mp


def start_workers(worker, args: tuple, nprocs: int, preload: tuple[str, ...] = ()) -> None:
    """Run `worker(rank, *args)` in `nprocs` processes and wait for all of them (an error in one raises).

    `preload` names modules the workers import lazily, to import them once in the forkserver instead of
    once per worker: DDP imports `torch._dynamo` when it is built (about 1.1 s of CPU a process, on an idle
    core of the book's 2-core machine)."""
    method = "spawn"
    if sys.platform == "linux":
        method = "forkserver"
        # takes effect when this process starts its forkserver (once); sys.path travels with the preload
        multiprocessing.get_context(method).set_forkserver_preload(
            ["torch", "torch.distributed", *preload, worker.__module__])
    mp.start_processes(worker, args=args, nprocs=nprocs, join=True, start_method=method)

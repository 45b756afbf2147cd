"""DDP's gradient buckets and the α-β prediction of their overlap with backward, shared by Ch2 pages,
tests and gpu_runs/ddp_bench.py.

Notation (docs/notation.md): N ranks, S bytes, α, β. A bucket is a list of parameters whose gradients
are copied into one flat buffer and all-reduced by one collective. The assignment rule below is the
one the C++ Reducer applies (torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size,
exposed as torch.distributed._compute_bucket_assignment_by_size); tests compare it with that function.
"""
from __future__ import annotations

import numpy as np

from snippets.common.alphabeta import ring_allreduce_time

MIB = 1024 * 1024


# --8<-- [start:assign]
def assign_buckets(nbytes, limits):
    """Greedy bucketing of tensors taken in the given order (one dtype and device).

    A tensor is never split. It joins the open bucket; when the bucket's bytes reach the
    current limit the bucket closes and the next limit applies (the last limit repeats).
    `limits` = [first_cap, cap] for DDP's default, [cap] when bucket_cap_mb is given.
    Returns a list of buckets, each a list of positions into `nbytes`.
    """
    buckets, current, size, k = [], [], 0, 0
    for i, b in enumerate(nbytes):
        current.append(i)
        size += int(b)
        if size >= limits[min(k, len(limits) - 1)]:
            buckets.append(current)
            current, size, k = [], 0, k + 1
    if current:
        buckets.append(current)
    return buckets
# --8<-- [end:assign]


def ddp_limits(bucket_cap_mb=None, first_bucket_bytes=MIB):
    """The limits DDP's Reducer uses when it rebuilds buckets: a small first bucket only by default."""
    if bucket_cap_mb is None:
        return [first_bucket_bytes, 25 * MIB]
    return [int(bucket_cap_mb * MIB)]


# --8<-- [start:pipeline]
def bucket_pipeline(ready, sizes, n, alpha, beta, t_backward):
    """Overlap of bucket all-reduces with backward, in the α-β model.

    ready[i]: time (from the start of backward) at which bucket i's last gradient is ready;
    sizes[i]: its bytes S_i. All-reduces run one at a time, in bucket order (one communication
    stream / one gloo queue): start_i = max(ready_i, end_{i-1}), end_i = start_i + T_ring(N, S_i).
    Returns per-bucket (start, end), the total communication time Σ T_ring and the exposed tail
    max(0, end_last − t_backward): the communication the backward did not hide.
    """
    ready = np.asarray(ready, float)
    cost = ring_allreduce_time(n, np.asarray(sizes, float), alpha, beta)
    start, end = np.zeros_like(ready), np.zeros_like(ready)
    t = 0.0
    for i in range(len(ready)):
        start[i] = max(ready[i], t)
        end[i] = t = start[i] + cost[i]
    return {"start": start, "end": end, "comm_total": float(cost.sum()),
            "launch_alpha": float(2 * (n - 1) * alpha * len(ready)),
            "exposed": max(0.0, float(end[-1]) - t_backward) if len(end) else 0.0}
# --8<-- [end:pipeline]


def bucket_ready_times(param_ready, buckets):
    """A bucket is ready when its last parameter's gradient is (max over its members)."""
    return [max(param_ready[i] for i in b) for b in buckets]

"""CommCounter: one collective call makes exactly one record, with nccl-tests' size S in bytes.

The collectives run for real on a one-process gloo group inside this test process. A counter that
wraps a function twice (e.g. both `torch.distributed` and `torch.distributed.distributed_c10d`,
where the deprecated `all_gather_into_tensor` calls `all_gather_single`) records two calls here.
The exact counts of a real 2-process run (FSDP2 + the calls DeepSpeed makes) are asserted in
tests/distributed/test_harness.py.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist

from gpu_runs.comm_counter import CommCounter

F32 = 4


@pytest.fixture(scope="module")
def world1():
    assert not dist.is_initialized(), "another test left a process group behind"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _deprecated(fn, *args):
    """Call a collective torch 2.13 deprecates, the way library code still does; its warning is expected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return fn(*args)


def _calls():
    """(label, how to call it once, op name CommCounter must record, bytes it must record)."""
    x = torch.arange(12, dtype=torch.float32)
    out = torch.empty(12)
    cases = [
        ("all_reduce", lambda: dist.all_reduce(x.clone()), "all_reduce", 12 * F32),
        ("broadcast", lambda: dist.broadcast(x.clone(), src=0), "broadcast", 12 * F32),
        ("reduce", lambda: dist.reduce(x.clone(), dst=0), "reduce", 12 * F32),
        # the deprecated names, as DeepSpeed 0.19.8 still calls them (torch 2.13 warns: FutureWarning)
        ("all_gather_into_tensor", lambda: _deprecated(dist.all_gather_into_tensor, out, x), "all_gather_into_tensor", 12 * F32),
        ("reduce_scatter_tensor", lambda: _deprecated(dist.reduce_scatter_tensor, out, x.clone()), "reduce_scatter_tensor", 12 * F32),
        ("all_gather (list)", lambda: dist.all_gather([torch.empty(12)], x), "all_gather", 12 * F32),
        ("all_to_all_single", lambda: dist.all_to_all_single(out, x), "all_to_all_single", 12 * F32),
        ("all_reduce (keyword)", lambda: dist.all_reduce(tensor=x.clone()), "all_reduce", 12 * F32),
    ]
    if hasattr(dist, "all_gather_single"):  # torch >= 2.13: what FSDP2 calls
        cases += [
            ("all_gather_single", lambda: dist.all_gather_single(out, x), "all_gather_single", 12 * F32),
            ("reduce_scatter_single", lambda: dist.reduce_scatter_single(out, x.clone()), "reduce_scatter_single", 12 * F32),
        ]
    return cases


@pytest.mark.parametrize("label,call,op,nbytes", _calls(), ids=[c[0] for c in _calls()])
def test_one_call_makes_one_record(world1, label, call, op, nbytes):
    with CommCounter() as cc:
        call()
    assert cc.calls == [(op, nbytes)], f"{label}: {cc.calls}"
    assert cc.summary() == {op: {"calls": 1, "bytes": nbytes}}
    assert cc.total_bytes() == nbytes


def test_counter_restores_the_functions_and_counts_nothing_outside(world1):
    before = {n: getattr(dist, n) for n in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")}
    import torch.distributed.distributed_c10d as c10d
    before_c10d = {n: getattr(c10d, n) for n in ("all_gather_single", "all_reduce")}
    with CommCounter() as cc:
        dist.all_reduce(torch.ones(3))
    dist.all_reduce(torch.ones(3))  # after the block: not counted
    assert cc.calls == [("all_reduce", 3 * F32)]
    assert {n: getattr(dist, n) for n in before} == before
    assert {n: getattr(c10d, n) for n in before_c10d} == before_c10d

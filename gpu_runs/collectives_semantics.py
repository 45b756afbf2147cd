"""What every torch.distributed collective does, rank by rank: record real inputs and outputs.

Each rank builds small integer tensors whose values name their owner (rank r's vector is
100·(r+1) + 0, 1, 2, …), calls one collective at a time, and keeps what it handed in and what it
got back. Rank 0 gathers the records of all ranks and writes them as the measurements. Nothing is
timed: the results are the per-rank semantics of broadcast, scatter, gather, all_gather(_single),
reduce, reduce_scatter(_single), all_reduce (SUM, and AVG where offered) and all_to_all(_single), plus
reduce_scatter followed by all_gather (the decomposition of all_reduce), on whichever backend
harness.init picks.

    torchrun --nproc_per_node=4 gpu_runs/collectives_semantics.py                  # CPU, gloo
    torchrun --nproc_per_node=8 gpu_runs/collectives_semantics.py                  # 8 GPUs, NCCL
    torchrun --nproc_per_node=2 gpu_runs/collectives_semantics.py --preset tiny --no-save
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

PROGRAM = "collectives_semantics"
PRESETS = {
    # block: elements per rank-block (a full vector has N·block elements); root: of the rooted ops
    "tiny": {"block": 1, "root": 1},
    "full": {"block": 2, "root": 0},
}
DTYPE = torch.int64  # integers: every sum is exact, every backend agrees bit for bit


def full_vector(rank: int, n: int, block: int, device) -> torch.Tensor:
    """Rank r's N·block-element vector: 100·(r+1) + 0, 1, …, N·block − 1."""
    return 100 * (rank + 1) + torch.arange(n * block, dtype=DTYPE, device=device)


def block_vector(rank: int, block: int, device) -> torch.Tensor:
    """Rank r's block-element vector for gather / all_gather: 100·(r+1) + 0, …, block − 1."""
    return 100 * (rank + 1) + torch.arange(block, dtype=DTYPE, device=device)


def _call(fn, *args, **kwargs):
    """Run one torch.distributed call; return the FutureWarning message it raised, if any."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    msgs = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    return msgs[0] if msgs else None


def _tensor_api(new: str, old: str):
    """torch ≥ 2.13 names the single-tensor variants *_single; older releases *_tensor/*_into_tensor."""
    return (new, getattr(dist, new)) if hasattr(dist, new) else (old, getattr(dist, old))


# --8<-- [start:run_all]
def run_all(rank: int, n: int, block: int, root: int, device) -> list[dict]:
    """Every collective once on this rank; returns [{collective, api, input, output, warning}]."""
    lst = lambda t: None if t is None else t.cpu().tolist()  # noqa: E731
    x = lambda: full_vector(rank, n, block, device)  # noqa: E731
    b = lambda: block_vector(rank, block, device)  # noqa: E731
    empty = lambda k: torch.full((k,), -1, dtype=DTYPE, device=device)  # noqa: E731
    recs = []

    def rec(collective, api, inp, out, warning=None, **extra):
        recs.append({"collective": collective, "api": api, "input": lst(inp), "output": lst(out),
                     "warning": warning, **extra})

    # broadcast: in place; every rank's buffer ends as root's
    buf = x()
    inp = buf.clone()
    w = _call(dist.broadcast, buf, src=root)
    rec("broadcast", "broadcast", inp, buf, w)

    # scatter: root hands out N blocks of its vector, rank r receives block r
    out = empty(block)
    src_list = list(x().chunk(n)) if rank == root else None
    w = _call(dist.scatter, out, src_list, src=root)
    rec("scatter", "scatter", x() if rank == root else None, out, w)

    # gather: root collects every rank's block
    mine = b()
    dst_list = [empty(block) for _ in range(n)] if rank == root else None
    w = _call(dist.gather, mine, dst_list, dst=root)
    rec("gather", "gather", mine, torch.cat(dst_list) if rank == root else None, w)

    # all_gather, list form and single-tensor form
    outs = [empty(block) for _ in range(n)]
    w = _call(dist.all_gather, outs, b())
    rec("all_gather", "all_gather", b(), torch.cat(outs), w)
    for name in ("all_gather_single", "all_gather_into_tensor"):
        if hasattr(dist, name):
            out = empty(n * block)
            w = _call(getattr(dist, name), out, b())
            rec("all_gather", name, b(), out, w)

    # reduce: in place; only root's buffer is defined afterwards (we keep the others' as scratch)
    buf = x()
    w = _call(dist.reduce, buf, dst=root)
    rec("reduce", "reduce", x(), buf if rank == root else None, w,
        scratch=None if rank == root else lst(buf))

    # reduce_scatter, list form and single-tensor form
    out = empty(block)
    w = _call(dist.reduce_scatter, out, list(x().chunk(n)))
    rec("reduce_scatter", "reduce_scatter", x(), out, w)
    for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
        if hasattr(dist, name):
            out = empty(block)
            w = _call(getattr(dist, name), out, x())
            rec("reduce_scatter", name, x(), out, w)

    # all_reduce: in place, SUM (the default op)
    buf = x()
    w = _call(dist.all_reduce, buf)
    rec("all_reduce", "all_reduce", x(), buf, w)

    # all_reduce with ReduceOp.AVG (float64): the mean, where the backend offers it
    buf, err, w = x().double(), None, None
    try:
        w = _call(dist.all_reduce, buf, op=dist.ReduceOp.AVG)
    except (RuntimeError, ValueError) as e:  # a backend without AVG refuses it on every rank
        err = f"{type(e).__name__}: {e}"[:300]
    rec("all_reduce_avg", "all_reduce(op=ReduceOp.AVG)", x(), None if err else buf, w, error=err)

    # all_to_all, list form and single-tensor form
    outs = [empty(block) for _ in range(n)]
    w = _call(dist.all_to_all, outs, list(x().chunk(n)))
    rec("all_to_all", "all_to_all", x(), torch.cat(outs), w)
    out = empty(n * block)
    w = _call(dist.all_to_all_single, out, x())
    rec("all_to_all", "all_to_all_single", x(), out, w)

    # the decomposition: reduce_scatter, then all_gather of the reduced block
    rs_name, rs = _tensor_api("reduce_scatter_single", "reduce_scatter_tensor")
    ag_name, ag = _tensor_api("all_gather_single", "all_gather_into_tensor")
    shard = empty(block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        rs(shard, x())
        full = empty(n * block)
        ag(full, shard)
    rec("rs_then_ag", f"{rs_name} → {ag_name}", x(), full, None, shard=lst(shard))
    return recs
# --8<-- [end:run_all]


def measure(env, cfg, args):
    n, root = env.world_size, cfg["root"] % env.world_size
    recs = run_all(env.rank, n, cfg["block"], root, env.device)
    everyone = [None] * n if env.is_main else None
    dist.gather_object(recs, everyone, dst=0)
    measurements = None
    if env.is_main:
        calls = []
        for i, first in enumerate(everyone[0]):
            per_rank = []
            for r in range(n):
                rec = everyone[r][i]
                assert (rec["collective"], rec["api"]) == (first["collective"], first["api"])
                per_rank.append({"rank": r, **{k: v for k, v in rec.items() if k not in ("collective", "api")}})
            calls.append({"collective": first["collective"], "api": first["api"], "ranks": per_rank})
            print(f"{first['api']:>45}: rank outputs {[p['output'] for p in per_rank]}", flush=True)
        measurements = {"world_size": n, "block": cfg["block"], "root": root, "dtype": "int64", "calls": calls}
    params = {**cfg, "dtype": "int64",
              "inputs": "full vector of rank r: 100·(r+1) + arange(N·block); block vector: 100·(r+1) + arange(block)"}
    return params, measurements


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2))

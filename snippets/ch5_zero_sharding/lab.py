"""Chapter 5 lab: worker functions the notebook docs/ch5-zero-sharding/lab.py spawns.

Workers run in separate processes (snippets.common.procs: a forkserver on Linux, spawn elsewhere), so they live in an importable
module. Each writes its per-rank measurements to <outdir>/rank<r>.json; the parent collects them.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from snippets.common.procs import start_workers

# fully_shard imports torch._dynamo when it wraps its parameters as DTensors (DTensor's constructor,
# torch/_compile.py): about 0.5 s of CPU a process (this module's fully_shard import has paid for
# most of what it needs). The forkserver imports it once instead
# (snippets.common.procs.start_workers).
PRELOAD = ("torch._dynamo",)

DIMS = (256, 256, 256, 256, 256)  # a 4-layer MLP; every size divisible by 2 and 4
STEPS = 3
LR = 1e-2


def make_model(dims=DIMS, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def batch(rank: int, step: int, dims=DIMS, rows: int = 8):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(rows, dims[0], generator=g), torch.randn(rows, dims[-1], generator=g)


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _init(rank: int, world: int, store: str):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


def _dump(outdir: str, rank: int, data: dict):
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(data))


# --8<-- [start:manual]
def manual_zero1_worker(rank: int, world: int, store: str, outdir: str):
    """ZeRO-1 by hand: bf16 params and grads replicated; fp32 master + Adam μ, ν sharded 1/N."""
    _init(rank, world, store)
    model = make_model().to(torch.bfloat16)
    params = list(model.parameters())
    flat = torch.cat([p.detach().float().reshape(-1) for p in params])  # fp32 view of all ψ params
    psi = flat.numel()
    shard = psi // world  # DIMS make ψ divisible by N
    master = flat[rank * shard:(rank + 1) * shard].clone().requires_grad_(True)  # my fp32 master shard
    opt = torch.optim.Adam([master], lr=LR)
    for step in range(STEPS):
        x, y = batch(rank, step)
        loss = ((model(x.bfloat16()) - y.bfloat16()).float() ** 2).mean()
        model.zero_grad()
        loss.backward()
        g = torch.cat([p.grad.float().reshape(-1) for p in params])
        mine = torch.empty(shard)
        dist.reduce_scatter_single(mine, g)  # my slice of the sum over ranks; the mean is our division
        master.grad = mine / world
        opt.step()
        full = torch.empty(psi)
        dist.all_gather_single(full, master.detach())  # everyone gets every updated shard
        offset = 0
        with torch.no_grad():
            for p in params:
                p.copy_(full[offset:offset + p.numel()].view_as(p).to(p.dtype))
                offset += p.numel()
    state = opt.state[master]
    _dump(outdir, rank, {
        "psi": psi,
        "params": nbytes(params), "grads": nbytes([p.grad for p in params]),
        "optimizer": nbytes([master, state["exp_avg"], state["exp_avg_sq"]]),
        "checksum": float(sum(p.detach().float().sum() for p in params)),
    })
    dist.destroy_process_group()
# --8<-- [end:manual]


# --8<-- [start:fsdp2]
def fsdp2_worker(rank: int, world: int, store: str, outdir: str):
    """The same model under FSDP2: fully_shard per Linear and at the root, fp32 sharded params."""
    _init(rank, world, store)
    model = make_model()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(rank, step)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    local = lambda t: t.to_local() if hasattr(t, "to_local") else t  # noqa: E731 - DTensor -> my shard
    params = [local(p) for p in model.parameters()]
    grads = [local(p.grad) for p in model.parameters()]
    states = [local(v) for s in opt.state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]
    _dump(outdir, rank, {"psi": sum(p.numel() for p in model.parameters()),
                         "params": nbytes(params), "grads": nbytes(grads), "optimizer": nbytes(states)})
    dist.destroy_process_group()
# --8<-- [end:fsdp2]


def reference_checksum(world: int = 2) -> float:
    """Plain (unsharded) Adam on the averaged gradient, in one process: what ZeRO-1 must reproduce."""
    model = make_model().to(torch.bfloat16)
    params = list(model.parameters())
    master = torch.cat([p.detach().float().reshape(-1) for p in params]).requires_grad_(True)
    opt = torch.optim.Adam([master], lr=LR)
    for step in range(STEPS):
        total = None
        for rank in range(world):
            x, y = batch(rank, step)
            loss = ((model(x.bfloat16()) - y.bfloat16()).float() ** 2).mean()
            model.zero_grad()
            loss.backward()
            g = torch.cat([p.grad.float().reshape(-1) for p in params])
            total = g if total is None else total + g
        master.grad = total / world
        opt.step()
        offset = 0
        with torch.no_grad():
            for p in params:
                p.copy_(master[offset:offset + p.numel()].view_as(p).to(p.dtype))
                offset += p.numel()
    return float(sum(p.detach().float().sum() for p in params))


def run(worker, world: int = 2) -> list[dict]:
    """Spawn `world` gloo processes running `worker`; return each rank's measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        start_workers(worker, (world, store, tmp), world, preload=PRELOAD)
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]

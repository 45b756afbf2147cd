"""Chapter 3 lab: Megatron's f and g by hand, a hand-built TP MLP, and DTensor's version of the same MLP.

The notebook docs/ch3-tensor-parallel/lab.py spawns the workers below in gloo processes
(snippets.common.procs: a forkserver on Linux, spawn elsewhere), so they live in an importable module. Each
rank writes its measurements to <outdir>/rank<r>.json; the parent collects them.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from snippets.common.procs import start_workers

# the workers import these lazily: DTensor, its TP styles and CommDebugMode, and torch._dynamo, which
# DTensor's constructor imports (torch/_compile.py): about 1.1 s of CPU a process (an idle core of the
# book's machine).
# The forkserver imports them once instead (snippets.common.procs.start_workers).
PRELOAD = ("torch._dynamo", "torch.distributed.tensor", "torch.distributed.tensor.debug",
           "torch.distributed.tensor.parallel")

H, B, S = 64, 2, 16  # hidden size, micro-batch, sequence length (4h = 256 divisible by 2 and 4)


# --8<-- [start:fg]
class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce (sum) of the gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all-reduce (sum) forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        y = x.contiguous().clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad
# --8<-- [end:fg]


# --8<-- [start:mlp]
class HandTPMLP(nn.Module):
    """Column-parallel fc1 (this rank's 4h/t output features) → GELU → row-parallel fc2 (the same
    4h/t input features); f before fc1, g after fc2, fc2's bias added once after g."""

    def __init__(self, full: nn.Module, rank: int, world: int):
        super().__init__()
        rows = slice(rank * 4 * H // world, (rank + 1) * 4 * H // world)
        self.w1 = nn.Parameter(full.fc1.weight.detach()[rows].clone())   # (4h/t, h)
        self.b1 = nn.Parameter(full.fc1.bias.detach()[rows].clone())
        self.w2 = nn.Parameter(full.fc2.weight.detach()[:, rows].clone())  # (h, 4h/t)
        self.b2 = nn.Parameter(full.fc2.bias.detach().clone())

    def forward(self, x):
        x = CopyToTP.apply(x)                               # f
        u = F.gelu(F.linear(x, self.w1, self.b1))           # column-parallel + GELU, no communication
        return ReduceFromTP.apply(F.linear(u, self.w2)) + self.b2   # row-parallel partial sums, g, bias once
# --8<-- [end:mlp]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, S, H, generator=g), torch.randn(B, S, H, generator=g)


def _init(rank: int, world: int, store: str):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


def _counted(fn):
    """Run fn() under CommDebugMode; return ({collective: calls}, result). It sees plain dist.all_reduce
    (the c10d op) as well as the collectives DTensor issues."""
    from torch.distributed.tensor.debug import CommDebugMode

    with CommDebugMode() as mode:
        out = fn()
    return {str(k).split(".")[-1]: v for k, v in mode.get_comm_counts().items()}, out


def _maxdiff(a, b) -> float:
    return float((a.detach() - b.detach()).abs().max())


# --8<-- [start:worker]
def tp_mlp_worker(rank: int, world: int, store: str, outdir: str):
    """The hand-built TP MLP and DTensor's, each against the unsharded MLP and against each other."""
    _init(rank, world, store)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    x, dy = data()
    rows = slice(rank * 4 * H // world, (rank + 1) * 4 * H // world)
    ref = MLP()
    xr = x.clone().requires_grad_(True)
    (ref(xr) * dy).sum().backward()

    hand = HandTPMLP(MLP(), rank, world)
    xh = x.clone().requires_grad_(True)
    fwd_h, yh = _counted(lambda: hand(xh))
    bwd_h, _ = _counted(lambda: (yh * dy).sum().backward())

    mesh = init_device_mesh("cpu", (world,))
    dt = parallelize_module(MLP(), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    xd = x.clone().requires_grad_(True)
    fwd_d, yd = _counted(lambda: dt(xd))
    bwd_d, _ = _counted(lambda: (yd * dy).sum().backward())
    local = lambda p: p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad  # noqa: E731

    _dump(outdir, rank, {
        "comm": {"hand": {"forward": fwd_h, "backward": bwd_h}, "dtensor": {"forward": fwd_d, "backward": bwd_d}},
        "hand_vs_ref": {"output": _maxdiff(yh, ref(x)), "input_grad": _maxdiff(xh.grad, xr.grad),
                        "fc1_weight_grad": _maxdiff(hand.w1.grad, ref.fc1.weight.grad[rows]),
                        "fc2_weight_grad": _maxdiff(hand.w2.grad, ref.fc2.weight.grad[:, rows]),
                        "fc2_bias_grad": _maxdiff(hand.b2.grad, ref.fc2.bias.grad)},
        "dtensor_vs_ref": {"output": _maxdiff(yd, ref(x)), "input_grad": _maxdiff(xd.grad, xr.grad)},
        "hand_vs_dtensor": {"output": _maxdiff(yh, yd), "input_grad": _maxdiff(xh.grad, xd.grad),
                            "fc1_weight_grad": _maxdiff(hand.w1.grad, local(dt.fc1.weight)),
                            "fc2_weight_grad": _maxdiff(hand.w2.grad, local(dt.fc2.weight))},
        "hand_equals_dtensor_bitwise": bool(torch.equal(yh, yd) and torch.equal(xh.grad, xd.grad)),
        "local_shapes": {"hand_w1": list(hand.w1.shape), "dtensor_fc1": list(dt.fc1.weight.to_local().shape)},
    })
    dist.destroy_process_group()
# --8<-- [end:worker]


def _dump(outdir: str, rank: int, data: dict):
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(data))


def run(worker, world: int = 2) -> list[dict]:
    """Spawn `world` gloo processes running `worker`; return each rank's measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        start_workers(worker, (world, store, tmp), world, preload=PRELOAD)
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]

"""Chapter 2 lab: DDP by hand. Worker functions the notebook docs/ch2-data-parallel/lab.py spawns.

Each worker trains two copies of the same model side by side on gloo processes: one wrapped in
torch's DistributedDataParallel, one reduced by our own gradient hooks into our own buckets
(`HandDDP`). It records the SHA-256 of the parameters after every step, so the parent can compare
them bit for bit. Workers write <outdir>/rank<r>.json; the parent collects them.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from snippets.common.ddp_buckets import assign_buckets, ddp_limits
from snippets.common.procs import start_workers

D, LAYERS, ROWS, STEPS, LR = 64, 4, 16, 4, 0.05
CAP_MB = 0.02  # 20,971 bytes: a bucket closes after one 64×64 weight and its bias (16.6 KB) plus the next


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(D, D)  # registered first, used last (as in Ch2-03)
        self.embed = nn.Linear(D, D)
        self.blocks = nn.ModuleList(nn.Linear(D, D) for _ in range(LAYERS))

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = torch.tanh(b(x))
        return self.head(x)


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(ROWS, D, generator=g), torch.randn(ROWS, D, generator=g)


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


# --8<-- [start:hand]
class HandDDP:
    """Data parallel by hand: per-parameter hooks fill flat buckets and launch async all_reduces.

    order="ddp": multiply each gradient by 1/N while copying it into the bucket, then all_reduce (sum),
                 as DDP's Reducer does (mark_variable_ready_dense: mul_out).
    order="sum_then_divide": copy, all_reduce, then divide the bucket by N.
    layout="ddp": step 0 uses one bucket in model.parameters() order; from step 1 the buckets are rebuilt
                  in the gradient-ready order observed in step 0 with DDP's limits (Ch2-03, Definition 2.3.2).
    layout="per_param": one bucket per parameter, in model.parameters() order.
    """

    def __init__(self, model, cap_mb, order="ddp", layout="ddp"):
        self.model, self.order, self.layout, self.cap_mb = model, order, layout, cap_mb
        self.params = list(model.parameters())
        self.n = dist.get_world_size()
        for p in self.params:  # the same start on every rank (DDP broadcasts rank 0's parameters)
            dist.broadcast(p.data, src=0)
        self.seen: list[int] = []  # gradient-ready order observed in the current step
        self.buckets = [list(range(len(self.params)))] if layout == "ddp" else [[i] for i in range(len(self.params))]
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self._ready(i))
        self.step_index = 0
        self._prepare()

    def _prepare(self):
        self.where = {i: (b, j) for b, idx in enumerate(self.buckets) for j, i in enumerate(idx)}
        self.flat = [torch.empty(sum(self.params[i].numel() for i in idx)) for idx in self.buckets]
        self.pending = [len(idx) for idx in self.buckets]
        self.handles, self.next_bucket, self.seen = [], 0, []

    def _ready(self, i):
        self.seen.append(i)
        b, j = self.where[i]
        idx = self.buckets[b]
        offset = sum(self.params[k].numel() for k in idx[:j])
        view = self.flat[b][offset:offset + self.params[i].numel()].view_as(self.params[i])
        if self.order == "ddp":
            torch.mul(self.params[i].grad, 1.0 / self.n, out=view)  # divide while copying, like mul_out
        else:
            view.copy_(self.params[i].grad)
        self.pending[b] -= 1
        while self.next_bucket < len(self.buckets) and self.pending[self.next_bucket] == 0:
            self.handles.append(dist.all_reduce(self.flat[self.next_bucket], async_op=True))  # bucket-index order
            self.next_bucket += 1

    def finish(self):
        """After backward: wait for every bucket, write the averaged gradients back, rebuild once after step 0."""
        for h in self.handles:
            h.wait()
        for b, idx in enumerate(self.buckets):
            if self.order == "sum_then_divide":
                self.flat[b].div_(self.n)
            offset = 0
            for i in idx:
                p = self.params[i]
                p.grad.copy_(self.flat[b][offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        if self.layout == "ddp" and self.step_index == 0:  # rebuild in the observed order, DDP's limits
            sizes = [self.params[i].numel() * self.params[i].element_size() for i in self.seen]
            self.buckets = [[self.seen[k] for k in b] for b in assign_buckets(sizes, ddp_limits(self.cap_mb))]
        self.step_index += 1
        self._prepare()
# --8<-- [end:hand]


def _init(rank: int, world: int, store: str):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


# --8<-- [start:worker]
VARIANTS = [("ddp", "ddp"), ("sum_then_divide", "ddp"), ("ddp", "per_param")]


def compare_worker(rank: int, world: int, store: str, outdir: str):
    """torch DDP and three hand-made variants, trained side by side on the same data; digests per step."""
    _init(rank, world, store)
    torch.manual_seed(100 + rank)  # different seeds: the broadcast must make the starts equal
    ddp = nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=CAP_MB)
    hands = []
    for order, layout in VARIANTS:
        torch.manual_seed(100 + rank)
        hands.append(HandDDP(Net(), CAP_MB, order, layout))
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in [ddp.module] + [h.model for h in hands]]
    out = {"ddp": [], **{f"{o}/{l}": [] for o, l in VARIANTS}, "ddp_buckets": [], "hand_buckets": [],
           "max_abs_diff": {f"{o}/{l}": [] for o, l in VARIANTS}}
    for step in range(STEPS):
        x, y = batch(rank, step)
        for opt in opts:
            opt.zero_grad()
        F.mse_loss(ddp(x), y).backward()
        for h in hands:
            F.mse_loss(h.model(x), y).backward()
            h.finish()
        for opt in opts:
            opt.step()
        out["ddp"].append(digest(ddp.module))
        for (o, l), h in zip(VARIANTS, hands):
            out[f"{o}/{l}"].append(digest(h.model))
            out["max_abs_diff"][f"{o}/{l}"].append(max(float((p - q).detach().abs().max()) for p, q in
                                                       zip(ddp.module.parameters(), h.model.parameters())))
    names = [k for k, _ in ddp.module.named_parameters()]
    out["hand_buckets"] = [[names[i] for i in b] for b in hands[0].buckets]
    out["param_names"] = names
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(out))
    # Free DDP while the process group is still registered. Otherwise its C++ Reducer can hold the last
    # reference at exit and destroy the gloo group while holding the GIL, which gloo's worker thread may
    # need (a hang seen with torch 2.13 when the forkserver had already imported torch._dynamo).
    del ddp, opts
    dist.barrier()
    dist.destroy_process_group()
# --8<-- [end:worker]


def run(worker, world: int = 3) -> list[dict]:
    """Spawn `world` gloo processes running `worker`; return each rank's measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        start_workers(worker, (world, store, tmp), world, preload=("torch._dynamo",))
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]

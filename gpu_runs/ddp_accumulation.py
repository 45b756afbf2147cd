"""Gradient accumulation with DistributedDataParallel: all-reduces, gradients, buffers, step time.

A small MLP (optionally with LayerNorm or BatchNorm1d after the hidden layers) is wrapped in DDP with
a bucket cap small enough that the Reducer uses several buckets. Each optimizer step runs M
micro-batches of b rows per rank, either with `no_sync()` on the first M−1 micro-batches or with a
gradient all-reduce on every micro-batch. The program records, on every rank:

  * per micro-batch: how many buckets were all-reduced and how many bytes (a counting comm hook that
    then does exactly what DDP's default does: divide by the world size, all_reduce, SUM);
  * per micro-batch: how many times DDP broadcast module buffers from rank 0 (BatchNorm running
    statistics), by wrapping the module's `_default_broadcast_coalesced`;
  * the accumulated gradient against a single-process reference on the whole global batch
    B = N·M·b, with and without dividing each micro-batch loss by M, and with no normalisation,
    LayerNorm and BatchNorm;
  * the running_mean of the BatchNorm layer on every rank before and after the next step's broadcast;
  * (timing preset) the median step time, max over ranks, for both modes and several M, and a
    median all_reduce time for a few sizes (to fit α and β with snippets/common/alphabeta.py).

    torchrun --nproc_per_node=2 gpu_runs/ddp_accumulation.py                 # CPU, gloo (timing)
    torchrun --nproc_per_node=4 gpu_runs/ddp_accumulation.py --no-timing     # CPU, counts only
    torchrun --nproc_per_node=8 gpu_runs/ddp_accumulation.py --preset gpu    # GPUs, NCCL
    torchrun --nproc_per_node=2 gpu_runs/ddp_accumulation.py --preset tiny --no-save
"""
from __future__ import annotations

import copy
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

PROGRAM = "ddp_accumulation"
PRESETS = {
    # d_in → hidden ×2 → classes; b rows per micro-batch per rank; M micro-batches; cap in MB for DDP
    "tiny": {"d_in": 16, "hidden": 64, "classes": 8, "b": 4, "M": 4, "cap_mb": 0.005, "steps": 3,
             "timing": {"Ms": [1, 2], "warmup": 1, "iters": 3, "sizes": [1024, 65536], "reps": 3}},
    "full": {"d_in": 64, "hidden": 256, "classes": 10, "b": 8, "M": 4, "cap_mb": 0.1, "steps": 3,
             "timing": {"Ms": [1, 2, 4, 8], "warmup": 5, "iters": 40,
                        "sizes": [1024, 16384, 65536, 262144, 1048576], "reps": 30}},
    "gpu": {"d_in": 1024, "hidden": 4096, "classes": 1000, "b": 32, "M": 4, "cap_mb": 25, "steps": 3,
            "timing": {"Ms": [1, 2, 4, 8], "warmup": 5, "iters": 50,
                       "sizes": [2**k for k in range(10, 29, 2)], "reps": 30}},
}
LR = 0.05


def make_model(p: dict, norm: str) -> nn.Module:
    def norm_layer():
        return {"none": nn.Identity, "layernorm": lambda: nn.LayerNorm(p["hidden"]),
                "batchnorm": lambda: nn.BatchNorm1d(p["hidden"])}[norm]()

    return nn.Sequential(nn.Linear(p["d_in"], p["hidden"]), norm_layer(), nn.ReLU(),
                         nn.Linear(p["hidden"], p["hidden"]), norm_layer(), nn.ReLU(),
                         nn.Linear(p["hidden"], p["classes"]))


def global_batch(p: dict, world: int, step: int, device):
    """The same global batch on every rank: x (N·M·b, d_in), labels; rank r, micro-batch k take rows
    [(k·N + r)·b, (k·N + r + 1)·b)."""
    g = torch.Generator().manual_seed(1000 + step)
    n = world * p["M"] * p["b"]
    x = torch.randn(n, p["d_in"], generator=g)
    y = torch.randint(0, p["classes"], (n,), generator=g)
    return x.to(device), y.to(device)


def micro(x, y, p, world, rank, k):
    lo = (k * world + rank) * p["b"]
    return x[lo:lo + p["b"]], y[lo:lo + p["b"]]


class Counter:
    """A DDP comm hook that counts buckets and bytes, then does what DDP's default does."""

    def __init__(self):
        self.calls: list[tuple[int, int]] = []  # (bucket index, bytes) since the last reset

    def hook(self, state, bucket):
        t = bucket.buffer()
        self.calls.append((bucket.index(), t.numel() * t.element_size()))
        t.div_(dist.get_world_size())
        return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])

    def take(self):
        out, self.calls = self.calls, []
        return out


def wrap(model: nn.Module, p: dict, env, counter: Counter | None):
    ddp = DDP(model, device_ids=[env.device.index] if env.device.type == "cuda" else None,
              bucket_cap_mb=p["cap_mb"])
    if counter is not None:
        ddp.register_comm_hook(None, counter.hook)
    ddp.broadcasts = 0
    orig = ddp._default_broadcast_coalesced

    def counting(*a, **kw):
        ddp.broadcasts += 1
        return orig(*a, **kw)

    ddp._default_broadcast_coalesced = counting
    return ddp


def accumulate(ddp, x, y, p, env, use_no_sync: bool, scale: bool, counter: Counter | None):
    """One accumulation cycle of M micro-batches; returns per-micro-batch (buckets, bytes, broadcasts)."""
    per_micro = []
    for k in range(p["M"]):
        xb, yb = micro(x, y, p, env.world_size, env.rank, k)
        before = ddp.broadcasts
        last = k == p["M"] - 1
        ctx = ddp.no_sync() if (use_no_sync and not last) else _null()
        with ctx:
            loss = F.cross_entropy(ddp(xb), yb)
            (loss / p["M"] if scale else loss).backward()
        calls = counter.take() if counter is not None else []
        per_micro.append({"allreduce_calls": len(calls), "bucket_indices": [c[0] for c in calls],
                          "bucket_bytes": [c[1] for c in calls],
                          "bytes": sum(c[1] for c in calls), "buffer_broadcasts": ddp.broadcasts - before})
    return per_micro


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def grads(model):
    return [q.grad.detach().clone() for q in model.parameters()]


def max_rel(a, b):
    num = max((u - v).abs().max().item() for u, v in zip(a, b))
    den = max(v.abs().max().item() for v in b)
    return num / den


def reference_grads(init: nn.Module, x, y):
    ref = copy.deepcopy(init)
    ref.zero_grad()
    F.cross_entropy(ref(x), y).backward()
    return grads(ref)


gather_obj = harness.gather


def count_runs(p, env):
    """Counts per micro-batch for several steps; gradient equality; BN buffers."""
    res = {"counts": {}, "equality": [], "bn": {}}
    torch.manual_seed(0)
    base = make_model(p, "none").to(env.device)
    for mode in ("no_sync", "sync_every"):
        counter = Counter()
        model = copy.deepcopy(base)
        ddp = wrap(model, p, env, counter)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        steps = []
        for step in range(p["steps"]):
            x, y = global_batch(p, env.world_size, step, env.device)
            opt.zero_grad(set_to_none=True)
            steps.append(accumulate(ddp, x, y, p, env, mode == "no_sync", True, counter))
            opt.step()
        res["counts"][mode] = steps
        res["param_bytes"] = sum(q.numel() * q.element_size() for q in model.parameters())
        res["bucket_sizes"] = str(ddp._get_ddp_logging_data().get("bucket_sizes"))

    # gradient equality: one accumulation cycle from the same initial weights, several settings
    x, y = global_batch(p, env.world_size, 99, env.device)
    for norm in ("none", "layernorm", "batchnorm"):
        torch.manual_seed(1)
        init = make_model(p, norm).to(env.device)
        ref = reference_grads(init, x, y)
        for mode, scale in (("no_sync", True), ("sync_every", True), ("no_sync", False)):
            if norm != "none" and mode == "sync_every":
                continue
            model = copy.deepcopy(init)
            ddp = wrap(model, p, env, None)
            accumulate(ddp, x, y, p, env, mode == "no_sync", scale, None)
            g = grads(model)
            flat = torch.cat([t.flatten() for t in g]).cpu()
            ranks = gather_obj(flat)
            same_across = all(torch.equal(ranks[0], r) for r in ranks)
            ratio = (torch.cat([t.flatten() for t in g]).norm() / torch.cat([t.flatten() for t in ref]).norm()).item()
            res["equality"].append({"norm": norm, "mode": mode, "loss_divided_by_M": scale,
                                    "max_rel_diff_vs_global": max_rel(g, ref), "norm_ratio": ratio,
                                    "ranks_bitwise_equal": same_across})
    # two accumulations compared with each other: no_sync vs sync_every, bitwise?
    torch.manual_seed(1)
    init = make_model(p, "none").to(env.device)
    outs = {}
    for mode in ("no_sync", "sync_every"):
        model = copy.deepcopy(init)
        accumulate(wrap(model, p, env, None), x, y, p, env, mode == "no_sync", True, None)
        outs[mode] = grads(model)
    res["no_sync_vs_sync_every_max_rel"] = max_rel(outs["no_sync"], outs["sync_every"])
    res["no_sync_vs_sync_every_bitwise"] = all(torch.equal(a, b) for a, b in zip(outs["no_sync"], outs["sync_every"]))

    # BatchNorm running statistics across ranks during and after a cycle
    torch.manual_seed(2)
    init = make_model(p, "batchnorm").to(env.device)
    model = copy.deepcopy(init)
    ddp = wrap(model, p, env, None)
    bn = model[1]
    per_cycle = []
    snaps = []
    for step in range(2):
        xs, ys = global_batch(p, env.world_size, 200 + step, env.device)
        per_cycle.append(accumulate(ddp, xs, ys, p, env, True, True, None))
        snaps.append(bn.running_mean.detach().cpu().clone())
        ddp.zero_grad()
    # the next forward (first micro-batch of a new cycle) broadcasts rank 0's buffers before computing
    with torch.no_grad():
        ddp.train()
        ddp.module.eval()  # forward without changing running stats; DDP's pre-forward still syncs
        before = ddp.broadcasts
        ddp(micro(xs, ys, p, env.world_size, env.rank, 0)[0])
        ddp.module.train()
    after_sync = bn.running_mean.detach().cpu().clone()
    all_end = gather_obj(snaps[-1])
    all_after = gather_obj(after_sync)
    # a single process on the global batch: one BN update with the global batch statistics
    ref = copy.deepcopy(init)
    for step in range(2):
        xs, ys = global_batch(p, env.world_size, 200 + step, env.device)
        F.cross_entropy(ref(xs), ys).backward()
    res["bn"] = {
        "per_cycle": per_cycle,
        "broadcasts_in_extra_forward_without_grad": ddp.broadcasts - before,
        "rank_spread_end_of_cycle": max((a - all_end[0]).abs().max().item() for a in all_end),
        "rank_spread_after_broadcast": max((a - all_after[0]).abs().max().item() for a in all_after),
        "rank0_vs_global_batch_running_mean": (snaps[-1] - ref[1].running_mean.cpu()).abs().max().item(),
        "running_mean_scale": ref[1].running_mean.abs().max().item(),
        "momentum": bn.momentum,
        "updates_per_cycle_per_rank": p["M"],
    }
    return res


def median_allreduce(sizes, reps, env):
    out = []
    for s in sizes:
        t = torch.ones(s // 4, device=env.device)
        for _ in range(3):
            dist.all_reduce(t)
        times = [harness.time_call(env, lambda: dist.all_reduce(t)) for _ in range(reps)]
        worst = gather_obj(statistics.median(times))
        out.append({"bytes": s, "median_s": max(worst)})
    return out


def timing_runs(p, env):
    tp = p["timing"]
    rows = []
    torch.manual_seed(0)
    base = make_model(p, "none").to(env.device)
    for M in tp["Ms"]:
        q = {**p, "M": M}
        for mode in ("no_sync", "sync_every"):
            model = copy.deepcopy(base)
            ddp = wrap(model, q, env, None)
            opt = torch.optim.SGD(ddp.parameters(), lr=LR)
            times = []
            for it in range(tp["warmup"] + tp["iters"]):
                x, y = global_batch(q, env.world_size, it, env.device)

                def step(x=x, y=y, q=q, ddp=ddp, opt=opt, mode=mode):
                    opt.zero_grad(set_to_none=True)
                    accumulate(ddp, x, y, q, env, mode == "no_sync", True, None)
                    opt.step()

                t = harness.time_call(env, step)
                if it >= tp["warmup"]:
                    times.append(t)
            med = max(gather_obj(statistics.median(times)))
            rows.append({"M": M, "mode": mode, "median_step_s": med})
    return {"steps": rows, "allreduce": median_allreduce(tp["sizes"], tp["reps"], env),
            "iters": tp["iters"], "reps": tp["reps"]}


def measure(env, p, args):
    torch.set_num_threads(1)
    meas = count_runs(p, env)
    meas["timing"] = None if args.no_timing else timing_runs(p, env)
    params = {**{k: v for k, v in p.items() if k != "timing"},
              "timing": None if args.no_timing else p["timing"], "lr": LR,
              "timing_method": "per step: " + harness.timing_note(env, "the step") + "; median; max over ranks"}
    return params, meas


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2,
                          timing_flag=True))

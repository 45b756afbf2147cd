"""Beyond synchronous DP: Hogwild!, post-local SGD (torch's PostLocalSGDOptimizer) and DiLoCo-style outer steps.

One convex problem with a known optimum: least squares, y = A·w_true + noise, the model is
torch.nn.Linear(d, 1, bias=False) and w_opt is the full-data least-squares solution. Each rank owns
a disjoint shard of the rows. For every method the program records the distance ‖w − w_opt‖ and the
loss gap over steps, and counts every torch.distributed.all_reduce call and its bytes
(gpu_runs/comm_counter.py):

  * "sync": DDP, gradients averaged every step (the baseline);
  * "local_H": DDP with torch's post_localSGD_hook (post_local_gradient_allreduce=False, so no
    gradient all-reduce) and PostLocalSGDOptimizer(PeriodicModelAverager(period=H)) — every rank
    steps on its own shard and the parameters are averaged every H steps;
  * "diloco_H": H local SGD steps, then one outer step: the averaged parameter change (one
    all_reduce) is treated as a gradient by an outer SGD with Nesterov momentum;
  * "hogwild_P" (rank 0 only): P processes forked from rank 0 update one model in shared memory
    (Module.share_memory()) without any lock, the same total number of updates for every P.

    torchrun --nproc_per_node=2 gpu_runs/async_sgd.py                # CPU, gloo
    torchrun --nproc_per_node=4 gpu_runs/async_sgd.py                # CPU, more ranks (counts)
    torchrun --nproc_per_node=8 gpu_runs/async_sgd.py --preset gpu   # GPUs, NCCL (Hogwild stays on CPU)
    torchrun --nproc_per_node=2 gpu_runs/async_sgd.py --preset tiny --no-save
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from gpu_runs.comm_counter import CommCounter  # noqa: E402

import torch.distributed.algorithms.model_averaging.averagers as averagers  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (  # noqa: E402
    PostLocalSGDState, post_localSGD_hook)
from torch.distributed.optim import PostLocalSGDOptimizer  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

PROGRAM = "async_sgd"
PRESETS = {
    # d features, rows per rank, b rows per step, steps, lr; Hs periods; hogwild: workers, total updates
    "tiny": {"d": 8, "rows": 256, "b": 8, "steps": 32, "lr": 0.05, "Hs": [1, 4], "every": 4,
             "outer_lr": 0.7, "outer_momentum": 0.9,
             "hogwild": {"workers": [1, 2], "updates": 400}},
    "full": {"d": 32, "rows": 2048, "b": 16, "steps": 256, "lr": 0.02, "Hs": [1, 4, 16, 64], "every": 8,
             "outer_lr": 0.7, "outer_momentum": 0.9,
             "hogwild": {"workers": [1, 2, 4], "updates": 8000}},
    "gpu": {"d": 256, "rows": 65536, "b": 256, "steps": 1024, "lr": 0.01, "Hs": [1, 4, 16, 64], "every": 16,
            "outer_lr": 0.7, "outer_momentum": 0.9,
            "hogwild": {"workers": [1, 2, 4, 8], "updates": 32000}},
}


def problem(p: dict, world: int):
    """The same data on every rank (seeded): A (world·rows, d), y; and the least-squares optimum."""
    g = torch.Generator().manual_seed(0)
    n = world * p["rows"]
    a = torch.randn(n, p["d"], generator=g, dtype=torch.float64)
    w_true = torch.randn(p["d"], generator=g, dtype=torch.float64)
    y = a @ w_true + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)
    w_opt = torch.linalg.lstsq(a, y.unsqueeze(1)).solution.squeeze(1)
    return a.float(), y.float(), w_opt.float()


def loss_of(w: torch.Tensor, a, y) -> float:
    return 0.5 * float(((a @ w - y) ** 2).mean())


def new_model(p):
    m = nn.Linear(p["d"], 1, bias=False)
    with torch.no_grad():
        m.weight.zero_()
    return m


def batch(p, a, y, rank: int, world: int, step: int):
    """Rank r draws b rows of its own shard (rows [r·rows, (r+1)·rows)), the same draw in every method."""
    g = torch.Generator().manual_seed(10_000 * step + rank)
    idx = rank * p["rows"] + torch.randint(0, p["rows"], (p["b"],), generator=g)
    return a[idx], y[idx]


def record(model, a, y, w_opt, step):
    w = model.weight.detach().reshape(-1).cpu()
    return {"step": step, "dist": float((w - w_opt).norm()), "loss_gap": loss_of(w, a, y) - loss_of(w_opt, a, y)}


def run_ddp(p, env, a, y, w_opt, period: int | None):
    """period None: synchronous DDP. Otherwise post-local SGD with torch's hook, optimizer and averager."""
    model = new_model(p).to(env.device)
    ddp = DDP(model, device_ids=[env.device.index] if env.device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=p["lr"])
    if period is None:  # torch's default hook, in Python, so that its all_reduce is counted like the others
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    else:
        state = PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=0,
                                  post_local_gradient_allreduce=False)
        ddp.register_comm_hook(state, post_localSGD_hook)
        # warmup_steps = period − 1: the averager averages after optimizer steps period, 2·period, …
        opt = PostLocalSGDOptimizer(optim=opt, averager=averagers.PeriodicModelAverager(
            period=period, warmup_steps=period - 1))
    cpu_a, cpu_y = a.cpu(), y.cpu()
    curve, local = [record(model, cpu_a, cpu_y, w_opt, 0)], []
    with CommCounter() as cc:
        for step in range(1, p["steps"] + 1):
            local_step(ddp, opt, p, a, y, env, step)
            track(model, local, curve, (cpu_a, cpu_y, w_opt), step, p["every"])
    ws = gather(torch.stack(local))  # (world, steps, d), outside the counted region
    spread = [max(float((w[t] - ws[0][t]).norm()) for w in ws) for t in range(p["steps"])]
    return curve, spread, cc.summary(), torch.stack(local)


gather = harness.gather


def local_step(net, opt, p, a, y, env, step: int) -> None:
    """One SGD step of this rank on its own rows (the same draw in every method)."""
    xb, yb = batch(p, a, y, env.rank, env.world_size, step)
    opt.zero_grad()
    (0.5 * ((net(xb.to(env.device)).squeeze(1) - yb.to(env.device)) ** 2).mean()).backward()
    opt.step()


def track(model, local: list, curve: list, problem_, step: int, every: int) -> None:
    """Keep this step's weights; every `every` steps also the distance and loss gap."""
    local.append(model.weight.detach().reshape(-1).cpu().clone())
    if step % every == 0:
        curve.append(record(model, *problem_, step))


def run_diloco(p, env, a, y, w_opt, period: int, outer_lr: float, outer_momentum: float):
    """DiLoCo-style: inner SGD for `period` steps, then an outer step on the averaged change (its
    'pseudo-gradient'); Nesterov momentum when outer_momentum > 0. Returns also every step's weights."""
    model = new_model(p).to(env.device)
    glob = [q.detach().clone() for q in model.parameters()]          # the shared (outer) parameters
    outer_params = [nn.Parameter(t.clone()) for t in glob]
    outer = torch.optim.SGD(outer_params, lr=outer_lr, momentum=outer_momentum, nesterov=outer_momentum > 0)
    inner = torch.optim.SGD(model.parameters(), lr=p["lr"])
    cpu_a, cpu_y = a.cpu(), y.cpu()
    curve, local = [record(model, cpu_a, cpu_y, w_opt, 0)], []
    with CommCounter() as cc:
        for step in range(1, p["steps"] + 1):
            local_step(model, inner, p, a, y, env, step)
            if step % period == 0:
                deltas = [op.detach() - q.detach() for op, q in zip(outer_params, model.parameters())]
                flat = torch.cat([d.reshape(-1) for d in deltas])
                dist.all_reduce(flat)
                flat /= env.world_size
                off = 0
                for op in outer_params:
                    op.grad = flat[off:off + op.numel()].view_as(op).clone()
                    off += op.numel()
                outer.step()
                with torch.no_grad():
                    for q, op in zip(model.parameters(), outer_params):
                        q.copy_(op)
            track(model, local, curve, (cpu_a, cpu_y, w_opt), step, p["every"])
    return curve, cc.summary(), torch.stack(local)


def _hogwild_worker(model, a, y, lr, updates, seed, b):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    for _ in range(updates):
        idx = torch.randint(0, len(y), (b,), generator=g)
        xb, yb = a[idx], y[idx]
        with torch.no_grad():
            w = model.weight
            grad = ((xb @ w.reshape(-1) - yb).unsqueeze(1) * xb).mean(0)
            w.add_(grad.reshape(1, -1), alpha=-lr)  # in place on shared memory, no lock


def run_hogwild(p, a, y, w_opt):
    h = p["hogwild"]
    ctx = mp.get_context("fork")
    rows = []
    for workers in h["workers"]:
        model = new_model(p)
        model.share_memory()
        procs = [ctx.Process(target=_hogwild_worker,
                             args=(model, a, y, p["lr"], h["updates"] // workers, 1000 + i, p["b"]))
                 for i in range(workers)]

        def run(procs=procs):
            for pr in procs:
                pr.start()
            for pr in procs:
                pr.join()

        wall = harness.time_call("cpu", run, barrier=False)  # host processes on a host clock
        assert all(pr.exitcode == 0 for pr in procs)
        w = model.weight.detach().reshape(-1)
        rows.append({"workers": workers, "updates_total": workers * (h["updates"] // workers),
                     "dist": float((w - w_opt).norm()), "loss_gap": loss_of(w, a, y) - loss_of(w_opt, a, y),
                     "wall_s": wall})
    return rows


def measure(env, p, args):
    torch.set_num_threads(1)
    a, y, w_opt = problem(p, env.world_size)
    a_dev, y_dev = a.to(env.device), y.to(env.device)
    meas = {"w_opt_loss": loss_of(w_opt, a, y), "w0_dist": float(w_opt.norm()), "methods": {}}
    curve, spread, comm, w_sync = run_ddp(p, env, a_dev, y_dev, w_opt, None)
    meas["methods"]["sync"] = {"curve": curve, "spread_max": max(spread), "comm": comm}
    for h in p["Hs"]:
        curve, spread, comm, w_loc = run_ddp(p, env, a_dev, y_dev, w_opt, h)
        avg_steps = [t for t in range(p["steps"]) if (t + 1) % h == 0]
        meas["methods"][f"local_{h}"] = {
            "period": h, "curve": curve, "comm": comm, "max_diff_vs_sync": float((w_loc - w_sync).abs().max()),
            "spread_after_averaging": max(spread[t] for t in avg_steps),
            "spread_max": max(spread)}
        curve, comm, w_avg = run_diloco(p, env, a_dev, y_dev, w_opt, h, 1.0, 0.0)
        meas["methods"][f"outer_plain_{h}"] = {"period": h, "curve": curve, "comm": comm,
                                               "max_diff_vs_local": float((w_avg - w_loc).abs().max())}
        curve, comm, _ = run_diloco(p, env, a_dev, y_dev, w_opt, h, p["outer_lr"], p["outer_momentum"])
        meas["methods"][f"diloco_{h}"] = {"period": h, "curve": curve, "comm": comm}
    meas["param_bytes"] = p["d"] * 4
    meas["hogwild"] = run_hogwild(p, a, y, w_opt) if env.is_main else None
    dist.barrier()
    return p, meas


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2))

"""A 3-D DeviceMesh ("dp", "pp", "tp"): torch.distributed.pipelining stages, DTensor TP inside each stage,
FSDP2 fully_shard over dp.

The pipeline axis of Ch7-01: L MLP blocks (Linear h→4h ColwiseParallel, GELU, Linear 4h→h RowwiseParallel,
as in gpu_runs/mesh_3d.py) cut into `pp` stages of L/pp blocks. Each rank builds only its stage
(a `PipelineStage` on the pp group), applies TP on mesh["tp"] to every block of it and, when d > 1,
`fully_shard` on mesh["dp"]; `Schedule1F1B` (or GPipe) runs m micro-batches of the rank's B/d rows.
Rank order [TP, PP, DP] (Llama 3 §3.3.2): r = r_tp + t·(r_pp + p·r_dp), as in the planner.

  * the loss (the last stage's, averaged over micro-batches and dp) and the final parameters are compared
    with the same model trained in one process on the whole batch;
  * collectives are counted for one step on every rank, by process group: pipeline point-to-point sends
    and receives (the P2POps the schedule posts through schedules._batch_p2p), DTensor's TP collectives
    (the functional collectives TP issues, counted by a TorchDispatchMode), FSDP2's all-gathers and reduce-scatters
    (gpu_runs/comm_counter); nothing is timed.

    torchrun --nproc_per_node=4 gpu_runs/mesh_pp.py                  # CPU, gloo: (pp, tp) = (2, 2), d = 1
    torchrun --nproc_per_node=8 gpu_runs/mesh_pp.py                  # CPU, gloo: (dp, pp, tp) = (2, 2, 2)
    torchrun --nproc_per_node=8 gpu_runs/mesh_pp.py --preset gpu     # 8 GPUs, NCCL: (2, 2, 2)
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from gpu_runs.comm_counter import CommCounter  # noqa: E402

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

PROGRAM = "mesh_pp"
PRESETS = {
    # L blocks of width h, global batch B rows in m micro-batches, steps of SGD (lr); pp, tp degrees
    "tiny": {"L": 4, "h": 16, "B": 16, "m": 4, "steps": 2, "lr": 0.05, "pp": 2, "tp": 2, "schedule": "1F1B"},
    "full": {"L": 4, "h": 32, "B": 32, "m": 4, "steps": 3, "lr": 0.05, "pp": 2, "tp": 2, "schedule": "1F1B"},
    "gpu": {"L": 8, "h": 1024, "B": 64, "m": 8, "steps": 3, "lr": 0.05, "pp": 2, "tp": 2, "schedule": "1F1B"},
}
SCHEDULES = {"1F1B": Schedule1F1B, "GPipe": ScheduleGPipe}
# FSDP2's collectives. Not isend/irecv: P2POp checks its op *is* dist.isend / dist.irecv
# (torch/distributed/distributed_c10d.py, class P2POp), so a wrapped isend makes the stage's P2POps invalid.
FSDP_OPS = ("all_gather_single", "reduce_scatter_single", "all_gather_into_tensor", "reduce_scatter_tensor",
            "all_reduce", "broadcast")


class Block(nn.Module):
    def __init__(self, h: int):
        super().__init__()
        self.up, self.act, self.down = nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


def build(L: int, h: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(h) for _ in range(L)])


# --8<-- [start:stage]
def build_stage(cfg, mesh, device):
    """This rank's pipeline stage: blocks [k·L/p, (k+1)·L/p) of the full model (same seed, so the same
    weights as the one-process reference), TP on mesh["tp"] per block, FSDP2 on mesh["dp"] when d > 1."""
    L, h, p = cfg["L"], cfg["h"], mesh["pp"].size()
    k = mesh["pp"].get_local_rank()
    full = build(L, h)
    stage = nn.Sequential(*list(full)[k * L // p:(k + 1) * L // p]).to(device)
    for blk in stage:
        parallelize_module(blk, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    if mesh["dp"].size() > 1:
        for blk in stage:
            fully_shard(blk, mesh=mesh["dp"], reshard_after_forward=True)
        fully_shard(stage, mesh=mesh["dp"], reshard_after_forward=True)
    # a stage's input and output are plain tensors (ColwiseParallel's input and RowwiseParallel's output are
    # Replicate, use_local_output=True), of shape [B/(d·m), h]: given here, no shape inference needed
    mb = cfg["B"] // (mesh["dp"].size() * cfg["m"])
    x_in = torch.zeros(mb, h, device=device, requires_grad=k > 0)   # a received activation needs its gradient
    y_out = torch.zeros(mb, h, device=device, requires_grad=True)
    pipe = PipelineStage(stage, k, p, device, input_args=(x_in,), output_args=(y_out,),
                         group=mesh["pp"].get_group())
    return stage, pipe
# --8<-- [end:stage]


class FuncolCounter(TorchDispatchMode):
    """Counts the functional collectives (namespace _c10d_functional: what DTensor TP issues) dispatched inside
    the block, with the bytes of their input tensor (nccl-tests' S for all_reduce). CommDebugMode would count
    the same ops, but its module tracker fails inside a pipeline stage's forward (torch 2.13,
    tensor/debug/_comm_mode.py:106, `self.parent_list[-1]` on an empty list), so this is the bare dispatch
    mode it is built on. FSDP2's c10d calls are not functional collectives: they are counted by CommCounter."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, dict[str, int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "_c10d_functional" and func.__name__.split(".")[0] not in ("wait_tensor", "_wrap_tensor_autograd"):
            name = func.__name__.split(".")[0]
            c = self.counts.setdefault(name, {"calls": 0, "bytes": 0})
            c["calls"] += 1
            c["bytes"] += args[0].numel() * args[0].element_size() if isinstance(args[0], torch.Tensor) else 0
        return func(*args, **(kwargs or {}))


class P2PCounter:
    """Counts the point-to-point operations of the pipeline schedule: every list of dist.P2POp the schedule
    posts goes through torch.distributed.pipelining.schedules._batch_p2p (schedules.py:623: homogeneous
    batches as single isend/irecv, mixed ones through batch_isend_irecv), so wrapping that one function sees
    each send and receive, with its tensor's bytes. Installed for one step, removed after."""

    def __init__(self):
        self.ops = {"isend": {"calls": 0, "bytes": 0}, "irecv": {"calls": 0, "bytes": 0}}

    def __enter__(self):
        import torch.distributed.pipelining.schedules as sch
        self._sch, self._orig = sch, sch._batch_p2p
        orig = sch._batch_p2p

        @functools.wraps(orig)
        def wrapper(p2p_ops, *a, **k):
            for op in p2p_ops:
                c = self.ops["isend" if op.op is dist.isend else "irecv"]
                c["calls"] += 1
                c["bytes"] += op.tensor.numel() * op.tensor.element_size()
            return orig(p2p_ops, *a, **k)

        sch._batch_p2p = wrapper
        return self

    def __exit__(self, *exc):
        self._sch._batch_p2p = self._orig
        return False


def options(parser):
    parser.add_argument("--pp", type=int, default=None, help="pipeline degree (default: the preset's)")
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (default: the preset's)")
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default=None, help="default: the preset's")


def measure(env, cfg, args):
    torch.set_num_threads(1) if env.device.type == "cpu" else None
    cfg.update({k: v for k, v in (("pp", args.pp), ("tp", args.tp), ("schedule", args.schedule)) if v is not None})
    p, t = cfg["pp"], cfg["tp"]
    if env.world_size % (p * t):
        raise harness.UsageError(f"world size {env.world_size} is not a multiple of pp·tp = {p * t}")
    d = env.world_size // (p * t)
    L, h, B, m, lr = cfg["L"], cfg["h"], cfg["B"], cfg["m"], cfg["lr"]
    if L % p or B % (d * m):
        raise harness.UsageError(f"need pp | L and d·m | B (L = {L}, pp = {p}, B = {B}, d = {d}, m = {m})")
    # --8<-- [start:mesh]
    mesh = init_device_mesh(env.device.type, (d, p, t), mesh_dim_names=("dp", "pp", "tp"))
    dp_rank, pp_rank = mesh["dp"].get_local_rank(), mesh["pp"].get_local_rank()
    # --8<-- [end:mesh]
    dev = env.device
    torch.manual_seed(1234)
    data = [(torch.randn(B, h), torch.randn(B, h)) for _ in range(cfg["steps"])]

    ref = build(L, h).to(dev)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)
    stage, pipe = build_stage(cfg, mesh, dev)
    opt = torch.optim.SGD(stage.parameters(), lr=lr)
    # --8<-- [start:schedule]
    schedule = SCHEDULES[cfg["schedule"]](pipe, n_microbatches=m, loss_fn=nn.functional.mse_loss)
    rows = slice(dp_rank * B // d, (dp_rank + 1) * B // d)          # this dp rank's B/d rows
    first, last = pp_rank == 0, pp_rank == p - 1
    # --8<-- [end:schedule]

    losses, ref_losses, counts = [], [], []
    for x, y in data:
        x, y = x.to(dev), y.to(dev)
        ref_loss = nn.functional.mse_loss(ref(x), y)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
        # --8<-- [start:step]
        mb_losses = []
        with FuncolCounter() as tp, CommCounter(FSDP_OPS) as fsdp, P2PCounter() as p2p:
            if first:
                schedule.step(x[rows], target=y[rows] if last else None, losses=mb_losses if last else None)
            elif last:
                schedule.step(target=y[rows], losses=mb_losses)
            else:
                schedule.step()
        opt.step()
        opt.zero_grad()
        # --8<-- [end:step]
        mine = torch.stack(mb_losses).mean() if last else torch.zeros((), device=dev)
        dist.all_reduce(mine)                                   # only the d last-stage ranks × t hold a loss
        losses.append(mine.item() / (d * t))
        counts.append({"tp": tp.counts, "fsdp": fsdp.summary(), "p2p": p2p.ops})

    # final parameters of this stage (full tensors) against the reference's blocks
    offset = pp_rank * L // p
    ref_named = dict(ref.named_parameters())
    max_param_diff = 0.0
    for name, prm in stage.named_parameters():
        i, rest = name.split(".", 1)
        q = ref_named[f"{int(i) + offset}.{rest}"]
        full = prm.full_tensor() if isinstance(prm, DTensor) else prm
        max_param_diff = max(max_param_diff, (full.detach() - q.detach()).abs().max().item())
    local_bytes = sum((prm.to_local() if isinstance(prm, DTensor) else prm).numel() * prm.element_size()
                      for prm in stage.parameters())
    record = {"rank": env.rank, "dp_rank": dp_rank, "pp_rank": pp_rank, "tp_rank": mesh["tp"].get_local_rank(),
              "stage_blocks": L // p, "local_param_bytes": local_bytes, "counts_step0": counts[0],
              "counts_same_every_step": all(c == counts[0] for c in counts)}
    every = harness.gather(record)
    pdiffs = harness.gather(max_param_diff)
    loss_diff = max(abs(a - b) for a, b in zip(losses, ref_losses))
    if env.is_main:
        print(f"(dp, pp, tp) = ({d}, {p}, {t}); loss {losses}\nref {ref_losses}\nmax |Δloss| {loss_diff:.2e}, "
              f"max |Δθ| {max(pdiffs):.2e}", flush=True)
        print(counts[0], flush=True)
    total_params = sum(q.numel() for q in ref.parameters())
    measurements = {"d": d, "p": p, "t": t, "m": m, "losses": losses, "ref_losses": ref_losses,
                    "max_abs_loss_diff": loss_diff, "max_abs_param_diff": max(pdiffs),
                    "total_params": total_params, "ranks": every, "mesh": mesh.mesh.tolist()}
    params = {**cfg, "dtype": "float32", "optimizer": "SGD",
              "counting": "P2POps posted through pipelining.schedules._batch_p2p (pipeline), _c10d_functional ops in a TorchDispatchMode "
                          "(TP), CommCounter torch.distributed calls (FSDP2)"}
    ok = loss_diff <= 1e-5 and max(pdiffs) <= 1e-5
    return params, measurements, "" if ok else "the pipelined mesh run differs from one process"


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, options=options, min_world_size=2))

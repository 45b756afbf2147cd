"""A 2-D DeviceMesh ("dp", "tp"): DTensor tensor parallelism on "tp", FSDP2 fully_shard on "dp".

The smallest version of a 3-D layout (Ch7-01, and the chapter lab): d·t = world ranks, TP innermost
(ranks 2k, 2k+1 form a TP group, as in the planner's layout), FSDP2 over the data-parallel axis on top
of the TP-sharded parameters (2-D parameters: Shard over dp of a Shard over tp). A stack of L MLP
blocks (Linear h→4h ColwiseParallel, GELU, Linear 4h→h RowwiseParallel) trains for a few SGD steps:

  * the loss and the final parameters are compared with the same model trained in one process on
    the whole batch (same seed; each dp rank gets its B/d rows);
  * collectives are counted per pass: DTensor's (functional collectives on the tp groups) with
    torch's CommDebugMode, FSDP2's (torch.distributed calls on the dp groups) with gpu_runs/comm_counter;
    CommDebugMode also sees FSDP2's c10d ops (_allgather_base_, _reduce_scatter_base_): they are
    recorded apart (commdebug_fsdp_*), so that tp_* holds TP's collectives only;
  * each rank's parameter bytes (its local shard) are recorded, for the planner's ψ/(t·d) check.

    torchrun --nproc_per_node=4 gpu_runs/mesh_3d.py                 # CPU, gloo, d = t = 2 (counts)
    torchrun --nproc_per_node=8 gpu_runs/mesh_3d.py --preset gpu    # 8 GPUs, NCCL, d = 4, t = 2
"""
from __future__ import annotations

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
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402

PROGRAM = "mesh_3d"
PRESETS = {
    # L blocks of width h, global batch B rows, steps of SGD with learning rate lr; t: the tp degree
    "tiny": {"L": 2, "h": 16, "B": 8, "steps": 3, "lr": 0.05, "t": 2},
    "full": {"L": 4, "h": 64, "B": 32, "steps": 5, "lr": 0.05, "t": 2},
    "gpu": {"L": 8, "h": 1024, "B": 64, "steps": 5, "lr": 0.05, "t": 2},
}


# --8<-- [start:model]
class Block(nn.Module):
    def __init__(self, h: int):
        super().__init__()
        self.up, self.act, self.down = nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


def build(L: int, h: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(h) for _ in range(L)])


def parallelize(model: nn.Sequential, mesh) -> nn.Sequential:
    """TP on mesh["tp"] (Megatron MLP: column then row), then FSDP2 on mesh["dp"] per block and the root."""
    for blk in model:
        parallelize_module(blk, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    for blk in model:
        fully_shard(blk, mesh=mesh["dp"], reshard_after_forward=True)
    fully_shard(model, mesh=mesh["dp"], reshard_after_forward=True)
    return model
# --8<-- [end:model]


def calls(summary: dict) -> dict:
    return {k: v["calls"] for k, v in summary.items()}


def measure(env, cfg, args):
    torch.set_num_threads(1) if env.device.type == "cpu" else None
    t = cfg["t"]
    if env.world_size % t:
        raise harness.UsageError(f"world size {env.world_size} is not a multiple of t = {t}")
    d = env.world_size // t
    if cfg["B"] % d:
        raise harness.UsageError(f"batch {cfg['B']} is not divisible by d = {d}")
    # --8<-- [start:mesh]
    mesh = init_device_mesh(env.device.type, (d, t), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()
    # --8<-- [end:mesh]
    dev = env.device
    L, h, B, lr = cfg["L"], cfg["h"], cfg["B"], cfg["lr"]
    torch.manual_seed(1234)
    data = [(torch.randn(B, h), torch.randn(B, h)) for _ in range(cfg["steps"])]

    ref = build(L, h).to(dev)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)
    model = parallelize(build(L, h).to(dev), mesh)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    rows = slice(dp_rank * B // d, (dp_rank + 1) * B // d)

    losses, ref_losses, counts = [], [], []
    for step, (x, y) in enumerate(data):
        x, y = x.to(dev), y.to(dev)
        # the reference: one process, the whole batch
        ref_loss = nn.functional.mse_loss(ref(x), y)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
        # --8<-- [start:step]
        with CommDebugMode() as tp_f, CommCounter() as dp_f:
            loss = nn.functional.mse_loss(model(x[rows]), y[rows])   # this dp rank's B/d rows
        with CommDebugMode() as tp_b, CommCounter() as dp_b:
            loss.backward()                                          # FSDP2 reduce-scatter averages over dp
        opt.step()
        opt.zero_grad()
        # --8<-- [end:step]
        glob = loss.detach().clone()
        dist.all_reduce(glob, group=mesh["dp"].get_group())
        losses.append(glob.item() / d)
        # CommDebugMode sees every collective dispatched, FSDP2's c10d ops (_allgather_base_,
        # _reduce_scatter_base_) too: keep TP's functional collectives apart from those
        tpf, tpb = ({k.__name__: v for k, v in c.get_comm_counts().items()} for c in (tp_f, tp_b))
        counts.append({"tp_forward": {k: v for k, v in tpf.items() if not k.startswith("_")},
                       "tp_backward": {k: v for k, v in tpb.items() if not k.startswith("_")},
                       "commdebug_fsdp_forward": {k: v for k, v in tpf.items() if k.startswith("_")},
                       "commdebug_fsdp_backward": {k: v for k, v in tpb.items() if k.startswith("_")},
                       "dp_forward": dp_f.summary(), "dp_backward": dp_b.summary()})

    # final parameters: full tensors (all-gather over both axes) against the reference
    max_param_diff = 0.0
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        full = p.full_tensor() if isinstance(p, DTensor) else p
        max_param_diff = max(max_param_diff, (full.detach() - q.detach()).abs().max().item())
    local_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    placements = {n: [str(pl) for pl in p.placements] for n, p in model.named_parameters()}
    total_params = sum(p.numel() for p in ref.parameters())

    record = {"rank": env.rank, "dp_rank": dp_rank, "tp_rank": mesh["tp"].get_local_rank(),
              "local_param_bytes": local_bytes, "counts_step0": counts[0],
              "counts_same_every_step": all(c == counts[0] for c in counts)}
    every = harness.gather(record)
    diffs = harness.gather(max(abs(a - b) for a, b in zip(losses, ref_losses)))
    pdiffs = harness.gather(max_param_diff)
    if env.is_main:
        print(f"d = {d}, t = {t}; loss {losses}\nref {ref_losses}\nmax |Δloss| {max(diffs):.2e}, "
              f"max |Δθ| {max(pdiffs):.2e}", flush=True)
        print(counts[0], flush=True)
    measurements = {"d": d, "t": t, "losses": losses, "ref_losses": ref_losses,
                    "max_abs_loss_diff": max(diffs), "max_abs_param_diff": max(pdiffs),
                    "total_params": total_params, "param_bytes_fp32": total_params * 4,
                    "placements": placements, "ranks": every,
                    "mesh": mesh.mesh.tolist()}
    params = {**cfg, "dtype": "float32", "optimizer": "SGD",
              "counting": "CommDebugMode (DTensor functional collectives) + CommCounter (torch.distributed calls)"}
    ok = max(diffs) <= 1e-5 and max(pdiffs) <= 1e-5
    return params, measurements, "" if ok else "the 2-D mesh run differs from one process"


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=4))

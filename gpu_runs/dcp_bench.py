"""Distributed Checkpoint (DCP): FSDP2 shards saved by N ranks, loaded elsewhere; async save; exact resume.

On 2 ranks (CPU + gloo, or GPUs + NCCL):
  1. an FSDP2 model (fully_shard per block) trains one Adam step; dcp.save writes the sharded model and
     optimizer state (get_model_state_dict / get_optimizer_state_dict). Files and bytes are recorded.
  2. one separate process (no process group) loads that checkpoint into a plain nn.Module
     (dcp.load(..., no_dist=True)); the parameters are compared bit for bit with the gathered FSDP2 ones.
  3. the same checkpoint is loaded into a tensor-parallel layout (DTensor ColwiseParallel/RowwiseParallel
     on a 1-D mesh): DCP reshards Shard(0)-over-FSDP into Shard(0)/Shard(1)-over-TP; compared bit for bit.
  4. dcp.async_save: seconds the caller is blocked vs seconds until the write completes, vs dcp.save.
  5. exact resume: a run with dropout, Adam, a LambdaLR schedule and a shuffled data order is stopped at
     step k, saved with model + optimizer + scheduler + RNG states + data position, resumed, and compared
     bit for bit with the uninterrupted run; then each part is left out in turn.

    torchrun --nproc_per_node=2 gpu_runs/dcp_bench.py                # CPU, gloo
    torchrun --nproc_per_node=2 gpu_runs/dcp_bench.py --preset gpu   # 2 GPUs, NCCL
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

from torch.distributed.checkpoint.state_dict import (  # noqa: E402
    get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402

PROGRAM = "dcp_bench"
PRESETS = {
    # L blocks of width h; async: width of the model timed for save/async_save; resume: steps, stop step k
    "tiny": {"L": 2, "h": 16, "async_h": 64, "async_reps": 2, "steps": 6, "k": 3, "rows": 8},
    "full": {"L": 2, "h": 64, "async_h": 512, "async_reps": 5, "steps": 8, "k": 4, "rows": 16},
    "gpu": {"L": 4, "h": 1024, "async_h": 4096, "async_reps": 5, "steps": 8, "k": 4, "rows": 64},
}
PARTS = ("model", "optim", "sched", "rng", "data")


class Block(nn.Module):
    def __init__(self, h: int, p_drop: float = 0.0):
        super().__init__()
        self.up, self.act, self.drop, self.down = nn.Linear(h, 4 * h), nn.GELU(), nn.Dropout(p_drop), nn.Linear(4 * h, h)

    def forward(self, x):
        return self.down(self.drop(self.act(self.up(x))))


def build(L: int, h: int, seed: int = 0, p_drop: float = 0.0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(h, p_drop) for _ in range(L)])


def fsdp(model, mesh):
    for b in model:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def dir_bytes(path: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(Path(path).iterdir()) if p.is_file()}


# --------------------------------------------------------------------------- 1-3: save, reload elsewhere

# --8<-- [start:save]
def save_fsdp(cfg, mesh, dev, path):
    model = fsdp(build(cfg["L"], cfg["h"]).to(dev), mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(5)
    model(torch.randn(4, cfg["h"], device=dev)).square().mean().backward()
    opt.step()
    state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    dcp.save(state, checkpoint_id=path)
    full = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu().clone()
            for k, v in get_model_state_dict(model).items()}
    return full, {k: str(v.placements) for k, v in state["model"].items()}


def load_single(path, L, h):
    """In a process with no process group: the whole model from the sharded files."""
    model = build(L, h, seed=123)                           # different init: the load must overwrite it
    sd = {"model": model.state_dict()}
    dcp.load(sd, checkpoint_id=path, no_dist=True)
    return sd["model"]


def load_tp(cfg, mesh, dev, path):
    """Into a tensor-parallel layout: the same files resharded onto Colwise/Rowwise DTensors."""
    model = build(cfg["L"], cfg["h"], seed=123).to(dev)
    for b in model:
        parallelize_module(b, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    sd = {"model": get_model_state_dict(model)}
    dcp.load(sd, checkpoint_id=path)
    set_model_state_dict(model, sd["model"])
    full = {k: v.full_tensor().detach().cpu() for k, v in get_model_state_dict(model).items()}
    return full, {k: str(v.placements) for k, v in sd["model"].items()}
# --8<-- [end:save]


# --------------------------------------------------------------------------- 4: async_save

def time_saves(cfg, mesh, dev, root: Path):
    model = fsdp(build(2, cfg["async_h"]).to(dev), mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, cfg["async_h"], device=dev)).sum().backward()
    opt.step()
    state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    out = {"sync_s": [], "blocked_s": [], "total_s": []}
    # the caller's view: how long the host is blocked, on the host clock (saving is host work: the
    # device-to-host copies of a GPU state are waited for inside dcp.save / async_save's staging)
    host = harness.Clock("cpu")
    for i in range(cfg["async_reps"]):
        host.start(barrier=True)
        dcp.save(state, checkpoint_id=root / f"sync{i}")
        dist.barrier()
        out["sync_s"].append(host.since_start(host.mark()))
        # --8<-- [start:async]
        host.start(barrier=True)
        fut = dcp.async_save(state, checkpoint_id=root / f"async{i}")
        blocked = host.since_start(host.mark())        # training could resume here
        fut.result()                                   # the files are complete here
        total = host.since_start(host.mark())
        # --8<-- [end:async]
        dist.barrier()
        out["blocked_s"].append(blocked)
        out["total_s"].append(total)
    nbytes = sum(sum(dir_bytes(root / "sync0").values()) for _ in [0])
    return {**{k + "_median": statistics.median(v) for k, v in out.items()}, **out, "checkpoint_bytes": nbytes}


# --------------------------------------------------------------------------- 5: exact resume

# --8<-- [start:resume]
class Run:
    """Everything a training step depends on: model, Adam, LR schedule, dropout RNG, data order and position."""

    def __init__(self, cfg, mesh, dev):
        self.cfg, self.dev, self.rank = cfg, dev, dist.get_rank()
        self.model = fsdp(build(cfg["L"], cfg["h"], p_drop=0.2).to(dev), mesh)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: 1.0 / (1 + s))
        g = torch.Generator().manual_seed(99)                  # the dataset: fixed rows
        self.n = 96                                            # not a multiple of k·batch: the position matters
        self.X = torch.randn(self.n, cfg["h"], generator=g)
        self.Y = torch.randn(self.n, cfg["h"], generator=g)
        self.order = torch.randperm(self.n, generator=torch.Generator().manual_seed(1))   # the shuffled order
        self.pos = 0                                           # data-loader position (batches consumed)
        torch.manual_seed(1000 + self.rank)                    # dropout differs per rank, as in real DP

    def step(self) -> float:
        r = self.cfg["rows"]
        start = self.pos * dist.get_world_size() * r + self.rank * r          # this rank's rows of the global batch
        idx = self.order[(torch.arange(r) + start) % self.n]
        self.pos += 1
        loss = nn.functional.mse_loss(self.model(self.X[idx].to(self.dev)), self.Y[idx].to(self.dev))
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        self.sched.step()
        glob = loss.detach().clone()
        dist.all_reduce(glob)
        return glob.item()

    def state(self, parts=PARTS) -> dict:
        s = {"model": get_model_state_dict(self.model), "optim": get_optimizer_state_dict(self.model, self.opt),
             "sched": self.sched.state_dict(), "data": {"pos": self.pos},
             "rng": {f"rank{self.rank}": self.rng()}}             # per-rank key: each rank keeps its own
        return {k: v for k, v in s.items() if k in parts}

    def load(self, path, parts=PARTS) -> None:
        s = self.state(parts)
        dcp.load(s, checkpoint_id=path)
        if "model" in s:
            set_model_state_dict(self.model, s["model"])
        if "optim" in s:
            set_optimizer_state_dict(self.model, self.opt, s["optim"])
        if "sched" in s:
            self.sched.load_state_dict(s["sched"])
        if "data" in s:
            self.pos = s["data"]["pos"]
        if "rng" in s:
            rng = s["rng"][f"rank{self.rank}"]
            torch.set_rng_state(rng["cpu"])
            if "cuda" in rng:                              # dropout on a GPU draws from the CUDA generator
                torch.cuda.set_rng_state(rng["cuda"], self.dev)

    def rng(self) -> dict:
        out = {"cpu": torch.get_rng_state()}
        if torch.device(self.dev).type == "cuda":
            out["cuda"] = torch.cuda.get_rng_state(self.dev)
        return out
# --8<-- [end:resume]


def exact_resume(cfg, mesh, dev, root: Path) -> dict:
    ref = Run(cfg, mesh, dev)
    full = [ref.step() for _ in range(cfg["steps"])]
    first = Run(cfg, mesh, dev)
    head = [first.step() for _ in range(cfg["k"])]
    dcp.save(first.state(), checkpoint_id=root / "resume")
    out = {"uninterrupted": full, "before_stop": head, "resumed": {}}
    for left_out in (None, *PARTS):
        parts = tuple(p for p in PARTS if p != left_out)
        run = Run(cfg, mesh, dev)
        torch.manual_seed(4242 + dist.get_rank())          # a restarted process's RNG is not the saved one
        run.load(root / "resume", parts)
        tail = [run.step() for _ in range(cfg["steps"] - cfg["k"])]
        out["resumed"]["all" if left_out is None else f"without_{left_out}"] = head + tail
    return out


def measure(env, cfg, args):
    torch.set_num_threads(1) if env.device.type == "cpu" else None
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    tmp = [tempfile.mkdtemp(prefix="dcp_bench_") if env.is_main else None]
    dist.broadcast_object_list(tmp)
    root = Path(tmp[0])
    try:
        full, fsdp_placements = save_fsdp(cfg, mesh, env.device, root / "fsdp")
        dist.barrier()
        files = dir_bytes(root / "fsdp")
        single_equal = None
        if env.is_main:   # a separate Python process with no process group loads the whole model
            dst = root / "single.pt"
            subprocess.run([sys.executable, __file__, "--single-load", str(root / "fsdp"), str(cfg["L"]),
                            str(cfg["h"]), str(dst)], check=True, env={**os.environ, "RANK": "", "WORLD_SIZE": ""})
            single = torch.load(dst)
            single_equal = {k: bool(torch.equal(single[k], full[k])) for k in full}
        tp_full, tp_placements = load_tp(cfg, mesh, env.device, root / "fsdp")
        tp_equal = {k: bool(torch.equal(tp_full[k], full[k])) for k in full}
        timing = None if args.no_timing else time_saves(cfg, mesh, env.device, root)
        resume = exact_resume(cfg, mesh, env.device, root)
    finally:
        dist.barrier()
        if env.is_main:
            shutil.rmtree(root, ignore_errors=True)
    n_params = sum(v.numel() for v in full.values())
    measurements = {"files": files, "model_params": n_params, "fsdp_placements": fsdp_placements,
                    "tp_placements": tp_placements, "single_process_bitwise_equal": single_equal,
                    "tp_bitwise_equal": tp_equal, "timing": timing, "resume": resume}
    if env.is_main:
        print(json.dumps({k: v for k, v in measurements.items() if k != "resume"}, indent=1)[:3000], flush=True)
        for k, v in resume["resumed"].items():
            print(f"{k:>16}: bitwise {v == resume['uninterrupted']}  {v}", flush=True)
    params = {**cfg, "dtype": "float32", "optimizer": "Adam", "parts": list(PARTS),
              "timing_method": "host perf_counter around dcp.save / dcp.async_save (+ future.result()), barriers, median"}
    ok = (not env.is_main or all(single_equal.values())) and all(tp_equal.values()) \
        and resume["resumed"]["all"] == resume["uninterrupted"]
    return params, measurements, ok


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--single-load":   # the 1-process loader
        path, L, h, dst = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        torch.save(load_single(path, L, h), dst)
        return 0
    return harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, options=options, argv=argv,
                        allowed_world_sizes={2})


def options(parser) -> None:
    parser.add_argument("--no-timing", action="store_true", help="skip the save/async_save timing")


if __name__ == "__main__":
    sys.exit(main())

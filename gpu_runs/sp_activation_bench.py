"""Tensor parallelism with and without sequence parallelism (DTensor): activation bytes and collectives per rank.

The GPT layer of snippets/common/gpt_block.py (bf16, dropout p) is parallelised over all t ranks with
torch.distributed.tensor.parallel.parallelize_module in two ways:
  tp     ColwiseParallel on qkv and fc1, RowwiseParallel on proj and fc2 (Megatron TP, Shoeybi 2019);
         LayerNorms, dropouts and residuals run replicated on every rank;
  tp_sp  the same linears with input_layouts=Shard(0) (column) and output_layouts=Shard(0) (row), and
         SequenceParallel on ln1, ln2, proj_drop, mlp_drop: those regions run on s/t tokens per rank,
         the layer input and output are sharded along the sequence (Korthikanti 2022 §4.2.2).
Per rank it records
  * the bytes autograd saves in forward (snippets/common/saved_tensors.SavedTensorCounter: unique
    storages, DTensors by their local shard, parameters excluded); on CUDA also
    torch.cuda.memory_allocated() after forward minus before;
  * the collectives of forward and of backward: torch.distributed.tensor.debug.CommDebugMode counts,
    and the input bytes of every functional collective (a dispatch mode in this file);
  * with dropout off, the largest difference of the layer output from the same layer on one device;
  * (2 processes) the median forward+backward time.

    torchrun --nproc_per_node=2 gpu_runs/sp_activation_bench.py                   # CPU, gloo
    torchrun --nproc_per_node=4 gpu_runs/sp_activation_bench.py --no-timing       # counts only
    torchrun --nproc_per_node=1 gpu_runs/sp_activation_bench.py --preset gpu      # one GPU (t = 1)
    torchrun --nproc_per_node=2 gpu_runs/sp_activation_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import statistics
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from snippets.common.gpt_block import causal_bias, make_block  # noqa: E402
from snippets.common.saved_tensors import SavedTensorCounter  # noqa: E402

PROGRAM = "sp_activation_bench"
PRESETS = {
    "tiny": {"s": 16, "b": 2, "h": 32, "a": 4, "iters": 2},
    "full": {"s": 128, "b": 2, "h": 128, "a": 8, "iters": 10},
    "gpu": {"s": 2048, "b": 1, "h": 4096, "a": 32, "iters": 10},
}
P_DROP = 0.1


class CollectiveBytes(TorchDispatchMode):
    """Every functional collective DTensor issues: op name and input bytes (the op's own size)."""

    def __init__(self):
        super().__init__()
        self.calls = defaultdict(lambda: {"calls": 0, "input_bytes": 0})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = getattr(func, "namespace", "")
        if ns in ("_c10d_functional", "c10d_functional") and isinstance(args[0], torch.Tensor):
            name = func.__name__.split(".")[0]
            if name != "wait_tensor" and not name.startswith("_wrap"):
                self.calls[name]["calls"] += 1
                self.calls[name]["input_bytes"] += args[0].numel() * args[0].element_size()
        return func(*args, **(kwargs or {}))


# --8<-- [start:plans]
def plans(variant: str):
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if variant == "tp":
        return {"qkv": ColwiseParallel(), "proj": RowwiseParallel(), "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    return {"ln1": SequenceParallel(sequence_dim=0), "qkv": ColwiseParallel(input_layouts=Shard(0)),
            "proj": RowwiseParallel(output_layouts=Shard(0)), "proj_drop": SequenceParallel(sequence_dim=0),
            "ln2": SequenceParallel(sequence_dim=0), "fc1": ColwiseParallel(input_layouts=Shard(0)),
            "fc2": RowwiseParallel(output_layouts=Shard(0)), "mlp_drop": SequenceParallel(sequence_dim=0)}
# --8<-- [end:plans]


def build(cfg, env, mesh, variant: str, p_drop: float):
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import parallelize_module

    blk = make_block(cfg["h"], cfg["a"], device=env.device, p_drop=p_drop, seed=0)
    parallelize_module(blk, mesh, plans(variant))
    g = torch.Generator(device="cpu").manual_seed(1)
    x_full = torch.randn(cfg["s"], cfg["b"], cfg["h"], generator=g).to(env.device, torch.bfloat16)
    if variant == "tp":
        x = x_full.clone().requires_grad_()
        inp = x
    else:
        x = x_full.chunk(env.world_size, dim=0)[env.rank].clone().requires_grad_()
        inp = DTensor.from_local(x, mesh, [Shard(0)])
    return blk, x_full, x, inp


def full_output(y, variant):
    return y if variant == "tp" else y.full_tensor()


def measure(cfg, env, mesh, variant: str):
    from torch.distributed.tensor.debug import CommDebugMode

    causal_bias(cfg["s"], torch.bfloat16, env.device)
    blk, _, x, inp = build(cfg, env, mesh, variant, P_DROP)
    torch.manual_seed(5)
    with harness.PeakMemory(env) as mem, CommDebugMode() as cm_f, CollectiveBytes() as cb_f, \
            SavedTensorCounter(blk) as counter:
        y = blk(inp)
    cuda_after = None if mem.end is None else mem.end - mem.base
    local_y = y if variant == "tp" else y.to_local()
    with CommDebugMode() as cm_b, CollectiveBytes() as cb_b:
        local_y.float().sum().backward()
    entries = [{"bytes": e["bytes"], "dtype": e["dtype"], "shape": list(e["shape"])} for e in counter.entries.values()]
    return {"saved_bytes": counter.total_bytes, "saved_entries": entries, "cuda_allocated_after_forward": cuda_after,
            "cuda_peak_forward": mem.peak_above_base,
            "comm_counts_forward": {str(k).split(".")[-1]: v for k, v in cm_f.get_comm_counts().items()},
            "comm_counts_backward": {str(k).split(".")[-1]: v for k, v in cm_b.get_comm_counts().items()},
            "collective_bytes_forward": dict(cb_f.calls), "collective_bytes_backward": dict(cb_b.calls)}


def check_output(cfg, env, mesh, variant: str) -> float:
    """Dropout off: the parallel layer's output against the same layer on this device alone."""
    blk, x_full, _, inp = build(cfg, env, mesh, variant, 0.0)
    ref = make_block(cfg["h"], cfg["a"], device=env.device, p_drop=0.0, seed=0)
    with torch.no_grad():
        want = ref(x_full).float()
        got = full_output(blk(inp), variant).float()
    return float((got - want).abs().max())


def timing(cfg, env, mesh, variant: str) -> float:
    blk, _, x, inp = build(cfg, env, mesh, variant, P_DROP)

    def fwd_bwd():
        y = blk(inp)
        (y if variant == "tp" else y.to_local()).float().sum().backward()

    times = harness.max_over_ranks(env, [harness.time_call(env, fwd_bwd) for _ in range(cfg["iters"] + 1)])
    return statistics.median(times[1:]) * 1e3  # the first iteration warms up


def measure_all(env, cfg, args):
    if cfg["a"] % env.world_size or cfg["s"] % env.world_size:
        raise harness.UsageError(f"t = {env.world_size} must divide a = {cfg['a']} and s = {cfg['s']}")
    torch.set_num_threads(1 if env.device.type == "cpu" else torch.get_num_threads())
    warnings.filterwarnings("ignore", message=".*DTensor random operators may not have complete support.*")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(env.device.type, (env.world_size,))
    out = {}
    for variant in ("tp", "tp_sp"):
        row = measure(cfg, env, mesh, variant)
        row["max_abs_diff_vs_one_device"] = check_output(cfg, env, mesh, variant)
        row["fwd_bwd_ms_median"] = None if args.no_timing else timing(cfg, env, mesh, variant)
        per_rank = harness.gather(row)
        out[variant] = per_rank
        if env.is_main:
            print(f"{variant:>6}: saved {[r['saved_bytes'] for r in per_rank]} B/rank  "
                  f"fwd {row['comm_counts_forward']}  bwd {row['comm_counts_backward']}  "
                  f"diff {row['max_abs_diff_vs_one_device']:.3g}  {row['fwd_bwd_ms_median']}", flush=True)
    params = {**cfg, "t": env.world_size, "dtype": "bfloat16", "p_drop": P_DROP,
              "timing": None if args.no_timing else
              harness.timing_note(env, "forward+backward") + ", max over ranks, median over iters; "
              "CPU times are CPU times"}
    return params, out


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure_all, script=__file__, timing_flag=True))

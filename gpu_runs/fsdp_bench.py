"""FSDP2 (torch.distributed.fsdp.fully_shard) on a stack of Linear blocks: shards, collectives, memory.

The same small model (an input Linear, L residual MLP blocks Linear(d,4d)-GELU-Linear(4d,d), an
output Linear) is wrapped the way the FSDP2 docs recommend: fully_shard on every block, then on
the root. For each configuration it records, on every rank:

  * the local DTensor shard of every parameter (dim-0 Shard, torch.chunk sizes, zero padding);
  * the collectives of one training step, split into forward / backward / optimizer step, counted
    by gpu_runs/comm_counter.py (FSDP2 in torch 2.13 calls dist.all_gather_single and
    dist.reduce_scatter_single; bytes follow nccl-tests: gathered output, scattered input);
  * the bytes of unsharded parameters still registered after forward (reshard_after_forward);
  * whether one Adam step equals a plain single-process reference on the whole global batch;
  * the order in which all-gathers are issued relative to block computation, with the default
    implicit prefetch and with explicit set_modules_to_forward/backward_prefetch;
  * the median step time (max over ranks) — on CPU + gloo this is a CPU result.

    torchrun --nproc_per_node=2 gpu_runs/fsdp_bench.py                 # CPU, gloo (timing)
    torchrun --nproc_per_node=4 gpu_runs/fsdp_bench.py --no-timing     # CPU, counts only
    torchrun --nproc_per_node=8 gpu_runs/fsdp_bench.py --preset gpu    # 8 GPUs, NCCL
    torchrun --nproc_per_node=2 gpu_runs/fsdp_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from gpu_runs.comm_counter import CommCounter  # noqa: E402
from snippets.common.fsdp_shapes import LLAMA7B_LIKE, hsdp_rows, large_model_rows  # noqa: E402

from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

PROGRAM = "fsdp_bench"
PRESETS = {
    # d: width; layers: blocks; batch: rows per rank; iters/warmup: timed steps
    # large: a model sharded in ONE process on a fake world of each size (meta device, fake PG)
    "tiny": {"d": 32, "layers": 2, "batch": 4, "warmup": 1, "iters": 2,
             "large": {"cfg": {"d": 64, "layers": 2, "ff": 172, "vocab": 1000}, "ns": [2, 3],
                       "hsdp": {"n": 4, "shards": [2, 4]}}},
    "full": {"d": 250, "layers": 4, "batch": 32, "warmup": 3, "iters": 40,
             "large": {"cfg": LLAMA7B_LIKE, "ns": [8, 16, 32, 48, 64], "hsdp": {"n": 64, "shards": [8, 16, 64]}}},
    "gpu": {"d": 1024, "layers": 8, "batch": 64, "warmup": 5, "iters": 50,
            "large": {"cfg": LLAMA7B_LIKE, "ns": [8, 16, 32, 48, 64], "hsdp": {"n": 64, "shards": [8, 16, 64]}}},
}
# (name, reshard_after_forward for blocks and root, param_dtype of MixedPrecisionPolicy)
CONFIGS = [
    ("reshard_true", True, None),
    ("reshard_false", False, None),
    ("reshard_default", None, None),  # None: True for the blocks, False for the root (fully_shard docs)
    ("reshard_true_bf16", True, "bfloat16"),
]
PREFETCH = [("default", 0), ("explicit_1", 1), ("explicit_2", 2)]
LR = 1e-2


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.index = -1
        self.log: list | None = None

    def forward(self, x):
        y = x + self.fc2(F.gelu(self.fc1(x)))
        if self.log is not None and y.requires_grad:  # fires when this block's backward starts
            y.register_hook(lambda g, i=self.index: self.log.append(f"B{i}"))
        return y


class Net(nn.Module):
    def __init__(self, d: int, layers: int):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        for i, b in enumerate(self.blocks):
            b.index = i
        self.out = nn.Linear(d, d)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def build(cfg: dict, reshard: bool | None, param_dtype: str | None, prefetch: int = 0) -> Net:
    torch.manual_seed(0)  # the same initial weights on every rank, as FSDP expects
    model = Net(cfg["d"], cfg["layers"])
    mp = MixedPrecisionPolicy(param_dtype=getattr(torch, param_dtype), reduce_dtype=torch.float32) \
        if param_dtype else MixedPrecisionPolicy()
    for b in model.blocks:
        fully_shard(b, reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(model, reshard_after_forward=reshard, mp_policy=mp)
    if prefetch:
        blocks = list(model.blocks)
        for i, b in enumerate(blocks):
            b.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + prefetch])
            b.set_modules_to_backward_prefetch(blocks[max(0, i - prefetch):i][::-1])
    return model


def batch(cfg: dict, rank: int, step: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)   # drawn on the CPU: the same numbers everywhere
    x = torch.randn(cfg["batch"], cfg["d"], generator=g)
    return x.to(device), torch.randn(cfg["batch"], cfg["d"], generator=g).to(device)


def loss_fn(out, y):
    return F.mse_loss(out.float(), y)


def shard_table(model: Net, n: int) -> list[dict]:
    """Per parameter: global shape, this rank's local rows, the padded rows FSDP2 stores."""
    rows = []
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor), name
        local = p.to_local()
        dim0 = p.shape[0]
        rows.append({"name": name, "shape": list(p.shape), "numel": p.numel(), "placement": str(p.placements[0]),
                     "local_rows": local.shape[0] if local.dim() else 0, "local_numel": local.numel(),
                     "padded_rows": -(-dim0 // n), "element_size": local.element_size(),
                     "dtype": str(local.dtype).replace("torch.", "")})
    return rows


def held_unsharded_bytes(model: Net) -> int:
    """Bytes of parameters registered unsharded (plain tensors, not DTensor shards) right now."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))


def reference_step(cfg: dict, n: int, steps: int) -> dict[str, torch.Tensor]:
    """Plain single-process Adam on the global batch (all ranks' rows): what FSDP must reproduce."""
    torch.manual_seed(0)
    ref = Net(cfg["d"], cfg["layers"])
    opt = torch.optim.Adam(ref.parameters(), lr=LR)
    for step in range(steps):
        opt.zero_grad()
        loss = sum(loss_fn(ref(x), y) for x, y in (batch(cfg, r, step) for r in range(n))) / n
        loss.backward()
        opt.step()
    return {k: v.detach() for k, v in ref.named_parameters()}


def one_config(cfg: dict, env: harness.Env, name: str, reshard: bool | None, param_dtype: str | None,
               timing: bool) -> dict:
    n = env.world_size
    model = build(cfg, reshard, param_dtype)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = batch(cfg, env.rank, 0, env.device)
    with CommCounter() as c_fwd:
        out = model(x)
    held = held_unsharded_bytes(model)
    with CommCounter() as c_bwd:
        loss_fn(out, y).backward()
    held_after_backward = held_unsharded_bytes(model)
    grad_local = [(p.grad.to_local().numel(), str(p.grad.dtype).replace("torch.", ""))
                  for p in model.parameters()]
    with CommCounter() as c_opt:
        opt.step()
        opt.zero_grad()
    state_local_bytes = sum(t.numel() * t.element_size() for s in opt.state.values() for t in
                            (v.to_local() if isinstance(v, DTensor) else v for v in s.values())
                            if t.dim() > 0)
    # correctness after one step: full parameters (gathered outside the counters) vs reference
    ref = reference_step(cfg, n, 1)
    full = {k: v.full_tensor().float() for k, v in model.named_parameters()}
    diff = max(float((full[k].detach().cpu() - ref[k]).abs().max()) for k in ref)
    rec = {
        "name": name, "reshard_after_forward": reshard, "param_dtype": param_dtype or "float32",
        "comm": {"forward": c_fwd.summary(), "backward": c_bwd.summary(), "optimizer": c_opt.summary()},
        "calls_forward": [op for op, _ in c_fwd.calls], "calls_backward": [op for op, _ in c_bwd.calls],
        "held_after_forward_bytes": held, "held_after_backward_bytes": held_after_backward,
        "grad_local_numel": sum(g for g, _ in grad_local), "grad_dtypes": sorted({d for _, d in grad_local}),
        "param_local_dtypes": sorted({str(p.to_local().dtype).replace("torch.", "") for p in model.parameters()}),
        "param_local_bytes": sum(p.to_local().numel() * p.to_local().element_size() for p in model.parameters()),
        "optimizer_state_local_bytes": state_local_bytes,
        "max_abs_diff_vs_reference": diff,
    }
    if timing:  # per step: barrier, synchronize, then the step between CUDA events (perf_counter on CPU)
        times = []
        for it in range(cfg["warmup"] + cfg["iters"]):
            xb, yb = batch(cfg, env.rank, it + 1, env.device)
            t = harness.time_call(env, lambda: (loss_fn(model(xb), yb).backward(), opt.step(), opt.zero_grad()))
            if it >= cfg["warmup"]:
                times.append(t)
        t = harness.max_over_ranks(env, times)
        rec["step_ms_median"] = statistics.median(t) * 1e3
        rec["step_ms_min"] = min(t) * 1e3
        rec["timed_iters"] = len(times)
    return rec


def prefetch_order(cfg: dict, env: harness.Env, name: str, depth: int) -> dict:
    """The issue order of all-gathers (AG) and block compute (F/B) in one forward and backward."""
    model = build(cfg, True, None, prefetch=depth)
    log: list[str] = []
    for b in model.blocks:
        b.log = log
        b.fc1.register_forward_pre_hook(lambda mod, args, i=b.index: log.append(f"F{i}"))

    class Logged(CommCounter):
        def __enter__(self):
            super().__enter__()
            for op in ("all_gather_single", "reduce_scatter_single"):
                inner = getattr(dist, op)

                def wrapper(*a, __inner=inner, __op=op, **k):
                    log.append("AG" if __op == "all_gather_single" else "RS")
                    return __inner(*a, **k)

                setattr(dist, op, wrapper)
            return self

    x, y = batch(cfg, env.rank, 0, env.device)
    with Logged():
        out = model(x)
    fwd = list(log)
    log.clear()
    with Logged():
        loss_fn(out, y).backward()
    return {"name": name, "depth": depth, "forward": fwd, "backward": list(log)}


def fake_worlds(args, cfg) -> None:
    """Before joining the real group: rank 0 alone plays rank 0 and rank N−1 of fake worlds."""
    args.large = args.hsdp = None
    if os.environ.get("RANK") == "0" and "WORLD_SIZE" in os.environ:
        args.large = large_model_rows(cfg["large"]["ns"], cfg["large"]["cfg"])
        args.hsdp = hsdp_rows(cfg["large"]["hsdp"]["n"], cfg["large"]["hsdp"]["shards"], cfg["large"]["cfg"])


def measure(env, cfg, args):
    n = env.world_size
    timing = not args.no_timing
    probe = build(cfg, True, None)
    shards = shard_table(probe, n)
    every = harness.gather([s["local_numel"] for s in shards])
    groups = [{"name": "root (inp, out)", "numel": sum(p.numel() for k, p in probe.named_parameters()
                                                      if not k.startswith("blocks."))}]
    groups += [{"name": f"blocks.{i}", "numel": sum(p.numel() for p in b.parameters())}
               for i, b in enumerate(probe.blocks)]
    del probe
    configs = [one_config(cfg, env, name, rs, dt, timing) for name, rs, dt in CONFIGS]
    orders = [prefetch_order(cfg, env, name, depth) for name, depth in PREFETCH]
    measurements = {
        "psi": sum(s["numel"] for s in shards),
        "groups": groups,
        "params": [{k: v for k, v in s.items() if k != "local_numel"} for s in shards],
        "per_rank_local_numel": [sum(v) for v in every],
        "per_rank_param_local_numel": every,
        "per_rank_bytes": [sum(v) * shards[0]["element_size"] for v in every],
        "configs": configs,
        "prefetch": orders,
        "large_fake_world": {"cfg": cfg["large"]["cfg"], "rows": args.large, "hsdp": args.hsdp},
    }
    if env.is_main:
        for c in configs:
            print(f"{c['name']:>18}: fwd {c['comm']['forward']} bwd {c['comm']['backward']} "
                  f"held {c['held_after_forward_bytes']} diff {c['max_abs_diff_vs_reference']:.2e} "
                  f"{'step %.2f ms' % c['step_ms_median'] if 'step_ms_median' in c else ''}", flush=True)
        for o in orders:
            print(f"{o['name']:>12}: {' '.join(o['forward'])} | {' '.join(o['backward'])}", flush=True)
    params = {**cfg, "lr": LR, "timing": timing, "optimizer": "torch.optim.Adam",
              "wrapping": "fully_shard(block) for every block, then fully_shard(root)",
              "timing_method": "per step: " + harness.timing_note(env, "forward+backward+Adam step")
                               + "; max over ranks; median over steps"}
    bad = [c["name"] for c in configs if c["max_abs_diff_vs_reference"] > (5e-2 if c["param_dtype"] != "float32" else 1e-5)]
    return params, measurements, f"FSDP step differs from the reference in {bad}" if bad else ""


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2,
                          before_init=fake_worlds, timing_flag=True))

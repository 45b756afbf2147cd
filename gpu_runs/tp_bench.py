"""Tensor parallelism with DTensor: collectives per pass (CommDebugMode), numerical agreement, naive split.

Every rank builds the same modules (same seed), shards them with
torch.distributed.tensor.parallel.parallelize_module on a 1-D DeviceMesh over all ranks (t = world
size) and records, separately for one forward and one backward:

  * every collective DTensor issues, seen by a CommDebugMode subclass that also notes the bytes
    (nccl-tests' S: the all-reduced tensor, the gathered output, the scattered input);
  * the largest |difference| between the sharded module and the unsharded module on the same
    input (output, input gradient, every parameter gradient gathered with full_tensor()), against a
    tolerance derived from the dtype and the reduction length (harness.tolerance: two summation
    orders of K = max(4h, b·s) fp32 terms differ by at most ≈ K·eps relative to the largest value),
    written into each case.

Cases: one column- and one row-parallel Linear; the Megatron MLP (input with and without
requires_grad) and the opposite order (row then column); attention with separate q/k/v
ColwiseParallel, with PrepareModuleInput(use_local_output=False), and with a fused QKV in Megatron's
per-head layout; a pre-LN transformer block, the same block under full recomputation
(torch.utils.checkpoint, with and without torch's early stop) and with SequenceParallel; and a head
count not divisible by t. With 2 processes it also runs a naive two-stage layer split (send/recv
of activations) and records each rank's busy intervals.

    torchrun --nproc_per_node=2 gpu_runs/tp_bench.py                 # CPU, gloo (counts + timeline)
    torchrun --nproc_per_node=4 gpu_runs/tp_bench.py --no-timing     # CPU, counts at t = 4
    torchrun --nproc_per_node=8 gpu_runs/tp_bench.py --preset gpu    # 8 GPUs, NCCL
    torchrun --nproc_per_node=2 gpu_runs/tp_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from gpu_runs.comm_counter import CommCounter  # noqa: E402
from snippets.common import tp_cost  # noqa: E402

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402
from torch.distributed.tensor.debug._comm_mode import NATIVE_TO_PY_MAPPING, c10d_collective_ops  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel, parallelize_module)

PROGRAM = "tp_bench"
PRESETS = {
    # b, s, h, a: micro-batch, sequence, hidden, heads (notation.md); naive: the two-stage split
    "tiny": {"b": 2, "s": 8, "h": 32, "a": 4,
             "naive": {"layers": 4, "width": 64, "rows": 64, "warmup": 1, "iters": 3}},
    # GPT-2 small's width and heads (h = 768, a = 12) with a short sequence
    "full": {"b": 2, "s": 64, "h": 768, "a": 12,
             "naive": {"layers": 8, "width": 512, "rows": 256, "warmup": 3, "iters": 20}},
    "gpu": {"b": 4, "s": 1024, "h": 2048, "a": 16,
            "naive": {"layers": 16, "width": 4096, "rows": 4096, "warmup": 5, "iters": 50}},
}


# ----------------------------------------------------------------------------- counting

class CountingMode(CommDebugMode):
    """CommDebugMode that also records each collective's bytes S (nccl-tests' convention)."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, int, list[int]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is NotImplemented or isinstance(func, torch._ops.HigherOrderOperator):
            return out
        packet = func._overloadpacket
        if packet in self.comm_registry or packet in c10d_collective_ops:
            name = NATIVE_TO_PY_MAPPING.get(packet, packet).__name__
            t = args[0]
            nbytes = t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
            if "all_gather" in name:
                nbytes *= int(args[1])  # group_size: S is the gathered output
            self.events.append((name, nbytes, list(t.shape) if isinstance(t, torch.Tensor) else []))
        return out

    def summary(self, lo: int = 0, hi: int | None = None) -> dict:
        """{op: {"calls", "bytes"}} of events[lo:hi] (one pass)."""
        out: dict[str, dict] = {}
        for name, nbytes, _ in self.events[lo:hi]:
            d = out.setdefault(name, {"calls": 0, "bytes": 0})
            d["calls"] += 1
            d["bytes"] += nbytes
        return out

    def check_against_own_counts(self) -> None:
        """Every event is one CommDebugMode counted itself (its own get_comm_counts)."""
        own = {k.__name__: v for k, v in self.get_comm_counts().items()}
        assert {k: v["calls"] for k, v in self.summary().items()} == own, (self.summary(), own)


# ----------------------------------------------------------------------------- modules

class MLP(nn.Module):
    def __init__(self, h: int):
        super().__init__()
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Attention(nn.Module):
    """Causal self-attention. With fused=True one Linear(h, 3h) whose output rows are grouped per
    head as [q_j | k_j | v_j] (Megatron's layout), so a contiguous column split keeps whole heads."""

    def __init__(self, h: int, a: int, fused: bool = False):
        super().__init__()
        self.hd, self.fused = h // a, fused
        if fused:
            self.qkv = nn.Linear(h, 3 * h)
        else:
            self.q, self.k, self.v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.o = nn.Linear(h, h)

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        if self.fused:  # -1: the heads this rank holds (a/t under TP)
            q, k, v = self.qkv(x).view(b, s, -1, 3 * self.hd).split(self.hd, dim=-1)
        else:
            q, k, v = (m(x).view(b, s, -1, self.hd) for m in (self.q, self.k, self.v))
        q, k, v = (u.transpose(1, 2) for u in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln1(x)), then + mlp(ln2(·))."""

    def __init__(self, h: int, a: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(h), Attention(h, a)
        self.ln2, self.mlp = nn.LayerNorm(h), MLP(h)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Recomputed(nn.Module):
    """The same block under full activation recomputation (torch.utils.checkpoint, non-reentrant):
    its forward runs again inside the backward, collectives included. With early_stop (torch's
    default) the recomputation stops once every tensor the backward needs has been rebuilt."""

    def __init__(self, h: int, a: int, early_stop: bool = True):
        super().__init__()
        self.block, self.early_stop = Block(h, a), early_stop

    def forward(self, x):
        with set_checkpoint_early_stop(self.early_stop):
            return checkpoint(self.block, x, use_reentrant=False)


# --8<-- [start:plans]
QKV = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel()}
PLANS = {
    # one column-parallel layer: W split by output columns, output left sharded
    "col": lambda: {"": ColwiseParallel()},
    # one row-parallel layer: W split by input rows, input arrives sharded, output summed
    "row": lambda: {"": RowwiseParallel()},
    # Megatron MLP: column-parallel fc1 (f before it), row-parallel fc2 (g after it)
    "mlp": lambda: {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()},
    # the opposite order: row-parallel first, so GELU needs the full sum, then column-parallel
    "mlp_row_then_col": lambda: {"fc1": RowwiseParallel(input_layouts=Replicate()),
                                 "fc2": ColwiseParallel(output_layouts=Replicate())},
    # q, k, v each turn the plain input into a DTensor on its own
    "attn_separate": lambda: dict(QKV),
    # the block boundary declared once: q, k, v share one replicated DTensor input
    "attn_prepared": lambda: {"": PrepareModuleInput(input_layouts=(Replicate(),),
                                                      desired_input_layouts=(Replicate(),),
                                                      use_local_output=False), **QKV},
    "attn_fused": lambda: {"qkv": ColwiseParallel(), "o": RowwiseParallel()},
    "block": lambda: {"attn": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),),
                                                 use_local_output=False),
                      **{f"attn.{k}": v for k, v in QKV.items()},
                      "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()},
    # Megatron-style sequence parallelism: LayerNorms on sequence shards, all-gather into the
    # column-parallel layer, reduce-scatter out of the row-parallel layer
    "block_sp": lambda: {"ln1": SequenceParallel(),
                         "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                                    use_local_output=False),
                         **{f"attn.{k}": ColwiseParallel() for k in "qkv"},
                         "attn.o": RowwiseParallel(output_layouts=Shard(1)),
                         "ln2": SequenceParallel(),
                         "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                                   use_local_output=False),
                         "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel(output_layouts=Shard(1))},
}
PLANS["block_recompute"] = lambda: {f"block.{k}": v for k, v in PLANS["block"]().items()}
PLANS["block_recompute_full"] = PLANS["block_recompute"]
# --8<-- [end:plans]


def make(kind: str, h: int, a: int) -> nn.Module:
    if kind == "col":
        return nn.Linear(h, 4 * h)
    if kind == "row":
        return nn.Linear(4 * h, h)
    if kind.startswith("mlp"):
        return MLP(h)
    if kind.startswith("block_recompute"):
        return Recomputed(h, a, early_stop=kind == "block_recompute")
    if kind.startswith("attn"):
        return Attention(h, a, fused=kind == "attn_fused")
    return Block(h, a)


# ----------------------------------------------------------------------------- one case

def run_case(cfg: dict, mesh, kind: str, x_requires_grad: bool = True) -> dict:
    """Forward and backward of the sharded module, counted; compared with the unsharded one."""
    b, s, h, a = cfg["b"], cfg["s"], cfg["h"], cfg["a"]
    t, rank = mesh.size(), mesh.get_local_rank()
    torch.manual_seed(0)
    dev = mesh.device_type
    ref = make(kind, h, a).to(dev)
    torch.manual_seed(0)
    tp = parallelize_module(make(kind, h, a).to(dev), mesh, PLANS[kind]())
    d_in, d_out = {"col": (h, 4 * h), "row": (4 * h, h)}.get(kind, (h, h))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, s, d_in, generator=g).to(dev)  # drawn on the CPU: the same numbers on every device
    dy = torch.randn(b, s, d_out, generator=g).to(dev)
    every = slice(None)
    seq = slice(rank * s // t, (rank + 1) * s // t)  # SP: this rank's sequence shard
    mine = lambda n: slice(rank * n // t, (rank + 1) * n // t)  # noqa: E731 - this rank's feature columns
    in_idx = {"block_sp": (every, seq), "row": (every, every, mine(d_in))}.get(kind, (every,))
    out_idx = {"block_sp": (every, seq), "col": (every, every, mine(d_out))}.get(kind, (every,))
    xr = x.clone().requires_grad_(x_requires_grad)
    xt = x[in_idx].clone().requires_grad_(x_requires_grad)
    y_ref = ref(xr)
    (y_ref * dy).sum().backward()
    # one mode for both passes (its module tracker must see the forward to follow a recomputation
    # inside the backward); the forward's events are those before backward() starts
    with CountingMode() as mode:
        y = tp(xt)
        n_fwd = len(mode.events)
        y_local = y.to_local() if isinstance(y, DTensor) else y
        (y_local * dy[out_idx]).sum().backward()
    mode.check_against_own_counts()
    diffs = {"output": float((y_local - y_ref[out_idx]).abs().max())}
    if x_requires_grad:
        diffs["input_grad"] = float((xt.grad - xr.grad[in_idx]).abs().max())
    refp = dict(ref.named_parameters())
    grad_placements = {n: str(p.grad.placements) if isinstance(p.grad, DTensor) else "plain"
                       for n, p in tp.named_parameters()}
    pg = 0.0
    bitwise = bool(torch.equal(y_local, y_ref[out_idx]))
    for name, p in tp.named_parameters():
        grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        pg = max(pg, float((grad - refp[name].grad).abs().max()))
    diffs["param_grad"] = pg
    # the scale each difference is judged against: the reference's largest |value| of that quantity
    scale = {"output": float(y_ref.abs().max()),
             "param_grad": max(float(q.grad.abs().max()) for q in ref.parameters())}
    if x_requires_grad:
        scale["input_grad"] = float(xr.grad.abs().max())
    tol = harness.tolerance(y_ref.dtype, max(4 * h, b * s))  # longest sum: 4h inputs, or b·s tokens (dW)
    tol["abs"] = {k: tol["rel"] * v for k, v in scale.items()}
    return {
        "case": kind, "t": t, "x_requires_grad": x_requires_grad,
        "forward": mode.summary(0, n_fwd), "backward": mode.summary(n_fwd),
        "forward_calls": [(n, nb) for n, nb, _ in mode.events[:n_fwd]],
        "backward_calls": [(n, nb) for n, nb, _ in mode.events[n_fwd:]],
        "max_abs_diff": diffs, "bitwise_equal_output": bitwise,
        "ref_max_abs": scale, "tolerance": tol,
        "within_tolerance": all(diffs[k] <= tol["abs"][k] for k in diffs),
        "shapes": {"input": list(x.shape), "output": list(dy.shape), "input_local": list(xt.shape),
                   "output_local": list(y_local.shape)},
        "activation_bytes": b * s * h * 4,  # S of one fp32 all-reduce of the block's output
        "placements": {n: str(p.placements) if isinstance(p, DTensor) else "plain"
                       for n, p in tp.named_parameters()},
        # a Partial gradient still owes a reduction that no counted pass issued (full_tensor() does it)
        "grad_placements": grad_placements,
    }


def indivisible_heads(cfg: dict, mesh) -> dict:
    """a not divisible by t: a column split of q cuts a head; record what happens."""
    t = mesh.size()
    a = t + 1  # e.g. 3 heads on 2 ranks
    hd = 8
    h = a * hd
    torch.manual_seed(0)
    m = parallelize_module(Attention(h, a).to(mesh.device_type), mesh, PLANS["attn_prepared"]())
    x = torch.randn(1, 4, h).to(mesh.device_type)
    try:
        m(x)
        outcome, message = "ran", ""
    except RuntimeError as e:
        outcome, message = "RuntimeError", str(e).splitlines()[0][:200]
    return {"h": h, "a": a, "t": t, "head_dim": hd, "local_q_columns": h // t, "outcome": outcome, "message": message}


# ----------------------------------------------------------------------------- naive split

def naive_split(cfg: dict, env: harness.Env, timing: bool) -> dict:
    """Two stages on ranks 0 and 1: stage 0 = first half of the layers, stage 1 = second half.
    Forward: rank 0 computes, sends its activation, rank 1 computes the loss; backward returns the
    activation gradient. Each rank logs its busy (compute) intervals relative to a shared start."""
    nc = cfg["naive"]
    w, rows, layers = nc["width"], nc["rows"], nc["layers"]
    torch.manual_seed(0)
    full = nn.Sequential(*[nn.Sequential(nn.Linear(w, w), nn.GELU()) for _ in range(layers)])
    half = layers // 2
    dev = env.device
    stage = (full[:half] if env.rank == 0 else full[half:]).to(dev)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(rows, w, generator=g).to(dev)
    target = torch.randn(rows, w, generator=g).to(dev)
    # reference loss and first-layer gradient on one process
    ref = nn.Sequential(*[nn.Sequential(nn.Linear(w, w), nn.GELU()) for _ in range(layers)])
    ref.load_state_dict(full.state_dict())
    ref.to(dev)
    F.mse_loss(ref(x), target).backward()

    # a compute interval is two Clock marks (CUDA events on the compute stream, read after the step: no
    # synchronize inside the step, which would also wait for the pending send/recv)
    clock = harness.Clock(env)

    def step(log=None):
        def mark(kind, start):
            if log is not None:
                log.append((kind, start, clock.mark()))
        if env.rank == 0:
            s0 = clock.mark()
            act = stage(x)
            mark("F", s0)
            dist.send(act.detach().contiguous(), dst=1)
            grad = torch.empty_like(act)
            dist.recv(grad, src=1)
            s0 = clock.mark()
            act.backward(grad)
            mark("B", s0)
            return None
        inp = torch.empty(rows, w, device=dev)
        dist.recv(inp, src=0)
        inp.requires_grad_(True)
        s0 = clock.mark()
        loss = F.mse_loss(stage(inp), target)
        mark("F", s0)
        s0 = clock.mark()
        loss.backward()
        mark("B", s0)
        dist.send(inp.grad.contiguous(), dst=0)
        return float(loss.detach())

    with CommCounter(ops=["send", "recv"]) as cc:
        step()
    # correctness: each stage's parameter gradients equal the one-process reference
    refp = list(ref.parameters())
    mine = list(stage.parameters())
    offset = 0 if env.rank == 0 else len(refp) // 2
    diff = max(float((p.grad - refp[offset + i].grad).abs().max()) for i, p in enumerate(mine))
    out = {"layers": layers, "width": w, "rows": rows, "elem_bytes": 4,
           "boundary_bytes_formula": rows * w * 4,
           "comm": cc.summary(), "max_abs_grad_diff": diff}
    if timing:
        timelines, totals = [], []
        for it in range(nc["warmup"] + nc["iters"]):
            for p in stage.parameters():
                p.grad = None
            log: list = []
            clock.start(barrier=True)
            t0 = clock.mark()
            step(log)
            dist.barrier()
            t_end = clock.mark()
            clock.resolve()
            if it >= nc["warmup"]:
                timelines.append([(k, clock.seconds(t0, a), clock.seconds(t0, b)) for k, a, b in log])
                totals.append(clock.seconds(t0, t_end))
        busy = [sum(e - s for _, s, e in tl) for tl in timelines]
        out["step_s_median"] = statistics.median(totals)
        out["busy_s_median"] = statistics.median(busy)
        k = sorted(range(len(totals)), key=totals.__getitem__)[len(totals) // 2]
        out["timeline_median_step"] = timelines[k]
        out["timed_iters"] = len(totals)
    return out


# ----------------------------------------------------------------------------- main

def measure(env, cfg, args):
    torch.set_num_threads(1) if env.device.type == "cpu" else None
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    if cfg["a"] % env.world_size:
        raise harness.UsageError(f"{cfg['a']} heads are not divisible by t = {env.world_size}")
    cases = [run_case(cfg, mesh, "col"), run_case(cfg, mesh, "row"),
             run_case(cfg, mesh, "mlp", x_requires_grad=False), run_case(cfg, mesh, "mlp")]
    cases += [run_case(cfg, mesh, k) for k in
              ("mlp_row_then_col", "attn_separate", "attn_prepared", "attn_fused", "block", "block_recompute",
               "block_recompute_full", "block_sp")]
    # every rank must see the same counts: gather them and keep rank 0's plus the check
    same = harness.gather([(c["forward"], c["backward"]) for c in cases])
    worst = harness.gather([(max(c["max_abs_diff"].values()), c["within_tolerance"]) for c in cases])
    for i, c in enumerate(cases):
        c["same_on_every_rank"] = all(r[i] == same[0][i] for r in same)
        c["max_abs_diff_all_ranks"] = max(w[i][0] for w in worst)
        c["within_tolerance_all_ranks"] = all(w[i][1] for w in worst)
    measurements = {"cases": cases, "indivisible_heads": indivisible_heads(cfg, mesh),
                    "predicted_per_layer": tp_cost.tp_collectives_per_layer()}
    if env.world_size == 2:
        naive = naive_split(cfg, env, timing=not args.no_timing)
        measurements["naive_split"] = harness.gather(naive)
    if env.is_main:
        for c in cases:
            f = {k: v["calls"] for k, v in c["forward"].items()}
            bw = {k: v["calls"] for k, v in c["backward"].items()}
            print(f"{c['case']:>17} x.grad={c['x_requires_grad']!s:5}: fwd {f} bwd {bw} "
                  f"diff {c['max_abs_diff_all_ranks']:.1e} (tolerance ×{c['tolerance']['rel']:.1e})", flush=True)
        print("indivisible:", measurements["indivisible_heads"], flush=True)
        if "naive_split" in measurements:
            for r, n in enumerate(measurements["naive_split"]):
                print(f"naive rank {r}: comm {n['comm']} diff {n['max_abs_grad_diff']:.1e} "
                      f"{'step %.2f ms busy %.2f ms' % (n['step_s_median'] * 1e3, n['busy_s_median'] * 1e3) if 'step_s_median' in n else ''}",
                      flush=True)
    params = {**cfg, "t": env.world_size, "dtype": "float32",
              "float32_matmul_precision": torch.get_float32_matmul_precision(),
              "timing": not args.no_timing and env.world_size == 2,
              "counting": "CommDebugMode subclass (torch.distributed.tensor.debug), forward and backward separately",
              "tolerance": "per case: harness.tolerance(float32, K = max(4h, b·s)) × the reference's max |value|",
              "timing_method": "naive split: " + harness.timing_note(env, "one forward+backward")
                               + ", per-rank compute intervals (marks); median step"}
    bad = [c["case"] for c in cases if not c["within_tolerance_all_ranks"]]
    return params, measurements, f"sharded module differs from the unsharded one beyond the tolerance in {bad}" \
        if bad else ""


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2,
                          timing_flag=True))

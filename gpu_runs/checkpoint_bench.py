"""Activation checkpointing on a real GPT stack: bytes kept, peak during backward, recomputation, time.

One process. The same stack of L GPT blocks (snippets/common/gpt_block.py, bf16, dropout on) runs
forward + backward under each mode:
  none        every block stores its activations;
  segments=k  k segments of ⌈L/k⌉ blocks, each under torch.utils.checkpoint (non-reentrant), for
              k = L (per-block), k = round(√L), k = 2, k = 1;
  selective   every block recomputes only its core attention (QKᵀ, softmax, dropout, ·V);
  ln          every block recomputes only its two LayerNorms.
For each mode it records
  * activation bytes alive right after forward and their peak during backward. On CPU these come
    from torch.distributed._tools.mem_tracker.MemTracker (categories ACT + TEMP, updated after every
    op: snippets/common/saved_tensors.py). On CUDA: torch.cuda.memory_allocated() after forward and
    torch.cuda.max_memory_allocated() during backward, minus the bytes allocated before forward, with
    every gradient (parameters and input) allocated before that baseline, so the peak is activations
    and backward temporaries, not the gradients' ψ·2 bytes (backward accumulates into them in place);
  * how many times each block's forward started (forward pre-hooks): the recomputation, counted;
  * whether every parameter gradient is bitwise equal to the gradients of mode "none";
  * the matmul FLOPs of forward + backward (torch.utils.flop_counter.FlopCounterMode), recomputation included;
  * the median forward+backward time over `iters` iterations, and the forward alone (a fence, then
    CUDA events on a GPU, time.perf_counter on CPU), and the matmul TFLOP/s that time achieves (the
    page divides it by the GPU's peak for the MFU).
It also traces one GPT-3 175B layer (s = 2048, h = 12288, a = 96, b = 1) on the meta device and records
the bytes it saves (Ch6-01 experiment 4): no memory is allocated, but the meta kernels' imports take
seconds, which is why this runs here and not in a page cell.

    torchrun --nproc_per_node=1 gpu_runs/checkpoint_bench.py                 # CPU
    torchrun --nproc_per_node=1 gpu_runs/checkpoint_bench.py --preset gpu    # one GPU
    torchrun --nproc_per_node=1 gpu_runs/checkpoint_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from snippets.common.gpt_block import causal_bias, forward_stack, make_block, make_stack  # noqa: E402
from snippets.common.saved_tensors import SavedTensorCounter, activation_peak_tracker  # noqa: E402

PROGRAM = "checkpoint_bench"
PRESETS = {
    "tiny": {"layers": 4, "s": 32, "b": 1, "h": 32, "a": 4, "iters": 2},
    "full": {"layers": 16, "s": 256, "b": 2, "h": 256, "a": 8, "iters": 7},
    "gpu": {"layers": 16, "s": 2048, "b": 2, "h": 2048, "a": 16, "iters": 10},
}


def modes(layers: int) -> list[tuple[str, int, str]]:
    ks = sorted({layers, max(1, round(math.sqrt(layers))), 2, 1}, reverse=True)
    return [("none", 0, "none"), *((f"segments={k}", k, "none") for k in ks), ("selective", 0, "core"),
            ("ln", 0, "ln")]


def cuda_memory(blocks, x, segments, recompute, dev) -> tuple[int, int]:
    """(bytes allocated after forward, peak during backward), both above the bytes allocated before
    forward, from the caching allocator (CUDA). Every gradient is allocated before the baseline: without
    that the peak would include the parameter gradients backward creates (ψ·2 bytes, ~1.6 GB at the gpu
    preset), which checkpointing does not change."""
    for t in [*blocks.parameters(), x]:
        t.grad = torch.zeros_like(t)  # backward accumulates into these in place: 0 + g == g bitwise
    with harness.PeakMemory(dev) as fwd:
        y = forward_stack(blocks, x, segments, recompute)
    with harness.PeakMemory(dev) as bwd:
        y.float().sum().backward()
    return fwd.end - fwd.base, bwd.peak - fwd.base


def one_mode(cfg, dev, segments, recompute, ref_grads=None):
    blocks = make_stack(cfg["layers"], cfg["h"], cfg["a"], device=dev)
    calls = [0] * len(blocks)
    for i, blk in enumerate(blocks):
        # a pre-hook: non-reentrant checkpoint stops a recomputation early, once the last tensor it needs
        # is rebuilt, so a segment's last block never *returns* during recomputation
        blk.register_forward_pre_hook(lambda m, a, i=i: calls.__setitem__(i, calls[i] + 1))
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(cfg["s"], cfg["b"], cfg["h"], generator=g).to(dev, torch.bfloat16).requires_grad_()
    causal_bias(cfg["s"], torch.bfloat16, dev)  # the shared causal mask is created before we measure

    # 1) memory, with the same RNG seed for every mode (dropout masks identical → gradients comparable)
    torch.manual_seed(123)
    if harness.on_cuda(dev):
        after_fwd, peak = cuda_memory(blocks, x, segments, recompute, dev)
        how = ("torch.cuda.memory_allocated / max_memory_allocated minus the bytes before forward "
               "(gradients preallocated before it)")
    else:
        mt = activation_peak_tracker()
        mt.track_external(blocks, x)
        with mt:
            y = forward_stack(blocks, x, segments, recompute)
            after_fwd = mt.activation_now()
            y.float().sum().backward()
        peak = mt.act_peak
        how = "MemTracker ACT + TEMP (snippets/common/saved_tensors.activation_peak_tracker)"
    grads = [p.grad.detach().clone() for p in blocks.parameters()]
    equal = None if ref_grads is None else all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    fwd_calls = list(calls)

    # matmul FLOPs of one forward + backward, recomputation included
    from torch.utils.flop_counter import FlopCounterMode

    for p in blocks.parameters():
        p.grad = None
    torch.manual_seed(123)
    with FlopCounterMode(display=False) as fc:
        fwd = FlopCounterMode(display=False)
        with fwd:
            y = forward_stack(blocks, x, segments, recompute)
        y.float().sum().backward()
    flops = {"fwd_bwd": int(fc.get_total_flops()), "fwd": int(fwd.get_total_flops()),
             "by_op": {str(k): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}}

    # 2) time (no tracker), median over iterations: one fence, marks between the passes, read after
    clock = harness.Clock(dev)
    times, fwd_times = [], []
    for it in range(cfg["iters"] + 1):
        for p in blocks.parameters():
            p.grad = None
        clock.start()
        t0 = clock.mark()
        y = forward_stack(blocks, x, segments, recompute)
        t1 = clock.mark()
        y.float().sum().backward()
        t2 = clock.mark()
        clock.resolve()
        if it:  # the first iteration warms up
            times.append(clock.seconds(t0, t2))
            fwd_times.append(clock.seconds(t0, t1))
    fwd_bwd_s = statistics.median(times)
    return grads, {"act_after_forward": int(after_fwd), "act_peak_backward": int(peak), "memory_source": how,
                   "block_forward_calls": fwd_calls, "grads_equal_to_none": equal, "flops": flops,
                   "fwd_bwd_ms_median": fwd_bwd_s * 1e3,
                   "fwd_ms_median": statistics.median(fwd_times) * 1e3,
                   "tflops_achieved": flops["fwd_bwd"] / fwd_bwd_s / 1e12}


# --8<-- [start:meta]
def gpt3_layer_on_meta(b: int = 1) -> dict:
    """One GPT-3 175B layer traced on the meta device: shapes and dtypes only, nothing allocated."""
    s, h, a = 2048, 12288, 96
    block = make_block(h, a, device="meta")
    x = torch.randn(s, b, h, dtype=torch.bfloat16, device="meta", requires_grad=True)
    with SavedTensorCounter(block) as counter:
        block(x)
    return {"s": s, "b": b, "h": h, "a": a, "saved_bytes": counter.total_bytes,
            "saved_entries": [{"bytes": e["bytes"], "dtype": e["dtype"], "shape": list(e["shape"])}
                              for e in counter.entries.values()]}
# --8<-- [end:meta]


def measure(env, cfg, args):
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows, ref = [], None
    if harness.on_cuda(env):
        # cuBLAS/cuBLASLt take their workspaces from the caching allocator on first use: let that happen
        # before the first measured forward, or the first mode's memory_allocated would include them
        warm = make_stack(1, cfg["h"], cfg["a"], device=env.device)
        xw = torch.randn(cfg["s"], cfg["b"], cfg["h"], device=env.device, dtype=torch.bfloat16, requires_grad=True)
        forward_stack(warm, xw).float().sum().backward()
        del warm, xw
        harness.sync(env)
    for name, k, rec in modes(cfg["layers"]):
        grads, row = one_mode(cfg, env.device, k, rec, ref)
        if name == "none":
            ref = grads
        row.update({"mode": name, "segments": k, "recompute": rec, "selective": rec != "none"})
        rows.append(row)
        print(f"{name:>12}: after fwd {row['act_after_forward']:>12,} B  peak {row['act_peak_backward']:>12,} B  "
              f"fwd calls {sum(row['block_forward_calls'])}  equal {row['grads_equal_to_none']}  "
              f"{row['fwd_bwd_ms_median']:.1f} ms", flush=True)
    params = {**cfg, "dtype": "bfloat16", "p_drop": 0.1,
              "checkpoint": "torch.utils.checkpoint.checkpoint(use_reentrant=False, preserve_rng_state=True)",
              "torch_threads": torch.get_num_threads(),
              "timing": "per mode: 1 warm-up + iters iterations of forward+backward, a synchronize before each, "
                        + ("CUDA events" if harness.on_cuda(env) else "time.perf_counter") + " between the passes; "
                        "median; CPU times are CPU times"}
    meta = gpt3_layer_on_meta()
    print(f"GPT-3 layer on meta: {meta['saved_bytes']:,} B saved", flush=True)
    return params, {"modes": rows, "gpt3_meta": meta}


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, allowed_world_sizes={1}))

"""GEMM throughput against the hidden size h and the tensor-parallel shard shapes h/t: measured TFLOP/s.

Ch3-05 and the Ch7 planner turn FLOPs into time with an efficiency; this program measures it instead of
assuming one. On a GPU the products are bf16 (cuBLAS through torch.mm), on CPU float32.

What it times, for every h in `hs` and t in `ts` (m = tokens, the rows of the activation):
  mlp_up    m × h   @ h × 4h/t   (column-parallel first MLP linear, one rank's shard)
  mlp_down  m × 4h/t @ 4h/t × h  (row-parallel second MLP linear)
  qkv       m × h   @ h × 3h/t   (column-parallel QKV projection)
  attn_out  m × h/t @ h/t × h    (row-parallel attention output projection)
  square    h × h   @ h × h      (t = 1; `tokens` = m = h in its row)
plus `peak`: the fastest of a few large square products (the rate the other rows are read against).
FLOPs = 2·m·n·k. Timing is nccl-tests style: warm-up calls, then `spans` spans of back-to-back calls,
each span timed as one interval (CUDA events on GPU, read after one synchronize; time.perf_counter on
CPU); a call's time is the span over its calls, the row's time the median over spans. The number of
calls in a span is chosen from one probe call so that a span lasts about `span_ms`. Inputs are random
(never zeros) and rotate among as many input sets as it takes to exceed `rotate_bytes`, so that small
shapes are not served from the cache.

Correctness: every family's product on a small case against float64 on the CPU (‖out − ref‖/‖ref‖,
tolerance by dtype), and every timed product against float64 of the same operands on the same device;
outputs are poisoned with NaN before timing and must come back finite. On several ranks every rank measures its own device at the same time; rank 0
records its numbers, and the check fails if any rank's check fails.

    torchrun --nproc_per_node=1 gpu_runs/gemm_bench.py                   # CPU, float32
    torchrun --nproc_per_node=1 gpu_runs/gemm_bench.py --preset gpu      # one GPU, bf16
    torchrun --nproc_per_node=1 gpu_runs/gemm_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import itertools
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

PROGRAM = "gemm_bench"
PRESETS = {
    "tiny": {"hs": [64, 128], "ts": [1, 2], "tokens": 64, "peak_sizes": [128, 256], "warmup": 1, "spans": 3,
             "span_ms": 2.0, "max_iters": 20, "rotate_bytes": 1 << 20, "check_h": 64, "check_tokens": 32},
    "full": {"hs": [256, 512, 1024, 2048], "ts": [1, 2, 4, 8], "tokens": 512, "peak_sizes": [512, 1024, 2048],
             "warmup": 2, "spans": 5, "span_ms": 40.0, "max_iters": 200, "rotate_bytes": 64 << 20,
             "check_h": 128, "check_tokens": 64},
    # tokens = 2048 = b·s of GPT-3 175B's layer at b = 1 (the shape Ch3-05 reads), and t up to 64 so that
    # h = 12288 itself reaches the shard widths h/t of Ch3-05's ρ(t) table (t = 2 … 64): no width is read off
    # a smaller h. Every h here is divisible by 64 (shard_shape uses h // t).
    "gpu": {"hs": [1024, 2048, 4096, 5120, 8192, 12288], "ts": [1, 2, 4, 8, 16, 32, 64], "tokens": 2048,
            "peak_sizes": [4096, 8192, 16384], "warmup": 3, "spans": 7, "span_ms": 20.0, "max_iters": 500,
            "rotate_bytes": 256 << 20, "check_h": 256, "check_tokens": 128},
}
FAMILIES = ("mlp_up", "mlp_down", "qkv", "attn_out")
# ‖out − ref‖ / ‖ref‖ bounds (GPU notes, METHOD.md): float32 far under 1e-3, bf16 operands 1e-3 .. 1e-2
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


# --8<-- [start:shapes]
def shard_shape(family: str, h: int, t: int, tokens: int) -> tuple[int, int, int]:
    """(m, n, k) of one tensor-parallel rank's product: [m × k] @ [k × n]."""
    if family == "mlp_up":
        return tokens, 4 * h // t, h
    if family == "mlp_down":
        return tokens, h, 4 * h // t
    if family == "qkv":
        return tokens, 3 * h // t, h
    if family == "attn_out":
        return tokens, h, h // t
    if family == "square":
        return h, h, h
    raise ValueError(family)


def tflops(m: int, n: int, k: int, seconds: float) -> float:
    return 2 * m * n * k / seconds / 1e12
# --8<-- [end:shapes]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in ref's precision, on ref's device (a NaN or inf in out: inf)."""
    out = out.to(ref.device, ref.dtype)
    if not torch.isfinite(out).all():
        return math.inf
    return float((out - ref).norm() / ref.norm())


def check_small(family: str, cfg, device, dtype, gen) -> dict:
    """One family's product on a small case against float64 on the CPU (fresh random inputs)."""
    m, n, k = shard_shape(family, cfg["check_h"], 1 if family == "square" else 2, cfg["check_tokens"])
    a = torch.randn(m, k, generator=gen).to(device, dtype)
    b = torch.randn(k, n, generator=gen).to(device, dtype)
    c = torch.full((m, n), float("nan"), device=device, dtype=dtype)
    torch.mm(a, b, out=c)
    err = rel_err(c, a.double().cpu() @ b.double().cpu())  # the same (rounded) operands, in float64
    return {"family": family, "m": m, "n": n, "k": k, "reference": "float64 on CPU", "rel_err": err,
            "tol": TOL[dtype], "ok": err <= TOL[dtype]}


def measure_shape(m, n, k, cfg, clock, device, dtype, gen: torch.Generator) -> tuple[float, dict]:
    """Median per-call time (s) of [m×k]@[k×n], and the check of the timed outputs."""
    set_bytes = (m * k + k * n + m * n) * torch.tensor([], dtype=dtype).element_size()
    nsets = max(1, min(8, math.ceil(cfg["rotate_bytes"] / set_bytes)))
    sets = []
    for _ in range(nsets):
        a = torch.randn(m, k, generator=gen, device=device, dtype=dtype)  # gen lives on `device`
        b = torch.randn(k, n, generator=gen, device=device, dtype=dtype)
        sets.append((a, b, torch.full((m, n), float("nan"), device=device, dtype=dtype)))
    nxt = itertools.cycle(sets).__next__

    def call():
        a, b, c = nxt()
        torch.mm(a, b, out=c)

    for _ in range(nsets):  # every input set written once before timing, however few calls the spans make
        call()
    per_call, iters, _ = harness.span_times_ms(call, clock, cfg["warmup"], cfg["spans"], cfg["span_ms"], cfg["max_iters"])
    a, b, c = sets[0]
    # float64 of the same (rounded) operands, on the device: no TF32 or reduced-precision path applies
    ref = a.double() @ b.double()
    how = f"float64 on {device.type}"
    written = all(bool(torch.isfinite(s[2]).all()) for s in sets)
    err = rel_err(c, ref)
    del sets, ref
    return statistics.median(per_call) / 1e3, {"m": m, "n": n, "k": k, "iters_per_span": iters,
                                                "input_sets": nsets, "reference": how, "rel_err": err,
                                                "tol": TOL[dtype], "all_written": written,
                                                "ok": written and err <= TOL[dtype]}


def row(family, h, t, m, n, k, dtype, seconds) -> dict:
    return {"family": family, "h": h, "t": t, "tokens": m, "m": m, "n": n, "k": k, "dtype": str(dtype)[6:],
            "time_us_median": seconds * 1e6, "tflops": tflops(m, n, k, seconds)}


def measure(env, cfg, args):
    device = env.device
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    clock = harness.Clock(device)
    cpu_gen = torch.Generator().manual_seed(1234 + env.rank)
    gen = torch.Generator(device=device).manual_seed(4321 + env.rank)
    small = [check_small(f, cfg, device, dtype, cpu_gen) for f in (*FAMILIES, "square")]
    timed = []

    peaks = []
    for s in cfg["peak_sizes"]:
        sec, chk = measure_shape(s, s, s, cfg, clock, device, dtype, gen)
        peaks.append((sec, s))
        timed.append({"family": "peak", **chk})
    sec, s = max(peaks, key=lambda p: tflops(p[1], p[1], p[1], p[0]))
    peak = {"m": s, "n": s, "k": s, "dtype": str(dtype)[6:], "time_us_median": sec * 1e6,
            "tflops": tflops(s, s, s, sec)}
    print(f"peak {s}^3 {str(dtype)[6:]}: {peak['tflops']:.2f} TFLOP/s", flush=True)

    sweep = []
    for h in cfg["hs"]:
        for family, t in [("square", 1), *((f, t) for f in FAMILIES for t in cfg["ts"])]:
            m, n, k = shard_shape(family, h, t, cfg["tokens"])
            sec, chk = measure_shape(m, n, k, cfg, clock, device, dtype, gen)
            sweep.append(row(family, h, t, m, n, k, dtype, sec))
            timed.append({"family": family, "h": h, "t": t, **chk})
            print(f"h={h:>6} t={t} {family:>8} {m}x{k}@{k}x{n}: {sweep[-1]['time_us_median']:10.1f} us "
                  f"{sweep[-1]['tflops']:8.2f} TFLOP/s  err {chk['rel_err']:.1e}", flush=True)

    ok_here = all(c["ok"] for c in small) and all(c["ok"] for c in timed)
    flag = torch.tensor([1 if ok_here else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # on env.device: NCCL has no CPU backend
    peak_by_rank = torch.tensor([peak["tflops"]], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(peak_by_rank) for _ in range(env.world_size)]
    dist.all_gather(gathered, peak_by_rank)
    ok = bool(flag.item())
    if not ok and env.is_main:
        print("error: a product differs from its reference beyond tolerance, or left outputs unwritten "
              "(measurements/check)", file=sys.stderr, flush=True)
    params = {"dtype": str(dtype)[6:], "hs": cfg["hs"], "ts": cfg["ts"], "tokens": cfg["tokens"],
              "peak_sizes": cfg["peak_sizes"], "warmup": cfg["warmup"], "spans": cfg["spans"],
              "span_ms": cfg["span_ms"], "rotate_bytes": cfg["rotate_bytes"],
              "torch_threads": torch.get_num_threads(),
              "bf16_reduced_precision_reduction":  # cuBLAS may reduce split-K partials in bf16
                  bool(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
                  if device.type == "cuda" else None,
              "op": "torch.mm(a, b, out=c), row-major [m×k]@[k×n]",
              "timing": ("warm-up, one probe call, then `spans` spans of back-to-back calls (about span_ms "
                         "each), each span one interval: "
                         + ("CUDA events, read after one synchronize" if device.type == "cuda"
                            else "time.perf_counter") + "; per call = span / calls; median over spans. Calls are launched from Python one by one (no CUDA "
                         "graph): a product shorter than the launch overhead is launch-bound, as in eager training"),
              "flops": "2·m·n·k per product"}
    measurements = {"peak": peak, "sweep": sweep,
                    "check": {"ok": ok, "small_vs_float64": small, "timed": timed,
                              "peak_tflops_by_rank": [float(g.item()) for g in gathered]}}
    return params, measurements, ok


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__))

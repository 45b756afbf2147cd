"""Ch6-02 Gradient Checkpointing (Chen 2016): the code the page runs and the tests import.

Segment checkpointing of a chain of L layers, each storing A bytes of activations and taking an
input of c_in bytes: n_ckpt segments keep n_ckpt inputs and rerun one segment at a time in backward.
"""
from __future__ import annotations

import math

import numpy as np

from snippets import results
from snippets.common import activation_memory as am


# --8<-- [start:model]
def segment_memory(L: int, A: float, c_in: float, n_ckpt):
    """Chen 2016 §4: (bytes kept after forward, peak bytes in backward) with n_ckpt segments (n_ckpt = 0: none).

    After forward: n_ckpt segment inputs (n_ckpt·c_in).  Backward reruns one segment of ⌈L/n_ckpt⌉ layers at a time
    while the n_ckpt stored inputs are still there: n_ckpt·c_in + ⌈L/n_ckpt⌉·A.  No checkpointing: L·A throughout.
    """
    n_ckpt = np.asarray(n_ckpt)
    gg = np.maximum(n_ckpt, 1)
    after = np.where(n_ckpt == 0, L * A, gg * c_in)
    peak = np.where(n_ckpt == 0, L * A, gg * c_in + np.ceil(L / gg) * A)
    return after, peak


def best_segments(L: int, A: float, c_in: float):
    """argmin over n_ckpt = 1..L of the peak (vectorised), and the continuous optimum √(L·A/c_in)."""
    gs = np.arange(1, L + 1)
    _, peak = segment_memory(L, A, c_in, gs)
    i = int(np.argmin(peak))
    return int(gs[i]), float(peak[i]), math.sqrt(L * A / c_in), 2 * math.sqrt(L * A * c_in)


def time_ratio(fwd: float, bwd: float) -> float:
    """(forward + recomputed forward + backward) / (forward + backward): one extra forward."""
    return (2 * fwd + bwd) / (fwd + bwd)
# --8<-- [end:model]




def layer_sizes(cfg: dict, gpu: bool) -> tuple[float, float]:
    """(A, c) for a results file's stack: A from Theorem 6.1.3 with the device's mask width and LN statistics."""
    s, b, h, a = cfg["s"], cfg["b"], cfg["h"], cfg["a"]
    mask, stat_bytes = (1, 4) if gpu else (2, 2)  # CUDA: bool masks, fp32 stats; CPU: bf16 noise, bf16 stats
    return am.closed_form(s, b, h, a, mask_bytes=mask) + 4 * s * b * stat_bytes, 2 * s * b * h


def measured_rows(r: results.Result):
    """Rows of a checkpoint_bench results file with the model's prediction beside each measurement."""
    cfg = r.params
    A, c = layer_sizes(cfg, r.hardware["kind"] == "gpu")
    L = cfg["layers"]
    rows = []
    for m in r.measurements["modes"]:
        if m["selective"]:
            continue
        after, peak = segment_memory(L, A, c, m["segments"])
        rows.append({**m, "model_after": float(after), "model_peak": float(peak)})
    return rows, A, c


def gpt3_sweep(b: int = 1, layers=(16, 96, 1024)):
    """Simulator: a GPT-3 layer (A = 114 sbh, c = 2sbh) in stacks of L layers."""
    g = am.GPT3
    A, c = am.no_parallel(g["s"], b, g["h"], g["a"]), am.full_recompute(g["s"], b, g["h"])
    out = []
    for L in layers:
        k_best, peak_best, k_cont, _ = best_segments(L, A, c)
        ks = np.array([0, L, round(math.sqrt(L)), k_best])
        _, peaks = segment_memory(L, A, c, ks)
        out.append({"L": L, "none": peaks[0], "per_block": peaks[1], "sqrt_k": int(ks[2]), "sqrt": peaks[2],
                    "k_best": k_best, "best": peak_best, "k_cont": k_cont})
    return out, A, c


def sweep_figure(L: int = 96):
    """Peak activation bytes against the number of segments for a GPT-3 layer stack."""
    from snippets.common import figures

    g = am.GPT3
    A, c = am.no_parallel(g["s"], 1, g["h"], g["a"]), am.full_recompute(g["s"], 1, g["h"])
    ks = np.arange(1, L + 1)
    after, peak = segment_memory(L, A, c, ks)
    fig, ax = figures.new(7, 3.6)
    ax.plot(ks, peak / am.GB, label="backward 중 peak  n_ckpt·c_in + ⌈L/n_ckpt⌉·A")
    ax.plot(ks, after / am.GB, label="forward 뒤 보관  n_ckpt·c_in")
    k_best, pk, k_cont, _ = best_segments(L, A, c)
    ax.axvline(math.sqrt(L), color="gray", ls=":", label=f"n_ckpt = √L ≈ {math.sqrt(L):.1f}")
    ax.plot([k_best], [pk / am.GB], "o", color="C3", label=f"최소 n_ckpt = {k_best}")
    ax.set_xlabel("segment 수 n_ckpt")
    ax.set_ylabel("GB (b = 1)")
    ax.set_yscale("log")
    ax.set_title(f"GPT-3 layer × {L}: A = 114·sbh, c_in = 2·sbh")
    ax.legend(fontsize=8)
    return figures.svg(fig)


def timing_rows(r: results.Result):
    """Measured forward+backward time of each mode against the one-extra-forward prediction.

    F and B are measured in mode "none" (B = forward+backward − forward). Segment checkpointing reruns every
    block once: predicted (2F + B)/(F + B). Selective reruns only the core attention (Ch6-03)."""
    modes = {m["mode"]: m for m in r.measurements["modes"]}
    none = modes["none"]
    F = none["fwd_ms_median"]
    B = none["fwd_bwd_ms_median"] - F
    rows = []
    for m in r.measurements["modes"]:
        if m["selective"]:
            continue
        pred = 1.0 if m["segments"] == 0 else time_ratio(F, B)
        rows.append({"mode": m["mode"], "ms": m["fwd_bwd_ms_median"], "ratio": m["fwd_bwd_ms_median"] / none["fwd_bwd_ms_median"],
                     "pred": pred, "calls": sum(m["block_forward_calls"]), "equal": m["grads_equal_to_none"],
                     # matmul FLOPs counted by FlopCounterMode (recomputation included) over the measured time
                     "tflops": m["flops"]["fwd_bwd"] / (m["fwd_bwd_ms_median"] * 1e-3) / 1e12,
                     # the model's useful work (mode "none") over this mode's time: what recomputation costs
                     "useful_tflops": none["flops"]["fwd_bwd"] / (m["fwd_bwd_ms_median"] * 1e-3) / 1e12})
    return rows, F, B


def gemm_peak_tflops(plat, dtype: str = "bfloat16") -> float | None:
    """The measured GEMM peak (gpu_runs/gemm_bench.py, measurements["peak"]["tflops"]) on the GPU of `plat`,
    in `dtype` (checkpoint_bench's stack is bf16), or None: on CPU (scripts/runs.py runs gemm_bench there in
    float32, a peak a bf16 stack must not be divided by), when that GPU has no gemm_bench file, or when its
    peak was measured in another dtype."""
    from snippets.ch5_zero_sharding.d05_fsdp import same_hardware

    g = same_hardware("gemm_bench", plat) if plat.is_gpu else None
    peaks = [float(r.measurements["peak"]["tflops"]) for r in (g.runs if g else [])
             if r.measurements["peak"].get("dtype") == dtype]
    return max(peaks) if peaks else None

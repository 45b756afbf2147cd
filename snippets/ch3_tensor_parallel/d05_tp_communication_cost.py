"""Ch3-05 TP communication cost: counts per layer and step, bytes, α-β time, the scaling limit, SP.

Every formula comes from snippets/common/tp_cost.py (shared with Ch7's planner) and Ch1's α-β
module; link rates come from Ch1-04's table (per direction). Measured counts come from
gpu_runs/tp_bench.py. Notation: t, b, s, h, L, m, e (docs/notation.md); F peak FLOP/s.
"""
from __future__ import annotations

import numpy as np

from snippets import results
from snippets.ch1_collective.d04_nccl_topology import IB_PORT_GBIT, gbit_to_GBps, nvlink_GBps
from snippets.common import figures
from snippets.common.alphabeta import fit_alpha_beta, ring_allreduce_time
from snippets.common.tp_cost import (layer_flops, ring_allgather_time, tp_allreduce_bytes, tp_allreduces_per_layer,
                                     tp_allreduces_per_step, tp_collectives_per_layer, tp_comm_time_per_layer,
                                     tp_scaling)

GPT3 = {"b": 1, "s": 2048, "h": 12288, "L": 96}  # GPT-3 175B's shape (Brown et al. 2020, Table 2.1)
ALPHA_ASSUMED = 5e-6  # s per message: an assumption for GPU links (not measured here), as in Ch1-03
# Published dense 16-bit tensor-core peaks (vendor whitepapers), labelled, not measured here
PEAK_FLOPS = {"A100": 312e12, "H100 SXM": 989e12}


# --8<-- [start:links]
def links() -> dict[str, float]:
    """Per-direction bandwidth of one GPU's path, GB/s (Ch1-04's table: vendors' rates, not measured)."""
    return {"NVLink3 (A100, 노드 안)": nvlink_GBps("NVLink3 (A100)")[0],
            "NVLink4 (H100, 노드 안)": nvlink_GBps("NVLink4 (H100)")[0],
            "InfiniBand HDR (GPU 당 1 포트, 노드 사이)": gbit_to_GBps(IB_PORT_GBIT["HDR"]),
            "InfiniBand NDR (GPU 당 1 포트, 노드 사이)": gbit_to_GBps(IB_PORT_GBIT["NDR"])}
# --8<-- [end:links]


def cpu_fit(n: int = 2) -> dict:
    """α, β of ring all_reduce fitted to Ch1's committed gloo measurement with n processes (CPU result)."""
    r = next(r for r in results.load("collectives_bench", kind="cpu") if r.hardware["world_size"] == n)
    rows = [x for x in r.measurements if x["op"] == "all_reduce"]
    S = np.array([x["bytes"] for x in rows], float)
    secs = np.array([x["time_us_median"] for x in rows]) * 1e-6
    alpha, beta, _ = fit_alpha_beta(np.full_like(S, 2 * (n - 1)), 2 * (n - 1) / n * S, secs)
    return {"alpha": alpha, "beta": beta, "n": n, "run": r}


# --8<-- [start:time]
def layer_time_rows(t: int, b: int, s: int, h: int, e: int = 2, alpha: float = ALPHA_ASSUMED) -> list[dict]:
    """TP communication per layer per micro-batch (4 ring all-reduces, nothing overlapped) on each link."""
    S = tp_allreduce_bytes(b, s, h, e)
    rows = []
    for name, gbps in links().items():
        beta = 1 / (gbps * 1e9)
        one = float(ring_allreduce_time(t, S, alpha, beta))
        rows.append({"link": name, "GBps": gbps, "S": S, "one_allreduce_s": one,
                     "layer_s": float(tp_comm_time_per_layer(t, b, s, h, alpha, beta, e=e)),
                     "layer_full_recompute_s": float(tp_comm_time_per_layer(t, b, s, h, alpha, beta, "full", e=e))})
    return rows
# --8<-- [end:time]


# --8<-- [start:ratio]
def comm_to_compute_ratio(t, s: int, h: int, flops_per_s: float, link_GBps: float):
    """Bandwidth term only: ρ(t) = T_comm/T_comp = 16(t−1)·F·β / (72h + 12s), independent of b.

    T_comm = 4 ring all-reduces of 2bsh bytes = 4·2(t−1)/t·2bsh·β; T_comp = (72bsh² + 12bs²h)/(t·F).
    """
    t = np.asarray(t, float)
    return 16 * (t - 1) * flops_per_s / (link_GBps * 1e9) / (72 * h + 12 * s)
# --8<-- [end:ratio]


def scaling_figure(ts=(1, 2, 4, 8, 16, 32, 64), shape=GPT3, gpu="H100 SXM") -> str:
    """Communication fraction of a GPT-3-shaped layer vs t on NVLink4 and on NDR (no overlap)."""
    fig, (ax1, ax2) = figures.new(8, 3.4, ncols=2)
    F = PEAK_FLOPS[gpu]
    t = np.array(ts, float)
    for name, gbps in list(links().items())[1::2]:  # NVLink4 and NDR
        sc = tp_scaling(t, shape["b"], shape["s"], shape["h"], F, ALPHA_ASSUMED, 1 / (gbps * 1e9))
        ax1.loglog(t, sc["compute_s"] * 1e3, "k-", lw=1)
        ax1.loglog(t[1:], sc["comm_s"][1:] * 1e3, "o-", ms=3, label=f"통신: {name.split(' (')[0]}")
        ax2.semilogx(t, sc["comm_fraction"], "o-", ms=3, label=name.split(" (")[0])
    ax1.loglog([], [], "k-", lw=1, label=f"계산 ({gpu} peak 가정)")
    ax1.set_xlabel("t")
    ax1.set_ylabel("layer 당 시간 (ms)")
    ax1.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.axvline(8, color="gray", ls=":", lw=1)
    ax2.set_xlabel("t (점선: 한 node 의 8 GPU)")
    ax2.set_ylabel("통신 / (계산 + 통신)")
    ax2.set_ylim(0, 1)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    return figures.svg(fig)


# --------------------------------------------------------------------------- measured (tp_bench)

def tp_runs():
    return results.load("tp_bench", kind="cpu")


def measured_counts(run) -> dict:
    """{case: {"forward": [(op, bytes)], "backward": [...], ...}} for the block cases."""
    out = {}
    for c in run.measurements["cases"]:
        if c["case"].startswith("block"):
            b, s, h = c["shapes"]["input"]  # the global input (an SP rank gets s/t of its rows)
            out[c["case"]] = {"t": c["t"], "b": b, "s": s, "h": h, "forward": [tuple(x) for x in c["forward_calls"]],
                              "backward": [tuple(x) for x in c["backward_calls"]], "diff": c["max_abs_diff"],
                              "grad_placements": c["grad_placements"]}
    return out


def ring_bytes_per_rank(calls, t: int) -> float:
    """Bytes one rank sends for these collectives under ring algorithms (Ch1-03)."""
    f = {"all_reduce": 2 * (t - 1) / t, "all_gather_into_tensor": (t - 1) / t, "reduce_scatter_tensor": (t - 1) / t}
    return sum(f[op] * nb for op, nb in calls)


__all__ = ["GPT3", "PEAK_FLOPS", "links", "cpu_fit", "layer_time_rows", "comm_to_compute_ratio", "scaling_figure",
           "tp_runs", "measured_counts", "ring_bytes_per_rank", "tp_allreduces_per_layer", "tp_allreduces_per_step",
           "tp_collectives_per_layer", "tp_allreduce_bytes", "ring_allgather_time", "layer_flops", "tp_scaling"]

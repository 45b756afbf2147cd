"""숨는 조건 (docs/thresholds.md): the book's "when does communication hide behind compute" results side by side.

Every threshold comes from the page that derives it; this module only evaluates them under one set of stated
assumptions (the A100-like GPU and the links that Ch5-04 and Ch5-06 assume) so that they can be read together:
- data parallel's AllReduce against the backward (Ch1-04 τ*_AR, Ch5-04 Theorem 5.4.6),
- ZeRO-3's AllGathers and ReduceScatters against forward and backward (Ch5-04 Theorem 5.4.6),
- ZeRO-Offload's PCIe transfers and CPU Adam against the step (Ch5-06 Theorem 5.6.5),
- tensor parallel's AllReduces against the layer's GEMMs (Ch3-05 ρ(t): added to the step unless the GEMMs are split to
  overlap them), which no micro-batch size changes,
- the pipeline's boundary send against the stage's forward (Ch4-01 experiment 5), which no token count changes either.
"""
from __future__ import annotations

import numpy as np

from snippets.ch3_tensor_parallel.d05_tp_communication_cost import comm_to_compute_ratio
from snippets.ch5_zero_sharding import d06_zero_offload_infinity as off
from snippets.ch5_zero_sharding.d04_zero_3 import ASSUMED_FLOPS, ASSUMED_LINKS, threshold_rows
from snippets.common import figures

NVLINK, IB = list(ASSUMED_LINKS.values())  # 240 GB/s in a node, 20 GB/s between nodes (assumed, Ch5-04)
N = 64  # 8 nodes × 8 GPUs
OFFLOAD_N = N  # ZeRO-Offload over the same 64 GPUs; each keeps Ch5-06's assumed 1/8 of its node's host
SHAPE = {"h": 8192, "s": 4096, "t": 8, "layers_per_stage": 10}  # a 70B-class layer, TP 8, 10 layers a stage
E = 2  # bytes per element (bf16)


def dp_zero3(n: int = N) -> dict[str, dict[str, float]]:
    """τ* of DP's AllReduce and of ZeRO-3, per link, from Ch5-04's threshold_rows (Theorem 5.4.6)."""
    out = {}
    for name, bw in (("NVLink", NVLINK), ("InfiniBand", IB)):
        row = next(r for r in threshold_rows(ns=(n,)) if r["W"] == bw)
        out[name] = {"dp": row["dp"], "zero3": row["zero3"]}
    return out


def offload(n: int = OFFLOAD_N) -> float:
    """τ* of ZeRO-Offload (Ch5-06 Theorem 5.6.5) with Ch5-06's assumed GPU, PCIe Gen4 and host share."""
    return off.breakeven_tokens(n=n)


def tp_ratio(link: float = NVLINK, shape: dict = SHAPE) -> float:
    """TP's T_comm / T_compute per layer (Ch3-05 ρ(t)): b and τ cancel, only t, h, s and the link remain."""
    return float(comm_to_compute_ratio(shape["t"], shape["s"], shape["h"], ASSUMED_FLOPS, link / 1e9))


def pp_ratio(link: float = IB, shape: dict = SHAPE) -> float:
    """The pipeline boundary's send over the stage's forward (Ch4-01 experiment 5's bandwidth part):
    e·F / ((24h + 4s)·(L/p)·BW); b and τ cancel."""
    return E * ASSUMED_FLOPS / ((24 * shape["h"] + 4 * shape["s"]) * shape["layers_per_stage"] * link)


def rows() -> list[list]:
    """The table: what moves, behind what it can hide, and the threshold under the stated assumptions."""
    d = dp_zero3()
    return [
        ["DP AllReduce", "backward", "τ ≥ τ*",
         f"{d['NVLink']['dp']:,.0f} / {d['InfiniBand']['dp']:,.0f} token", "Ch1-04, Ch5-04"],
        ["ZeRO-3 AllGather + ReduceScatter", "forward 와 backward", "τ ≥ τ₃*",
         f"{d['NVLink']['zero3']:,.0f} / {d['InfiniBand']['zero3']:,.0f} token", "Ch5-04"],
        [f"ZeRO-Offload 의 PCIe + CPU Adam (N = {OFFLOAD_N})", "step 전체 (update 를 한 step 늦출 때)", "τ ≥ τ*",
         f"{offload():,.0f} token", "Ch5-06"],
        [f"TP AllReduce (t = {SHAPE['t']}, h = {SHAPE['h']})", "GEMM 을 쪼개 겹칠 때만", "겹침 없으면 step 에 ρ 가 더해짐",
         f"ρ = {tp_ratio(NVLINK):.2f} / {tp_ratio(IB):.2f}", "Ch3-05"],
        [f"PP 경계 send (L/p = {SHAPE['layers_per_stage']})", "stage 의 forward", "비 ≤ 1, micro-batch 와 무관",
         f"{pp_ratio(NVLINK):.4f} / {pp_ratio(IB):.3f}", "Ch4-01"],
    ]


def curves(taus=None) -> dict[str, np.ndarray]:
    """T_comm / T_compute against τ (tokens per GPU per step) for each line of the figure."""
    taus = np.logspace(1, 6, 11) if taus is None else np.asarray(taus, float)  # straight lines on log-log
    d = dp_zero3()
    return {"tau": taus,
            "DP, NVLink": d["NVLink"]["dp"] / taus,
            "ZeRO-3, NVLink": d["NVLink"]["zero3"] / taus,
            "DP, InfiniBand": d["InfiniBand"]["dp"] / taus,
            "ZeRO-3, InfiniBand": d["InfiniBand"]["zero3"] / taus,
            f"ZeRO-Offload, N = {OFFLOAD_N}": offload() / taus,
            "TP t = 8, NVLink": np.full_like(taus, tp_ratio(NVLINK)),
            "TP t = 8, InfiniBand": np.full_like(taus, tp_ratio(IB)),
            "PP 경계, InfiniBand": np.full_like(taus, pp_ratio(IB))}


def figure() -> str:
    c = curves()
    fig, ax = figures.new(7.2, 4.2)
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.13, top=0.97)
    styles = {"DP, NVLink": dict(ls="-", lw=3, alpha=0.5), "ZeRO-3, NVLink": dict(ls="--", color="black"),
              "DP, InfiniBand": dict(ls="-", lw=3, alpha=0.5), "ZeRO-3, InfiniBand": dict(ls="--", color="dimgray"),
              f"ZeRO-Offload, N = {OFFLOAD_N}": dict(ls="-.", marker="o", markersize=3),
              "TP t = 8, NVLink": dict(ls=":"), "TP t = 8, InfiniBand": dict(ls=":"), "PP 경계, InfiniBand": dict(ls=(0, (1, 3)))}
    for name, y in c.items():
        if name != "tau":
            ax.loglog(c["tau"], y, label=name, **styles.get(name, {}))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.text(12, 0.7, "1 아래: 통신이 계산보다 짧음", fontsize=8)
    ax.set_xlabel("τ: GPU 당 step 당 token")
    ax.set_ylabel("T_comm / T_compute")
    ax.legend(fontsize=7, loc="lower left")
    return figures.svg(fig, tight=False)  # margins set above: one draw instead of two

"""Ch1-04 NCCL 과 NVLink 토폴로지: the code the page runs and the tests import.

Everything NCCL-specific below was read in the NCCL source, version 2.30.7 (NVIDIA/nccl commit
5067397c2676, makefiles/version.mk), and each constant names its file:
  src/graph/topo.h, src/graph/topo.cc   link bandwidths NCCL assigns when it builds its graph
  src/graph/paths.cc                    a path's bandwidth is the minimum over its links
  src/graph/search.cc                   ring/tree channel search (ncclTopoCompute, ncclTopoPrintGraph)
  src/graph/tuning.cc                   ncclTopoTuneModel (latency, bandwidth per algo×proto),
                                        ncclTopoGetAlgoTime (time = lat + bytes / bw)
  src/enqueue.cc                        topoGetAlgoInfo: the argmin over the cost table, per call
Link rates (per direction) are computed from vendor line rates in `link_rates`.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np

from snippets.common import alphabeta as ab

NCCL_SOURCE = {"version": "2.30.7", "commit": "5067397c2676d5aed50042fc39e5c8ee96eb0027",
               "repository": "https://github.com/NVIDIA/nccl"}


# --8<-- [start:linkrates]
# Line rates as the standards / vendors state them. Every rate is PER DIRECTION; a full-duplex
# link carries the same again in the other direction, and "bidirectional" totals add the two.
PCIE_GT_PER_LANE = {3: 8.0, 4: 16.0, 5: 32.0}   # GT/s per lane; Gen3-5 use 128b/130b encoding
NVLINK = {  # links per GPU, Gb/s per link per direction
    "NVLink3 (A100)": (12, 4 * 50.0),   # 4 differential pairs × 50 Gb/s each way per link
    "NVLink4 (H100)": (18, 200.0),      # 50 GB/s per link both ways together = 25 GB/s each way
}
IB_PORT_GBIT = {"HDR": 200.0, "NDR": 400.0}      # 4x port data rate, Gb/s per direction


def gbit_to_GBps(gbit: float) -> float:
    """Gb/s → GB/s (1 GB = 1e9 bytes, 8 bits per byte)."""
    return gbit / 8


def pcie_GBps(gen: int, lanes: int = 16) -> float:
    """Per-direction PCIe payload rate after 128b/130b line encoding (packet overhead ignored)."""
    return PCIE_GT_PER_LANE[gen] * lanes * 128 / 130 / 8


def nvlink_GBps(name: str) -> tuple[float, float]:
    """(per direction, bidirectional total) NVLink bandwidth of one GPU, GB/s."""
    links, gbit = NVLINK[name]
    per_dir = links * gbit_to_GBps(gbit)
    return per_dir, 2 * per_dir


def link_rates() -> list[dict]:
    rows = []
    for name in NVLINK:
        d, bi = nvlink_GBps(name)
        rows.append({"link": name, "per_direction": d, "bidirectional": bi})
    for gen in (4, 5):
        d = pcie_GBps(gen)
        rows.append({"link": f"PCIe Gen{gen} x16", "per_direction": d, "bidirectional": 2 * d})
    for name, gbit in IB_PORT_GBIT.items():
        d = gbit_to_GBps(gbit)
        rows.append({"link": f"InfiniBand {name} (1 port)", "per_direction": d, "bidirectional": 2 * d})
    return rows
# --8<-- [end:linkrates]


# --8<-- [start:ncclmodel]
# What NCCL 2.30.7 itself puts on the edges of its topology graph (GB/s, per direction).
SM80_NVLINK_BW = 20.0     # src/graph/topo.h, per NVLink of an A100
SM90_NVLINK_BW = 20.6     # src/graph/topo.h, per NVLink of an H100
SRP_QPI_BW = 22.0         # src/graph/topo.h, Sapphire Rapids socket-to-socket link
NCCL_PCI_GEN_SPEED = {3: 60, 4: 120, 5: 240}  # src/graph/topo.cc kvDictPciGen, ×100 Mb/s per lane


def nccl_pci_bw(gen: int, width: int = 16) -> float:
    """src/graph/topo.cc ncclTopoAddPci: bw = width * speed / 80.0."""
    return width * NCCL_PCI_GEN_SPEED[gen] / 80.0


def nccl_net_bw(mbps: float) -> float:
    """src/graph/topo.cc: net.bw = mbps / 8000.0 (the NIC's reported speed in Mb/s)."""
    return mbps / 8000.0


def nccl_model_rates() -> list[dict]:
    """Line-rate value next to NCCL's own edge value for the same link."""
    return [
        {"link": "NVLink3 ×12 (A100)", "line_rate": nvlink_GBps("NVLink3 (A100)")[0], "nccl": 12 * SM80_NVLINK_BW,
         "source": "topo.h SM80_NVLINK_BW × 12"},
        {"link": "NVLink4 ×18 (H100)", "line_rate": nvlink_GBps("NVLink4 (H100)")[0], "nccl": 18 * SM90_NVLINK_BW,
         "source": "topo.h SM90_NVLINK_BW × 18"},
        {"link": "PCIe Gen4 x16", "line_rate": pcie_GBps(4), "nccl": nccl_pci_bw(4), "source": "topo.cc width·speed/80"},
        {"link": "PCIe Gen5 x16", "line_rate": pcie_GBps(5), "nccl": nccl_pci_bw(5), "source": "topo.cc width·speed/80"},
        {"link": "InfiniBand NDR", "line_rate": gbit_to_GBps(IB_PORT_GBIT["NDR"]), "nccl": nccl_net_bw(400_000),
         "source": "topo.cc mbps/8000"},
    ]
# --8<-- [end:ncclmodel]


# --8<-- [start:topologies]
def _link(g: nx.DiGraph, u: str, v: str, cap: float, kind: str) -> None:
    """A full-duplex link: two directed edges, each with the per-direction capacity (GB/s)."""
    g.add_edge(u, v, cap=cap, kind=kind)
    g.add_edge(v, u, cap=cap, kind=kind)


def nvswitch_node(g: nx.DiGraph | None = None, node: int = 0, gpus: int = 8, nvlink: float | None = None,
                  nics_per_node: int = 0, nic: float | None = None, pcie: float | None = None) -> nx.DiGraph:
    """DGX H100-like node: every GPU's 18 NVLinks go to the NVSwitch fabric, modelled as one
    non-blocking switch; optionally NICs, each behind a PCIe Gen5 x16 link to its GPU(s)."""
    g = nx.DiGraph() if g is None else g
    nvlink = nvlink_GBps("NVLink4 (H100)")[0] if nvlink is None else nvlink
    nic = gbit_to_GBps(IB_PORT_GBIT["NDR"]) if nic is None else nic
    pcie = pcie_GBps(5) if pcie is None else pcie
    sw = f"n{node}/NVS"
    g.add_node(sw, kind="nvswitch", node=node)
    for i in range(gpus):
        gpu = f"n{node}/GPU{i}"
        g.add_node(gpu, kind="gpu", node=node, index=i)
        _link(g, gpu, sw, nvlink, "NVLink")
    if nics_per_node:
        per = gpus // nics_per_node
        for j in range(nics_per_node):
            n = f"n{node}/NIC{j}"
            g.add_node(n, kind="nic", node=node, index=j)
            for i in range(j * per, (j + 1) * per):
                _link(g, f"n{node}/GPU{i}", n, pcie, "PCIe")
            _link(g, n, "IB", nic, "InfiniBand")
    return g


def pcie_node(gpus: int = 8, pcie: float | None = None, socket_link: float = SRP_QPI_BW) -> nx.DiGraph:
    """Two CPU sockets, one PCIe Gen4 switch under each, four GPUs per switch, no NVLink.

    The socket-to-socket link is given NCCL's own model value for Sapphire Rapids (topo.h
    SRP_QPI_BW): the line rate of UPI is not a number this page derives.
    """
    g = nx.DiGraph()
    pcie = pcie_GBps(4) if pcie is None else pcie
    half = gpus // 2
    for s in range(2):
        cpu, sw = f"CPU{s}", f"PCIeSW{s}"
        g.add_node(cpu, kind="cpu", node=0, index=s)
        g.add_node(sw, kind="pcie_switch", node=0, index=s)
        _link(g, sw, cpu, pcie, "PCIe")
        for i in range(s * half, (s + 1) * half):
            g.add_node(f"GPU{i}", kind="gpu", node=0, index=i)
            _link(g, f"GPU{i}", sw, pcie, "PCIe")
    _link(g, "CPU0", "CPU1", socket_link, "UPI")
    return g


def multi_node(nodes: int = 2, gpus: int = 8, nics_per_node: int = 8, **kw) -> nx.DiGraph:
    """`nodes` DGX H100-like nodes whose NICs all reach one non-blocking InfiniBand switch."""
    g = nx.DiGraph()
    g.add_node("IB", kind="ib_switch", node=-1)
    for n in range(nodes):
        nvswitch_node(g, n, gpus, nics_per_node=nics_per_node, **kw)
    return g


def gpus_of(g: nx.DiGraph, node: int | None = None) -> list[str]:
    gs = [v for v, d in g.nodes(data=True) if d["kind"] == "gpu" and (node is None or d["node"] == node)]
    return sorted(gs, key=lambda v: (g.nodes[v]["node"], g.nodes[v]["index"]))
# --8<-- [end:topologies]


# --8<-- [start:rings]
def route(g: nx.DiGraph, u: str, v: str) -> list[tuple[str, str]]:
    """The directed edges a u→v transfer crosses: the path with the least Σ 1/capacity
    (fast links preferred, as NCCL prefers better path types)."""
    path = nx.shortest_path(g, u, v, weight=lambda a, b, d: 1.0 / d["cap"])
    return list(zip(path, path[1:]))


def ring_loads(g: nx.DiGraph, rings: list[list[str]]) -> Counter:
    """ℓ(e): how many ring hops (over all rings) are routed over directed edge e."""
    load = Counter()
    for ring in rings:
        for u, v in zip(ring, ring[1:] + ring[:1]):
            load.update(route(g, u, v))
    return load


def ring_bottleneck(g: nx.DiGraph, rings: list[list[str]]) -> dict:
    """Bus bandwidth of k rings that each carry S/k: B = min_e k·c(e)/ℓ(e) (Theorem 1.4.5)."""
    k = len(rings)
    load = ring_loads(g, rings)
    ratio = {e: k * g.edges[e]["cap"] / l for e, l in load.items()}
    e_min = min(ratio, key=lambda e: (ratio[e], e))
    ties = sorted(e for e in ratio if ratio[e] <= ratio[e_min] * (1 + 1e-9))
    return {"B": ratio[e_min], "edge": e_min, "kind": g.edges[e_min]["kind"], "load": load[e_min],
            "cap": g.edges[e_min]["cap"], "k": k, "N": len(rings[0]), "ties": ties}


def rotated_rings(g: nx.DiGraph, k: int) -> list[list[str]]:
    """k rings over all GPUs: ring c visits every node's GPUs starting at local GPU c (mod gpus),
    so consecutive nodes are joined by different GPUs (and NICs) in different rings."""
    nodes = sorted({d["node"] for _, d in g.nodes(data=True) if d["kind"] == "gpu"})
    rings = []
    for c in range(k):
        ring = []
        for n in nodes:
            local = gpus_of(g, n)
            ring += local[c % len(local):] + local[:c % len(local)]
        rings.append(ring)
    return rings
# --8<-- [end:rings]


# Per-step latency used for the α of each topology: NCCL's Simple-protocol ring latencies per
# hop in src/graph/tuning.cc (hwLatencies: NVLINK 3.4, PCI 5.7, NET 14.0 µs).
HOP_LATENCY_US = {"nvlink": 3.4, "pci": 5.7, "net": 14.0}


# --8<-- [start:cases]
def topology_cases() -> list[dict]:
    """The three machines of experiment 1 and the ring sets NCCL-like channels would form."""
    h100 = nvswitch_node()
    pcie = pcie_node()
    two = multi_node(2, nics_per_node=8)
    two_pair = multi_node(2, nics_per_node=4)
    return [
        {"name": "DGX H100-like, NVSwitch", "graph": h100, "rings": rotated_rings(h100, 1), "hw": "nvlink"},
        {"name": "PCIe node, 2 sockets", "graph": pcie, "rings": rotated_rings(pcie, 1), "hw": "pci"},
        {"name": "2 nodes, 1 NIC/GPU, 1 ring", "graph": two, "rings": rotated_rings(two, 1), "hw": "net"},
        {"name": "2 nodes, 1 NIC/GPU, 8 rings", "graph": two, "rings": rotated_rings(two, 8), "hw": "net"},
        {"name": "2 nodes, 1 NIC/2 GPUs, 8 rings", "graph": two_pair, "rings": rotated_rings(two_pair, 8), "hw": "net"},
    ]


def alpha_effective(n: int, nodes: int, hw: str) -> float:
    """Mean per-step latency (s) of a ring AllReduce: 2(N−1) steps, 2(nodes−1) of them between
    nodes (the split tuning.cc uses), the others at the intra-node hop latency."""
    steps = 2 * (n - 1)
    inter = 2 * (nodes - 1) if nodes > 1 else 0
    intra_lat = HOP_LATENCY_US["nvlink" if hw == "net" else hw]
    lat = (steps - inter) * intra_lat + inter * HOP_LATENCY_US["net"]
    return lat / steps * 1e-6


def evaluate_case(case: dict, sizes=(1 << 20, 1 << 30)) -> dict:
    g, rings = case["graph"], case["rings"]
    b = ring_bottleneck(g, rings)
    n = b["N"]
    nodes = len({g.nodes[v]["node"] for v in rings[0]})
    alpha = alpha_effective(n, nodes, case["hw"])
    beta = 1 / (b["B"] * 1e9)
    out = {**b, "name": case["name"], "nodes": nodes, "alpha": alpha}
    for s in sizes:
        t = float(ab.ring_allreduce_time(n, s, alpha, beta))
        out[s] = {"time": t, "algbw": s / t / 1e9, "busbw": s / t * ab.BUSBW_FACTOR["all_reduce"](n) / 1e9}
    return out
# --8<-- [end:cases]


def topology_figure(cases: list[dict]) -> str:
    """The three machine graphs; every link that attains the ring set's bottleneck in red."""
    from snippets.common import figures

    picks = [cases[0], cases[1], cases[3]]
    fig, axes = figures.new(12, 4.2, ncols=3)
    colors = {"gpu": "#76b900", "nvswitch": "#1f77b4", "pcie_switch": "#9467bd", "cpu": "#7f7f7f",
              "nic": "#ff7f0e", "ib_switch": "#d62728"}
    for ax, case in zip(axes, picks):
        g = case["graph"]
        pos = _positions(g)
        und = g.to_undirected()
        b = ring_bottleneck(g, case["rings"])
        bad = {tuple(sorted(e)) for e in b["ties"]}
        ecol = ["red" if tuple(sorted(e)) in bad else "#999999" for e in und.edges]
        ewid = [2.5 if tuple(sorted(e)) in bad else 0.8 for e in und.edges]
        nx.draw_networkx_edges(und, pos, ax=ax, edge_color=ecol, width=ewid)
        nx.draw_networkx_nodes(und, pos, ax=ax, node_size=120,
                               node_color=[colors[und.nodes[v]["kind"]] for v in und.nodes])
        labels = {v: v.split("/")[-1].replace("GPU", "G").replace("NIC", "N") for v in und.nodes
                  if und.nodes[v]["kind"] != "gpu" or len(und) < 30}
        nx.draw_networkx_labels(und, pos, labels=labels, ax=ax, font_size=6)
        ax.set_title(f"{case['name']}\nBW = {b['B']:.1f} GB/s ({b['kind']}, 빨강)", fontsize=9)
        ax.set_axis_off()
    return figures.svg(fig)


def _positions(g: nx.DiGraph) -> dict:
    pos = {}
    for v, d in g.nodes(data=True):
        kind, node = d["kind"], d["node"]
        x0 = 0 if node < 0 else node * 10
        if kind == "gpu":
            pos[v] = (x0 + d["index"], 0)
        elif kind == "nvswitch":
            pos[v] = (x0 + 3.5, 1.5)
        elif kind == "nic":
            pos[v] = (x0 + d["index"] * (8 / max(1, _count(g, "nic", node))) + 0.5, -1.5)
        elif kind == "ib_switch":
            pos[v] = (8.5, -3.0)
        elif kind == "pcie_switch":
            pos[v] = (1.5 + 4 * d["index"], 1.5)
        elif kind == "cpu":
            pos[v] = (1.5 + 4 * d["index"], 3.0)
    return pos


def _count(g, kind, node):
    return sum(1 for _, d in g.nodes(data=True) if d["kind"] == kind and d["node"] == node)


# --8<-- [start:select]
# A SIMPLIFIED version of NCCL's tuner (src/graph/tuning.cc, ncclTopoTuneModel), AllReduce only,
# algorithms Ring and Tree, protocols LL / LL128 / Simple. Constants are NCCL's defaults (µs);
# what is left out is listed on the page (per-channel caps, tree correction factors, NVLS,
# CollNet, PAT, the ring "plateau" factor, the tuner plugin).
PROTOS = ("LL", "LL128", "Simple")
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}          # baseLatencies
HW_LAT = {                                                                  # hwLatencies
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
NET_OVERHEAD_US = 1.0  # getNetOverhead on x86 Intel; ×3 for Simple


def proto_factor(algo: str, proto: str, nodes: int) -> float:
    """busBw refinements of ncclTopoTuneModel for AllReduce (caps left out)."""
    if algo == "ring":
        return {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}[proto]
    f = 0.92                                     # tree AllReduce
    if proto == "LL":
        f *= 1 / 3.8
    if proto == "LL128":
        f *= 7 / 9 if nodes == 1 else 120 / 128
    return f


def model_cost(algo: str, proto: str, nodes: int, ppn: int, bus_GBps: float, intra: str = "nvlink"):
    """(latency µs, algorithm bandwidth GB/s) of one algo×proto, as ncclTopoTuneModel builds them."""
    n = nodes * ppn
    p = PROTOS.index(proto)
    nsteps = 2 * (n - 1)
    busbw = bus_GBps * proto_factor(algo, proto, nodes)
    algbw = busbw * (n / nsteps if algo == "ring" else 0.5)   # "Convert bus BW to algorithm BW"
    intra_lat = HW_LAT[intra][algo][p]
    inter_lat = HW_LAT["net"]["tree" if ppn == 1 else algo][p]
    lat = BASE_LAT[algo][p]
    if algo == "ring":
        n_inter = 2 * (nodes - 1) if nodes > 1 else 0
        if nodes > 1:
            intra_lat = max(intra_lat, NET_OVERHEAD_US * (3 if proto == "Simple" else 1))
        lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
    else:
        lat += 2 * ((ppn - 1) * intra_lat + int(math.log2(nodes)) * inter_lat)
    return lat, algbw


def predicted_times(s, nodes: int, ppn: int = 8, bus_GBps: float = 400.0, intra: str = "nvlink") -> dict:
    """time(µs) = lat + S/(1000·bw) for every algo×proto (ncclTopoGetAlgoTime, without the
    tree correction factors); S in bytes."""
    s = np.asarray(s, dtype=float)
    out = {}
    for algo in ("tree", "ring"):
        for proto in PROTOS:
            lat, bw = model_cost(algo, proto, nodes, ppn, bus_GBps, intra)
            out[(algo, proto)] = lat + s / (1000 * bw)
    return out


def select(s, nodes: int, ppn: int = 8, bus_GBps: float = 400.0, intra: str = "nvlink") -> list[tuple[str, str]]:
    """The pair with the smallest predicted time, for each size (topoGetAlgoInfo's argmin)."""
    times = predicted_times(s, nodes, ppn, bus_GBps, intra)
    keys = list(times)
    stack = np.vstack([np.atleast_1d(times[k]) for k in keys])
    return [keys[i] for i in stack.argmin(axis=0)]


def switch_points(nodes: int, ppn: int = 8, bus_GBps: float = 400.0, intra: str = "nvlink",
                  lo: float = 2 ** 6, hi: float = 2 ** 34) -> list[tuple[float, tuple, tuple]]:
    """Sizes at which the selected pair changes, found exactly on the lower envelope of the
    affine costs (no grid): returns (S, pair below, pair above)."""
    costs = {k: model_cost(*k, nodes, ppn, bus_GBps, intra) for k in
             [(a, p) for a in ("tree", "ring") for p in PROTOS]}
    t = lambda k, s: costs[k][0] + s / (1000 * costs[k][1])
    cur, s, out = min(costs, key=lambda k: t(k, lo)), lo, []
    while True:
        nxt = None
        for k, (lat, bw) in costs.items():
            slope_cur, slope_k = 1 / (1000 * costs[cur][1]), 1 / (1000 * bw)
            if slope_k < slope_cur:
                x = (lat - costs[cur][0]) / (slope_cur - slope_k)
                if x > s and (nxt is None or x < nxt[0]):
                    nxt = (x, k)
        if nxt is None or nxt[0] > hi:
            return out
        out.append((nxt[0], cur, nxt[1]))
        cur, s = nxt[1], nxt[0]
# --8<-- [end:select]


def selection_table(sizes, node_counts, bus_single: float, bus_multi: float, ppn: int = 8) -> list[list[str]]:
    """Winner per (S, nodes); one node uses the NVSwitch ring's B, several nodes the NIC-bound B."""
    rows = []
    for s in sizes:
        row = [human_bytes(s)]
        for nodes in node_counts:
            a, p = select([s], nodes, ppn, bus_single if nodes == 1 else bus_multi)[0]
            row.append(f"{a}/{p}")
        rows.append(row)
    return rows


def selection_figure(node_counts, bus_single: float, bus_multi: float, ppn: int = 8) -> str:
    """Predicted time of every algo×proto divided by the minimum: the chosen pair sits at 1."""
    from snippets.common import figures

    sizes = np.logspace(3, 10, 300)
    fig, axes = figures.new(11, 3.8, ncols=len(node_counts), sharey=True)
    for ax, nodes in zip(np.atleast_1d(axes), node_counts):
        bus = bus_single if nodes == 1 else bus_multi
        times = predicted_times(sizes, nodes, ppn, bus)
        env = np.min(np.vstack(list(times.values())), axis=0)
        for (a, p), t in times.items():
            ax.semilogx(sizes, t / env, "-" if a == "ring" else "--", lw=1.2, label=f"{a}/{p}",
                        color=f"C{PROTOS.index(p)}")
        for x, _, _ in switch_points(nodes, ppn, bus, lo=sizes[0], hi=sizes[-1]):
            ax.axvline(x, color="k", lw=0.6, ls=":")
        ax.set_ylim(0.95, 4)
        ax.set_xlabel("S (bytes)")
        ax.set_title(f"{nodes} node × {ppn} GPU (N = {nodes * ppn}), BW = {bus:g} GB/s", fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("예측 시간 / 최솟값")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    return figures.svg(fig)


def human_bytes(s: float) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if s >= 1 << k:
            return f"{s / (1 << k):.3g} {unit}"
    return f"{s:.3g} B"


# --8<-- [start:busbw]
def bandwidth_rows(result, op: str) -> list[dict]:
    """algbw = S/t and busbw = algbw·factor(N) (nccl-tests), recomputed from the median time."""
    n = result.hardware["world_size"]
    rows = []
    for m in result.measurements:
        if m["op"] != op:
            continue
        t = m["time_us_median"] * 1e-6
        algbw = m["bytes"] / t / 1e9
        rows.append({"bytes": m["bytes"], "time_us": m["time_us_median"], "algbw": algbw,
                     "busbw": algbw * ab.BUSBW_FACTOR[op](n), "stored_busbw": m["busbw_GBps"]})
    return rows


def ring_busbw_model(n: int, s, alpha: float, beta: float):
    """busbw of a ring AllReduce in the α-β model: factor·S/T = 1/(β + Nα/S) (Theorem 1.4.8)."""
    s = np.asarray(s, dtype=float)
    return ab.BUSBW_FACTOR["all_reduce"](n) * s / ab.ring_allreduce_time(n, s, alpha, beta)


def fit_allreduce(result) -> tuple[float, float]:
    """α, β of the ring cost T = 2(N−1)α + 2(N−1)/N·Sβ fitted to a run's all_reduce times."""
    n = result.hardware["world_size"]
    rows = [m for m in result.measurements if m["op"] == "all_reduce"]
    s = np.array([m["bytes"] for m in rows], dtype=float)
    t = np.array([m["time_us_median"] for m in rows]) * 1e-6
    alpha, beta, _ = ab.fit_alpha_beta(np.full_like(s, 2 * (n - 1)), 2 * (n - 1) / n * s, t)
    return alpha, beta
# --8<-- [end:busbw]


def busbw_figure(runs, title: str = "") -> str:
    from snippets.common import figures

    fig, ax = figures.new(7, 4)
    for r, color in zip(runs, ["C0", "C1", "C2", "C3", "C4"]):
        n = r.hardware["world_size"]
        rows = bandwidth_rows(r, "all_reduce")
        s = np.array([x["bytes"] for x in rows], dtype=float)
        ax.loglog(s, [x["busbw"] for x in rows], "o", color=color, ms=4, label=f"측정 busbw, N={n}")
        ax.loglog(s, [x["algbw"] for x in rows], "x", color=color, ms=4, alpha=0.6, label=f"측정 algbw, N={n}")
        alpha, beta = fit_allreduce(r)
        ax.loglog(s, ring_busbw_model(n, s, alpha, beta) / 1e9, "-", color=color, lw=1,
                  label=f"1/(β+Nα/S), N={n}")
    ax.set_xlabel("메시지 크기 S (bytes)")
    ax.set_ylabel("GB/s")
    ax.set_title(title or "all_reduce: algbw 와 busbw", fontsize=9)
    ax.legend(fontsize=7)
    return figures.svg(fig)


BUSBW_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast")


def busbw_readings(plat) -> list[str]:
    """The page's readings of one hardware's sweep, as sentences: algbw against N (Theorem 1.4.8),
    busbw across N and across collectives, and where busbw reaches half of 1/β."""
    runs = plat.runs
    out = []
    if len(runs) >= 2:
        a, b = runs[0], runs[-1]
        na, nb = a.hardware["world_size"], b.hardware["world_size"]
        la, lb = bandwidth_rows(a, "all_reduce")[-1], bandwidth_rows(b, "all_reduce")[-1]
        ideal = ab.BUSBW_FACTOR["all_reduce"](na) / ab.BUSBW_FACTOR["all_reduce"](nb)
        out.append(f"가장 큰 S 의 all_reduce: algbw 비 N={nb}/N={na} 는 {lb['algbw'] / la['algbw']:.2f} "
                   f"(busbw 가 같다면 {ideal:.2f}), busbw 비는 {lb['busbw'] / la['busbw']:.2f} (1 이면 busbw 가 N 을 지움).")
        over = [r.hardware["world_size"] for r in runs
                if not plat.is_gpu and r.hardware["world_size"] > r.hardware["cpu_count"]]
        if over:
            out.append(f"N = {', '.join(map(str, over))} 은 core {runs[0].hardware['cpu_count']} 개에 process 를 더 많이 "
                       "올린 측정이라 scheduler 대기가 시간에 들어 있습니다.")
        elif plat.is_gpu:
            out.append("rank 마다 GPU 가 하나라 과다 구독이 없습니다: busbw 가 N 에 따라 달라진다면 링크나 알고리즘이 달라진 것입니다.")
    else:
        out.append(f"이 하드웨어에는 N = {runs[0].hardware['world_size']} 측정 하나뿐이라 N 사이의 비교는 없습니다.")
    for r in runs:
        n = r.hardware["world_size"]
        last = {op: bandwidth_rows(r, op)[-1]["busbw"] for op in BUSBW_OPS if bandwidth_rows(r, op)}
        hi, lo = max(last, key=last.get), min(last, key=last.get)
        alpha, beta = fit_allreduce(r)
        half = f"≈ {human_bytes(n * alpha / beta)}" if alpha > 0 and beta > 0 else "(fit 의 α 또는 β 가 양수가 아님)"
        out.append(f"N = {n}: 가장 큰 S 에서 busbw 가 가장 높은 collective {hi} ({last[hi]:.3g} GB/s), 가장 낮은 "
                   f"{lo} ({last[lo]:.3g} GB/s); ring fit 으로 busbw 가 1/β 의 절반이 되는 S = Nα/β {half}.")
    return out


# --8<-- [start:busbw-tab]
def busbw_tab(plat) -> str:
    """One hardware: Definition 1.4.4 re-applied to every world size it measured (largest S of each
    collective), the stored busbw checked against the recomputed one, the readings, and the figure."""
    from snippets import results

    rows, worst = [], 0.0
    for r in plat.runs:
        n = r.hardware["world_size"]
        for op in BUSBW_OPS:
            br = bandwidth_rows(r, op)
            if not br:
                continue
            worst = max(worst, max(abs(x["busbw"] - x["stored_busbw"]) / x["stored_busbw"] for x in br))
            x = br[-1]
            rows.append([n, op, f"{ab.BUSBW_FACTOR[op](n):.3f}", human_bytes(x["bytes"]), f"{x['time_us'] / 1e3:.3g} ms",
                         f"{x['algbw']:.3f}", f"{x['busbw']:.3f}"])
    unit = "GPUs" if plat.is_gpu else "processes"
    backend = plat.runs[0].hardware["backend"]
    table = results.markdown_table([f"N ({unit})", "collective", "κ(N)", "S", "median t", "algbw GB/s", "busbw GB/s"], rows)
    readings = "\n".join(f"- {t}" for t in busbw_readings(plat))
    fig = busbw_figure(plat.runs, f"{backend} all_reduce ({'GPU' if plat.is_gpu else 'CPU'}): algbw 와 busbw")
    return (f"{table}\n\n파일의 busbw 와 다시 계산한 busbw 의 최대 상대 차이: {worst:.1e}\n\n{readings}\n\n{fig}")
# --8<-- [end:busbw-tab]


# --8<-- [start:logformats]
# The INFO lines that INIT, GRAPH and TUNING print, as format strings in NCCL 2.30.7.
LOG_FORMATS = [
    ("INIT", "src/init.cc", "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"),
    ("GRAPH", "src/graph/search.cc", "Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d"),
    ("GRAPH", "src/graph/search.cc", "%2d : [NET/..] GPU/<id> GPU/<id> … [NET/..]"),
    ("INIT", "src/graph/rings.cc", "Channel %02d/%02d : <rank> <rank> …"),
    ("GRAPH", "src/init.cc", "Ring %02d : %d -> %d -> %d"),
    ("INIT", "src/init.cc", "Trees [%d] %d/%d/%d->%d->%d …"),
    ("INIT, P2P", "src/transport/p2p.cc", "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s"),
    ("INIT, NET", "src/transport/net.cc", "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d"),
    ("TUNING", "src/graph/tuning.cc", "<함수 이름> 뒤에 algo×proto 칸마다 %8.1f/%6.1f (latency µs / bandwidth GB/s)"),
    ("TUNING", "src/enqueue.cc", "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"),
]
PATTERNS = {1: "BALANCED_TREE", 2: "SPLIT_TREE", 3: "TREE", 4: "RING", 5: "NVLS", 6: "COLLNET_DIRECT"}  # graph.h
PATH_TYPES = {  # src/include/graph.h, in order of increasing distance
    "LOC": "자기 자신", "NVL": "NVLink 직결", "NVB": "중간 GPU 를 거친 NVLink", "C2C": "C2C (Grace)",
    "PIX": "PCIe bridge 하나", "PXB": "PCIe bridge 여럿 (host bridge 없이)", "P2C": "GPU–C2C–CPU–PCIe–NIC",
    "PXN": "다른 GPU 를 거쳐 NIC", "PHB": "PCIe host bridge (CPU) 경유", "SYS": "socket 간 (QPI/UPI) 경유",
    "NET": "network", "DIS": "연결 없음",
}

RE_ALGO = re.compile(r"(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")
RE_PATTERN = re.compile(r"Pattern (\d+), crossNic (\d+), nChannels (\d+), bw ([\d.]+)/([\d.]+), "
                        r"type (\w+)/(\w+), sameChannels (\d+)")
RE_CHANNEL = re.compile(r"NCCL INFO Channel (\d+)/(\d+) :((?: +\d+)+)\s*$")
RE_RING = re.compile(r"NCCL INFO Ring (\d+) : (\d+) -> (\d+) -> (\d+)")
RE_COMM = re.compile(r"rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)")


def parse_nccl_log(lines) -> dict:
    """Pull the ring orders, graph searches and per-call algorithm choices out of INFO lines.
    Lines that match nothing are ignored, so other NCCL versions degrade gracefully."""
    out = {"comms": [], "patterns": [], "channels": [], "rings": [], "algos": []}
    for line in lines:
        if m := RE_ALGO.search(line):
            out["algos"].append({"func": m[1], "bytes": int(m[2]), "algo": m[3], "proto": m[4],
                                 "channels": (int(m[5]), int(m[6]))})
        elif m := RE_PATTERN.search(line):
            out["patterns"].append({"pattern": PATTERNS.get(int(m[1]), m[1]), "crossNic": int(m[2]),
                                    "nChannels": int(m[3]), "bwIntra": float(m[4]), "bwInter": float(m[5]),
                                    "typeIntra": m[6], "typeInter": m[7], "sameChannels": int(m[8])})
        elif m := RE_CHANNEL.search(line):
            out["channels"].append({"channel": int(m[1]), "of": int(m[2]), "order": [int(x) for x in m[3].split()]})
        elif m := RE_RING.search(line):
            out["rings"].append({"channel": int(m[1]), "prev": int(m[2]), "rank": int(m[3]), "next": int(m[4])})
        elif m := RE_COMM.search(line):
            out["comms"].append({"rank": int(m[1]), "nRanks": int(m[2]), "nNodes": int(m[3]),
                                 "localRanks": int(m[4])})
    return out
# --8<-- [end:logformats]


CAPTURE_PROGRAM = "nccl_debug_capture"
CAPTURE_COMMAND = "torchrun --nproc_per_node=8 gpu_runs/nccl_debug_capture.py"


# --8<-- [start:capture]
def capture_runs(folder: Path | None = None) -> list:
    """Every committed NCCL_DEBUG capture. The program refuses to run without CUDA and NCCL, so every
    file here is a GPU result (one per GPU model and node shape)."""
    from snippets import results

    folder = Path(folder) if folder else results.RESULTS / CAPTURE_PROGRAM
    return [results.read(p) for p in sorted(folder.glob("*.json"))]


def capture_status(folder: Path | None = None) -> str:
    """The box at the head of experiment 4, written from what the repository holds (HTML)."""
    from snippets import results

    runs = capture_runs(folder)
    if not runs:
        return results.md_to_html(
            '!!! danger "이 판에는 GPU 로그가 없습니다"\n'
            "    이 판의 저장소에는 `gpu_runs/results/nccl_debug_capture/` 에 결과 파일이 없습니다. 그래서 이 페이지는 NCCL 로그를\n"
            "    **한 줄도 지어내지 않습니다.** 아래 표는 NCCL 소스에 있는 **format 문자열** 이고, 로그 자체는\n"
            "    `gpu_runs/nccl_debug_capture.py` 가 GPU 에서 잡아 커밋한 결과 파일이 있을 때만 이 실험 끝의 cell 에 나타납니다.")
    labels = ", ".join(f"{r.hardware['gpu_count']}× {r.hardware['gpu_name']} (NCCL {r.data['versions']['nccl']}, "
                       f"commit `{r.data['git']['commit'][:12]}`)" for r in runs)
    synthetic = [r for r in runs if r.data["command"].startswith("synthetic")]
    note = ("\n    그 가운데 " + ", ".join(f"`{r.path.name}`" for r in synthetic) + " 는 NCCL 이 쓴 로그가 아니라 시험용으로 "
            "format 문자열에서 만든 **합성 fixture** 입니다 (provenance 의 명령).") if synthetic else ""
    return results.md_to_html(
        f'!!! info "이 판의 NCCL 로그: 결과 파일 {len(runs)} 개"\n'
        f"    `gpu_runs/nccl_debug_capture.py` 가 잡은 로그가 있습니다: {labels}. 아래 표는 NCCL 소스의 format 문자열이고,\n"
        f"    잡은 로그와 그 해석은 이 실험 끝의 cell 이 하드웨어마다 보여 줍니다.{note}")


def captured_log(folder: Path | None = None) -> str:
    """Every capture, one tab per GPU hardware (HTML), or how to make one when there is none."""
    from snippets import results

    runs = capture_runs(folder)
    if not runs:
        return results.md_to_html(
            "이 판의 저장소에는 `gpu_runs/results/nccl_debug_capture/` 에 결과 파일이 **없습니다**: GPU 에서 잡은 "
            "NCCL 로그가 아직 없다는 뜻이며, 그래서 이 페이지는 로그를 한 줄도 보여주지 않습니다. NCCL 이 있는 GPU "
            f"node 에서 `{CAPTURE_COMMAND}` 를 실행하고 결과 파일을 커밋하면, 다음 빌드에서 이 자리에 그 로그와 "
            "해석이 나타납니다.")
    return results.hardware_tabs(runs, lambda plat: "\n\n".join(
        render_capture(r.data) + "\n\n" + capture_checks(r.data) for r in plat.runs))
# --8<-- [end:capture]


def render_capture(data: dict, max_lines: int = 40) -> str:
    """The head of rank 0's log: the ring / graph / tuning lines, as captured."""
    m = data["measurements"]
    lines = [ln for rank in m["logs"] if rank["rank"] == 0 for ln in rank["lines"]]
    keep = [ln for ln in lines if any(k in ln for k in ("Pattern ", "Channel ", "Ring ", "Bytes -> Algo", "Trees"))]
    out = [f"**{data['hardware']['gpu_count']}× {data['hardware']['gpu_name']}, NCCL {data['versions'].get('nccl')}**", "",
           f'??? example "rank 0 의 로그에서 ring/graph/tuning 줄 (처음 {min(max_lines, len(keep))} 줄 / {len(keep)} 줄)"',
           "", "    ```text"]
    out += ["    " + ln for ln in keep[:max_lines]] + ["    ```", ""]
    return "\n".join(out)


def ring_agreement(parsed: dict) -> tuple[int, int]:
    """How many `Ring c : prev -> r -> next` lines (every rank) name the neighbours that rank 0's
    `Channel c/k : order` line gives r: (agreeing, compared)."""
    orders = {c["channel"]: c["order"] for c in parsed["channels"]}
    ok = total = 0
    for ring in parsed["rings"]:
        order = orders.get(ring["channel"])
        if not order or ring["rank"] not in order:
            continue
        i = order.index(ring["rank"])
        total += 1
        ok += (ring["prev"], ring["next"]) == (order[i - 1], order[(i + 1) % len(order)])
    return ok, total


def capture_checks(data: dict) -> str:
    """What the page reads from one capture: the communicator against the results file, the graph
    searches and tuning's busBw = nChannels × bw, the ring orders (a permutation each, and every rank's
    Ring line agreeing with them), and each call's algorithm against experiment 2's simplified model."""
    m = data["measurements"]
    parsed = parse_nccl_log([ln for rank in m["logs"] for ln in rank["lines"]])
    rank0 = parse_nccl_log([ln for rank in m["logs"] if rank["rank"] == 0 for ln in rank["lines"]])
    n = data["hardware"]["world_size"]
    out = []
    comm = rank0["comms"][0] if rank0["comms"] else None
    if comm:
        out.append(f"- communicator (rank 0 의 INIT 줄): nRanks {comm['nRanks']}, nNodes {comm['nNodes']}, localRanks "
                   f"{comm['localRanks']}; results 파일의 world size {n}, nnodes {data['hardware']['nnodes']} — "
                   f"{'같음' if (comm['nRanks'], comm['nNodes']) == (n, data['hardware']['nnodes']) else '**다름**'}.")
    nodes = comm["nNodes"] if comm else data["hardware"]["nnodes"]
    if rank0["patterns"]:
        out += ["", "| 그래프 | nChannels | bw (node 안 / 사이, GB/s) | type | nChannels × bw (GB/s) |", "|---|---:|---:|---|---:|"]
        for g in rank0["patterns"]:
            bw = g["bwIntra"] if nodes <= 2 else g["bwInter"]
            out.append(f"| {g['pattern']} | {g['nChannels']} | {g['bwIntra']:g} / {g['bwInter']:g} | "
                       f"{g['typeIntra']}/{g['typeInter']} | {g['nChannels'] * bw:g} |")
    if rank0["channels"]:
        perms = sum(sorted(c["order"]) == list(range(n)) for c in rank0["channels"])
        ok, total = ring_agreement(parsed)
        out += ["", f"- ring channel {len(rank0['channels'])} 개 (rank 0 의 `Channel c/k` 줄): 모든 rank 를 한 번씩 도는 순서 "
                f"{perms} / {len(rank0['channels'])}; 모든 rank 의 `Ring` 줄 {total} 개 가운데 그 순서의 이웃과 같은 줄 {ok}."]
    ring = next((g for g in rank0["patterns"] if g["pattern"] == "RING"), None)
    if rank0["algos"] and ring and comm:
        bus = ring["nChannels"] * (ring["bwIntra"] if nodes <= 2 else ring["bwInter"])
        intra = "nvlink" if ring["typeIntra"] == "NVL" else "pci"
        seen: dict[int, set] = {}
        for a in rank0["algos"]:
            if a["func"] == "AllReduce":
                seen.setdefault(a["bytes"], set()).add(f"{a['algo']}/{a['proto']}")
        sizes = sorted(seen)
        pred = select(sizes, comm["nNodes"], comm["localRanks"], bus, intra)
        rows = [[human_bytes(s), ", ".join(sorted(seen[s])), f"{p[0].upper()}/{p[1]}",
                 "✅" if {f"{p[0].upper()}/{p[1]}"} == seen[s] else "—"] for s, p in zip(sizes, pred)]
        same = sum(r[3] == "✅" for r in rows)
        out += ["", f"AllReduce 호출마다 NCCL 이 고른 (algo, proto) 와, 실험 2 의 단순화한 모델 (ring/tree 만, BW = 위 RING "
                f"그래프의 nChannels × bw = {bus:g} GB/s, {comm['nNodes']} node × {comm['localRanks']}) 의 선택:", "",
                "| S | 로그의 선택 | 모델의 선택 | 같음 |", "|---:|---|---|---|"]
        out += [f"| {' | '.join(r)} |" for r in rows]
        out += ["", f"{len(rows)} 개 크기 가운데 {same} 개에서 같습니다. 모델에 없는 것 (NVLS, CollNet, PAT, channel 당 상한, "
                "tree 보정 계수) 을 고르거나 그 때문에 경계가 옮겨 가면 다릅니다."]
    return "\n".join(out)


# --8<-- [start:hier]
def hierarchical_allreduce(x: np.ndarray, nodes: int, per_node: int) -> dict:
    """2D AllReduce moving real arrays: x[r] is rank r = node·n_gpu + local's input (n_gpu = per_node).

    1. in each node, ring ReduceScatter over its n_gpu ranks: local rank l ends with block l summed over the node;
    2. for each l (a "rail": local rank l of every node, with its own NIC), ring AllReduce of block l
       across the n_node nodes;
    3. in each node, ring AllGather of the n_gpu reduced blocks.
    Returns the result and, per rank, the bytes sent inside nodes and across nodes, and the steps.
    """
    from snippets.ch1_collective.d01_collective_taxonomy import ring_all_gather, ring_reduce_scatter
    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce

    n, count = x.shape
    n_gpu, n_node = per_node, nodes
    assert n == n_gpu * n_node and count % n_gpu == 0
    intra, inter = np.zeros(n, np.int64), np.zeros(n, np.int64)
    node_ranks = [np.arange(k * n_gpu, (k + 1) * n_gpu) for k in range(n_node)]
    blocks = np.zeros((n_node, n_gpu, count // n_gpu), dtype=x.dtype)
    block_bytes = count // n_gpu * x.dtype.itemsize              # every intra-node ring step sends one block S/n_gpu
    intra_steps = 0
    for k, rs in enumerate(node_ranks):                      # phase 1: ReduceScatter inside node k
        blocks[k], sent = ring_reduce_scatter(x[rs])
        intra[rs] += sent
    intra_steps += int(sent.max()) // block_bytes            # steps counted from the messages actually sent
    inter_steps = 0
    for l in range(n_gpu):                                       # phase 2: AllReduce across nodes on rail l
        if n_node > 1:
            blocks[:, l], sent, _, inter_steps = ring_allreduce(blocks[:, l])
            inter[[rs[l] for rs in node_ranks]] += sent
    out = np.empty_like(x)
    for k, rs in enumerate(node_ranks):                      # phase 3: AllGather inside node k
        out[rs], sent = ring_all_gather(blocks[k])
        intra[rs] += sent
    intra_steps += int(sent.max()) // block_bytes
    return {"out": out, "intra_sent": intra, "inter_sent": inter,
            "intra_steps": intra_steps, "inter_steps": inter_steps}


def hierarchical_check(nodes: int, per_node: int, elems: int = 4) -> dict:
    """Run the 2D AllReduce on random integers; put its counts beside Theorem 1.4.9's."""
    n_gpu, n_node = per_node, nodes
    n, count = n_gpu * n_node, n_gpu * n_node * elems
    x = np.random.default_rng(n).integers(-8, 8, size=(n, count)).astype(np.float32)
    r = hierarchical_allreduce(x, n_node, n_gpu)
    s = count * 4
    return {"n_node": n_node, "n_gpu": n_gpu, "N": n, "S": s, "correct": bool(np.array_equal(r["out"], np.broadcast_to(x.sum(0), x.shape))),
            "intra_max": int(r["intra_sent"].max()), "intra_min": int(r["intra_sent"].min()),
            "f_intra": 2 * (n_gpu - 1) * s / n_gpu,
            "inter_max": int(r["inter_sent"].max()), "inter_min": int(r["inter_sent"].min()),
            "f_inter": 2 * (n_node - 1) * s / (n_gpu * n_node),
            "total": int((r["intra_sent"] + r["inter_sent"]).max()), "bound": 2 * (n - 1) * s / n,
            "steps": r["intra_steps"] + r["inter_steps"], "f_steps": 2 * (n_gpu - 1) + 2 * (n_node - 1)}
# --8<-- [end:hier]


HIER_CASES = ((2, 8), (3, 4), (4, 2), (2, 3), (5, 3), (16, 8), (1, 8), (8, 1))

# Constants for the comparison (stated, not measured): per-direction line rates from link_rates(),
# and as α the NCCL 2.30.7 per-hop latencies of ring/Simple (hwLatencies: NVLink 3.4 µs, network 14 µs).
def hier_constants() -> dict:
    rates = {r["link"]: r["per_direction"] for r in link_rates()}
    return {"alpha_intra": HW_LAT["nvlink"]["ring"][2] * 1e-6, "beta_intra": 1 / (rates["NVLink4 (H100)"] * 1e9),
            "alpha_inter": HW_LAT["net"]["ring"][2] * 1e-6, "beta_inter": 1 / (rates["InfiniBand NDR (1 port)"] * 1e9)}


def hier_time_rows(node_counts=(2, 16), per_node: int = 8, sizes=(1 << 20, 64 << 20, 1 << 30)) -> list[dict]:
    c = hier_constants()
    rows = []
    for G in node_counts:
        for s in sizes:
            rows.append({"n_node": G, "S": s,
                         "flat1": float(ab.flat_ring_two_level_time(G, per_node, s, **c)),
                         "flatk": float(ab.flat_ring_two_level_time(G, per_node, s, **c, channels=per_node)),
                         "hier": float(ab.hierarchical_allreduce_time(G, per_node, s, **c))})
    return rows


# --8<-- [start:budget]
# One worked step budget (all inputs are stated assumptions, printed on the page):
BUDGET = {"params": 7e9, "grad_bytes_per_param": 2, "nodes": 2, "per_node": 8,
          "tokens_per_gpu": 8 * 4096, "peak_flops": 989e12, "mfu": 0.40}


def step_budget(b: dict = BUDGET) -> dict:
    """Gradient bytes, AllReduce time (2D, Theorem 1.4.9), backward compute time, and the overlap condition.

    Backward ≈ 2 × forward ≈ 4ψ FLOPs per token (forward 2ψ: one multiply-add per parameter per token).
    AllReduce can hide behind backward only if T_comm ≤ T_bwd, i.e. tokens per GPU ≥ τ*_AR = T_comm·F_peak·MFU/(4ψ).
    """
    c = hier_constants()
    psi, s = b["params"], b["params"] * b["grad_bytes_per_param"]
    t_comm = float(ab.hierarchical_allreduce_time(b["nodes"], b["per_node"], s, **c))
    t_flat = float(ab.flat_ring_two_level_time(b["nodes"], b["per_node"], s, **c, channels=b["per_node"]))
    rate = b["peak_flops"] * b["mfu"]
    t_bwd = 4 * psi * b["tokens_per_gpu"] / rate
    tau = t_comm * rate / (4 * psi)
    return {"S": s, "t_comm": t_comm, "t_comm_flat": t_flat, "t_bwd": t_bwd, "tau_star": tau,
            "overlaps": t_comm <= t_bwd, "ratio": t_comm / t_bwd}
# --8<-- [end:budget]

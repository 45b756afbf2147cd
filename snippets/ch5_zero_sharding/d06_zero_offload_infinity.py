"""Ch5-06 ZeRO-Offload 와 ZeRO-Infinity: the code the page runs and the tests import.

Memory formulas come from snippets.common.zero_memory (never re-derived here). This module adds
what is specific to offload: which model states cross the GPU-CPU link each step, the step-time
model (GPU compute, PCIe, CPU Adam, NVMe) and the batch above which offload hides behind compute,
plus readers for the DeepSpeed results of gpu_runs/offload_bench.py. Each reader takes one results
file; the page renders them per hardware (results.hardware_tabs), the GPU tab adding what the program
records only on CUDA (memcpy bytes per direction, the allocator's peak, pinned PCIe bandwidth).

Units: ψ parameters, bytes, seconds, FLOP/s. GB = 1e9 B (bandwidths and capacities), GiB = 2**30 B
only where stated.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from snippets.common.zero_memory import GB, GRAD_BYTES, K_ADAM, PARAM_BYTES, zero_memory_breakdown


# --8<-- [start:hardware]
def pcie_x16_bytes_per_s(gen: int) -> float:
    """Raw one-direction bandwidth of a PCIe x16 link: 16 lanes × GT/s × 128/130 (encoding) / 8 bits."""
    gts = {3: 8.0, 4: 16.0, 5: 32.0}[gen]
    return 16 * gts * 1e9 * 128 / 130 / 8


@dataclass(frozen=True)
class Hardware:
    """ASSUMED constants of one GPU and its share of the host (not measured in this book)."""
    name: str
    gpu_flops: float      # sustained bf16 FLOP/s of the training step (peak × assumed MFU)
    gpu_mem: float        # bytes of GPU memory
    pcie: float           # bytes/s one direction, GPU <-> CPU
    cpu_bw: float         # bytes/s of host memory bandwidth available to this GPU's CPU Adam
    nvme: float           # bytes/s of NVMe read (= write) bandwidth available to this GPU
    act_reserve: float    # bytes of GPU memory kept for activations, buffers, fragmentation


LINK_EFFICIENCY = 0.8  # assumed: a DMA copy reaches 80 % of the raw PCIe rate

# A100-80GB-like GPU: 312 TFLOP/s bf16 dense peak at an assumed 50 % MFU; a host with an assumed
# 200 GB/s of DRAM bandwidth shared by 8 GPUs; one PCIe Gen4 NVMe drive of an assumed 7 GB/s per GPU.
ASSUMED = Hardware(name="A100-80GB 가정", gpu_flops=0.5 * 312e12, gpu_mem=80 * GB,
                   pcie=LINK_EFFICIENCY * pcie_x16_bytes_per_s(4), cpu_bw=200 * GB / 8,
                   nvme=7 * GB, act_reserve=10 * GB)
LINKS = {f"PCIe Gen{g} x16": LINK_EFFICIENCY * pcie_x16_bytes_per_s(g) for g in (3, 4, 5)}
# --8<-- [end:hardware]


# --8<-- [start:placement]
def placement_bytes(psi: float, n: int, stage: int, offload_optimizer: bool, offload_param: bool = False,
                    k: float = K_ADAM) -> dict[str, float]:
    """Per-rank bytes on the GPU and on the host for a ZeRO stage with optimizer / parameter offload.

    The split starts from zero_memory_breakdown (params / grads / optimizer state per rank).
    offload_optimizer moves the optimizer state and the gradient partition to the host (ZeRO-Offload,
    Ren et al. §3.5); offload_param (ZeRO-3 only, ZeRO-Infinity) moves the parameter shards too.
    """
    if offload_param and stage != 3:
        raise ValueError("parameter offload needs ZeRO-3 (DeepSpeed: offload_param is a stage-3 option)")
    b = zero_memory_breakdown(psi, n, stage, k)
    host = {"params": b["params"] if offload_param else 0.0,
            "grads": b["grads"] if offload_optimizer else 0.0,
            "optimizer": b["optimizer"] if offload_optimizer else 0.0}
    gpu = {key: b[key] - host[key] for key in b}
    return {"gpu": sum(gpu.values()), "host": sum(host.values()), "gpu_parts": gpu, "host_parts": host}


def max_params_on_gpu(hw: Hardware, n: int, stage: int, offload_optimizer: bool, offload_param: bool = False) -> float:
    """Largest ψ whose GPU-resident model states fit in gpu_mem − act_reserve (they are linear in ψ)."""
    per_param = placement_bytes(1.0, n, stage, offload_optimizer, offload_param)["gpu"]
    return (hw.gpu_mem - hw.act_reserve) / per_param if per_param > 0 else float("inf")
# --8<-- [end:placement]


# --8<-- [start:link]
# Bytes per parameter of the rank's shard that cross the GPU-CPU link in one ZeRO-Offload step.
LINK_BYTES_PAPER = GRAD_BYTES + PARAM_BYTES   # Ren et al. §3.5: g16 down (2) + p16 up (2) = 4
FP32 = 4
LINK_BYTES_SHIPPED = FP32 + PARAM_BYTES       # DeepSpeed 0.19.8 stage 1/2: fp32 grad down (4) + 16-bit param up (2) = 6

# Where DeepSpeed 0.19.8 makes those copies (deepspeed/runtime/zero/stage_1_and_2.py, line: text on that line).
# The gradient reaches the host fp32 buffer as fp32 made *on the device*: cast there (first path), or already
# accumulated there in an fp32 buffer (second path, when gradient_accumulation_dtype is fp32); the update comes
# back as a 16-bit copy.
DEEPSPEED_OFFLOAD_COPIES = (
    (1900, "src_tensor = src_tensor.to(self.master_weights_and_grads_dtype)", "DtoH", FP32,
     "async_inplace_copy_grad_to_fp32_buffer_from_gpu: cast to fp32 on the device"),
    (1909, "dest_tensor.copy_(src_tensor, non_blocking=True)", "DtoH", FP32,
     "... then copy into single_partition_of_fp32_groups[i].grad (host)"),
    (2156, "destination.copy_(source.to(destination.dtype), non_blocking=True)", "DtoH", FP32,
     "copy_grads_in_partition: the device-side fp32 accumulation buffer, copied as fp32"),
    (3095, "bit16_partition_buffer.data.copy_(fp32_partition.data)", "host", PARAM_BYTES,
     "step: fp32 master -> 16-bit host buffer (no link traffic)"),
    (3096, "bit16_partitions[partition_id].data.copy_(bit16_partition_buffer.data, non_blocking=True)", "HtoD",
     PARAM_BYTES, "... then the 16-bit update goes up to the device partition"),
)
# --8<-- [end:link]


def deepspeed_source_lines(relpath: str = "runtime/zero/stage_1_and_2.py") -> dict[int, str]:
    """Line number -> text of a file of the installed DeepSpeed (found without importing deepspeed)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("deepspeed")
    text = (Path(spec.origin).parent / relpath).read_text(encoding="utf-8")
    return dict(enumerate(text.splitlines(), start=1))


# --8<-- [start:model]
ADAM_CPU_BYTES = 4 * 4 + 3 * 4 + PARAM_BYTES  # read master, grad, μ, ν (fp32); write master, μ, ν; write 16-bit param
NVME_BYTES = 2 * K_ADAM                       # optimizer state on NVMe: read 12 B and write 12 B per parameter


def step_times(psi, tokens, n: int = 1, hw: Hardware = ASSUMED, pcie: float | None = None,
               offload: str = "cpu", link_bytes: float = LINK_BYTES_SHIPPED) -> dict[str, np.ndarray]:
    """Predicted seconds of one training step per GPU under ZeRO-Offload (ZeRO-2 + offload_optimizer).

    psi: parameters; tokens: tokens per GPU per step (micro-batch × sequence × accumulation).
    gpu  = 6 ψ tokens / F                      (forward + backward)
    pcie = c_L ψ/N / BW_pcie                    (c_L = 6 shipped: fp32 grads down + 16-bit params up;
                                                c_L = 4 in the paper: 16-bit both ways)
    cpu  = ADAM_CPU_BYTES ψ/N / B_cpu          (bandwidth-bound CPU Adam on this rank's shard)
    nvme = NVME_BYTES ψ/N / B_nvme             (only for offload='nvme': swap the optimizer state)
    serial  = gpu + pcie + cpu + nvme          (no overlap)
    overlap = max(gpu, pcie + cpu + nvme)      (transfers overlap backward, delayed parameter update)
    offload='none' gives the GPU-only step (gpu term only).
    """
    psi = np.asarray(psi, dtype=float)
    tokens = np.asarray(tokens, dtype=float)
    bw = hw.pcie if pcie is None else pcie
    gpu = 6 * psi * tokens / hw.gpu_flops
    zero = np.zeros_like(gpu)
    if offload == "none":
        return {"gpu": gpu, "pcie": zero, "cpu": zero, "nvme": zero, "serial": gpu, "overlap": gpu}
    link = link_bytes * psi / n / bw + zero
    cpu = ADAM_CPU_BYTES * psi / n / hw.cpu_bw + zero
    nvme = (NVME_BYTES * psi / n / hw.nvme + zero) if offload == "nvme" else zero
    off = link + cpu + nvme
    return {"gpu": gpu, "pcie": link, "cpu": cpu, "nvme": nvme, "serial": gpu + off, "overlap": np.maximum(gpu, off)}


def breakeven_tokens(n: int = 1, hw: Hardware = ASSUMED, pcie: float | None = None, offload: str = "cpu",
                     link_bytes: float = LINK_BYTES_SHIPPED) -> float:
    """Tokens per GPU per step above which the offload work hides behind compute (independent of ψ)."""
    bw = hw.pcie if pcie is None else pcie
    per_param = link_bytes / bw + ADAM_CPU_BYTES / hw.cpu_bw
    if offload == "nvme":
        per_param += NVME_BYTES / hw.nvme
    return hw.gpu_flops * per_param / (6 * n)


def infinity_efficiency(ait, bw, peak):
    """ZeRO-Infinity §4 efficiency without overlap: compute / (compute + data movement)
    = ait·bw / (ait·bw + peak), with ait = FLOPs per byte moved."""
    ait, bw = np.asarray(ait, dtype=float), np.asarray(bw, dtype=float)
    return ait * bw / (ait * bw + peak)
# --8<-- [end:model]


# --8<-- [start:caveats]
NODE_HOST_BW = 200 * GB   # ASSUMED: one node's host memory bandwidth, the same 200 GB/s that ASSUMED.cpu_bw splits 8 ways
GPU_LINK_BW = 240e9       # ASSUMED: per-GPU ring bandwidth inside a node (Ch5-04 experiment 5's NVLink assumption)


def breakeven_tokens_shared_host(n: int, hw: Hardware = ASSUMED, host_bw: float = NODE_HOST_BW) -> float:
    """Theorem 5.6.5's τ* when the N GPUs share one host's bandwidth (each gets host_bw / N) instead of keeping a
    fixed share hw.cpu_bw: the CPU term F·c_A/(6·host_bw) no longer falls with N."""
    return breakeven_tokens(n, replace(hw, cpu_bw=host_bw / n))


def allgather_tokens(n: int, hw: Hardware = ASSUMED, gpu_link: float = GPU_LINK_BW, elem: int = PARAM_BYTES) -> float:
    """Tokens per GPU at which ZeRO-2's GPU-side AllGather of the updated 16-bit parameters (eψ(N−1)/N bytes per
    rank on the GPU link, after each rank copies its shard up) takes as long as the compute 6ψτ/F. Definition
    5.6.2 leaves it out of T_off; if it is not hidden, τ* grows by this much, which tends to F·e/(6·gpu_link), not 0."""
    return hw.gpu_flops * elem * (n - 1) / n / (6 * gpu_link)


def caveat_rows(ns=(1, 2, 4, 8, 64), hw: Hardware = ASSUMED) -> list[dict]:
    """Per N: τ* as the page computes it (fixed host share), τ* with one node's host bandwidth shared by N GPUs
    (only meaningful up to one node, N ≤ 8), and the AllGather term the model omits."""
    return [{"N": n, "fixed": breakeven_tokens(n, hw),
             "shared": breakeven_tokens_shared_host(n, hw) if n <= NODE_N else None,
             "allgather": allgather_tokens(n, hw)} for n in ns]
# --8<-- [end:caveats]


def with_link(hw: Hardware, pcie: float) -> Hardware:
    return replace(hw, pcie=pcie)


MODEL_SIZES = (1.3e9, 6.7e9, 13e9, 30e9, 70e9)
NODE_N = 8            # the page's scenario: one 8-GPU node, ZeRO-2 across its 8 GPUs
NODE_TOKENS = 4096    # tokens per GPU per step in the table (e.g. micro-batch 4 × sequence 1024)


def model_size_table(tokens: float, n: int = 1, hw: Hardware = ASSUMED, sizes=MODEL_SIZES):
    """Rows for the page's table: memory placement and predicted step time per model size."""
    rows = []
    psi_gpu_only = max_params_on_gpu(hw, n, stage=2, offload_optimizer=False)
    psi_offload = max_params_on_gpu(hw, n, stage=2, offload_optimizer=True)
    for psi in sizes:
        base = step_times(psi, tokens, n, hw, offload="none")
        row = {"psi": psi, "fits_gpu_only": psi <= psi_gpu_only, "fits_offload": psi <= psi_offload,
               "host_bytes": placement_bytes(psi, n, 2, True)["host"], "gpu_only_s": float(base["serial"])}
        for name, bw in LINKS.items():
            t = step_times(psi, tokens, n, hw, pcie=bw)
            row[name] = (float(t["serial"]), float(t["overlap"]))
        t = step_times(psi, tokens, n, hw, offload="nvme")
        row["nvme"] = (float(t["serial"]), float(t["overlap"]))
        rows.append(row)
    return rows


def step_time_figure(tokens: float, n: int = 1, hw: Hardware = ASSUMED):
    """Predicted step time vs ψ for each link (serial, solid; overlapped, dotted) and the GPU-only
    step up to its memory wall (dashed verticals: the largest ψ without / with offload)."""
    from snippets.common import figures

    fig, ax = figures.new(7, 4)
    psi = np.logspace(8.5, 11, 30)
    wall = max_params_on_gpu(hw, n, 2, False)
    wall_off = max_params_on_gpu(hw, n, 2, True)
    m = psi <= wall_off
    base = step_times(psi, tokens, n, hw, offload="none")["serial"]
    ax.loglog(psi[psi <= wall], base[psi <= wall], "k-", lw=2, label="GPU only (ZeRO-2, no offload)")
    for (name, bw), c in zip(LINKS.items(), ["C0", "C1", "C2"]):
        t = step_times(psi, tokens, n, hw, pcie=bw)
        ax.loglog(psi[m], t["serial"][m], "-", color=c, label=f"offload, {name} ({bw / GB:.1f} GB/s)")
        ax.loglog(psi[m], t["overlap"][m], ":", color=c)
    t = step_times(psi, tokens, n, hw, offload="nvme")
    ax.loglog(psi[m], t["serial"][m], "-", color="C3", label=f"optimizer on NVMe ({hw.nvme / GB:g} GB/s), Gen4")
    ax.axvline(wall, color="k", ls="--", lw=0.8)
    ax.axvline(wall_off, color="C0", ls="--", lw=0.8)
    ax.set_xlabel("ψ (parameters)")
    ax.set_ylabel("예측 step 시간 (s)")
    ax.set_title(f"N = {n}, tokens/GPU/step = {tokens:,.0f}; 점선 = overlap")
    ax.legend(fontsize=7)
    return figures.svg(fig)


def efficiency_figure(n: int = 1, hw: Hardware = ASSUMED):
    """T_gpu / T_step against tokens per GPU per step, serial and overlapped, with tokens* marked."""
    from snippets.common import figures

    fig, bx = figures.new(7, 3.5)
    tok = np.logspace(2, 6, 40)
    for (name, bw), c in zip(LINKS.items(), ["C0", "C1", "C2"]):
        t = step_times(1e9, tok, n, hw, pcie=bw)
        bx.semilogx(tok, t["gpu"] / t["serial"], "-", color=c, label=f"{name}, serial")
        bx.semilogx(tok, t["gpu"] / t["overlap"], ":", color=c, label=f"{name}, overlap")
        bx.axvline(breakeven_tokens(n, hw, bw), color=c, lw=0.6)
    bx.set_xlabel("tokens per GPU per step")
    bx.set_ylabel("효율 = T_gpu / T_step")
    bx.set_title(f"N = {n}; 세로선 = tokens* (정리 5.6.4)")
    bx.set_ylim(0, 1.05)
    bx.legend(fontsize=7)
    return figures.svg(fig)


# ------------------------------------------------------------------ DeepSpeed results (offload_bench)

STATE_ORDER = ("params16", "grads", "master_fp32", "adam_m", "adam_v")


def expected_state_bytes(psi: int, n: int, stage: int, grads_fp32: bool = False) -> dict[str, float]:
    """Per-rank bytes of each state from the shared ZeRO formula (K = 12 split as 4 + 4 + 4)."""
    b = zero_memory_breakdown(psi, n, stage)
    grads = b["grads"] * (2 if grads_fp32 else 1)  # DeepSpeed's CPU-offload grad buffer is fp32
    third = b["optimizer"] / 3
    return {"params16": b["params"], "grads": grads, "master_fp32": third, "adam_m": third, "adam_v": third}


def bench_rows(result, rank: int = 0) -> list[dict]:
    """One rank's DeepSpeed configurations (the host probe rows are kept apart)."""
    return [r for r in result.measurements if r["rank"] == rank and r["config"] != "host_probe"]


# --8<-- [start:probe]
ADAM_TORCH_BYTES = 4 * 4 + 3 * 4  # torch AdamW on fp32: read param, grad, μ, ν; write param, μ, ν


def probe_rows(result) -> list[dict]:
    """Per rank: measured host copy bandwidth and AdamW step, and the bandwidth lower bound for that step."""
    out = []
    for r in result.measurements:
        if r["config"] != "host_probe":
            continue
        p = r["probe"]
        bound_ms = ADAM_TORCH_BYTES * p["numel"] / (p["copy_GBps"] * 1e9) * 1e3
        out.append({"rank": r["rank"], **p, "adam_bound_ms": bound_ms, "ratio": p["adam_ms"] / bound_ms,
                    "adam_GBps": ADAM_TORCH_BYTES * p["numel"] / (p["adam_ms"] * 1e-3) / 1e9})
    return out
# --8<-- [end:probe]


# --8<-- [start:inventory]
def inventory_table(result, rank: int = 0) -> tuple[list[str], list[list]]:
    """Header and rows: each config's states with device, dtype, bytes, and the formula's bytes."""
    n = result.hardware["world_size"]
    header = ["config", "state", "device", "dtype", "bytes / rank (측정)", "bytes / rank (공식)", "일치"]
    rows = []
    for r in bench_rows(result, rank):
        if not r["ok"]:
            continue
        stage = r["zero_optimization"]["stage"]
        fp32_grads = stage == 2 and "offload_optimizer" in r["zero_optimization"]
        exp = expected_state_bytes(r["psi"], n, stage, fp32_grads)
        for e in r["inventory"]:
            rows.append([r["config"], e["state"], e["device"], e["dtype"], f"{e['bytes']:,}",
                         f"{exp[e['state']]:,.0f}", "✅" if e["bytes"] == exp[e["state"]] else "❌"])
    return header, rows
# --8<-- [end:inventory]


def errors(result) -> dict[str, str]:
    return {r["config"]: r["error"] for r in bench_rows(result) if not r["ok"]}


def timing_rows(result) -> list[list]:
    rows = []
    for r in bench_rows(result):
        if r["ok"]:
            rows.append([r["config"], f"{r['fwd_bwd_ms_median']:.2f}", f"{r['step_ms_median']:.2f}",
                         f"{r['fwd_bwd_ms_median'] + r['step_ms_median']:.2f}"])
    return rows


# --8<-- [start:gpu]
def link_prediction(row: dict, n: int) -> dict[str, float] | None:
    """Bytes per step that should cross the GPU-CPU link for one configuration (DeepSpeed 0.19.8, the
    copies of DEEPSPEED_OFFLOAD_COPIES): none without offload; ZeRO-2 offload: the fp32 gradient
    partition down (4ψ/N) and the 16-bit update up (2ψ/N). ZeRO-3 with parameter offload also fetches
    parameter shards every forward and backward; the page predicts no number for it (None)."""
    z = row["zero_optimization"]
    if "offload_optimizer" not in z and "offload_param" not in z:
        return {"DtoH": 0.0, "HtoD": 0.0}
    if z["stage"] == 2 and z["offload_optimizer"]["device"] == "cpu":
        return {"DtoH": FP32 * row["psi"] / n, "HtoD": PARAM_BYTES * row["psi"] / n}
    return None


def expected_devices(row: dict, accel: str) -> dict[str, str]:
    """Where Definition 5.6.1 puts each state: on the accelerator unless its offload moves it to the host."""
    z = row["zero_optimization"]
    opt = z.get("offload_optimizer", {}).get("device") == "cpu"
    par = z.get("offload_param", {}).get("device") == "cpu"
    return {"params16": "cpu" if par else accel, **{s: "cpu" if opt else accel for s in STATE_ORDER[1:]}}


def placement_check(result, rank: int = 0) -> list[list]:
    """Per configuration: each state's measured device against Definition 5.6.1 on this hardware."""
    accel = "cuda" if result.is_gpu else "cpu"
    out = []
    for r in bench_rows(result, rank):
        if not r["ok"]:
            continue
        want = expected_devices(r, accel)
        got = {e["state"]: e["device"] for e in r["inventory"]}
        out.append([r["config"], ", ".join(f"{s} {got[s]}" for s in STATE_ORDER),
                    "✅" if all(got[s] == want[s] for s in STATE_ORDER) else
                    "❌ 예측: " + ", ".join(f"{s} {want[s]}" for s in STATE_ORDER)])
    return out


def gpu_rows(result) -> list[list]:
    """A GPU result: measured memcpy bytes per step against link_prediction, and the allocator's peak
    against the model states Definition 5.6.1 leaves on the GPU (a lower bound: activations come on top).
    The peak is this configuration's own: offload_bench resets the peak when a configuration starts, but
    what earlier configurations left allocated is in it, so gpu_allocated_at_start_bytes is subtracted."""
    n = result.hardware["world_size"]
    rows = []
    for r in bench_rows(result):
        if not r["ok"]:
            rows.append([r["config"], r.get("client_optimizer", "—"), "—", "—", "—", "—", "—",
                         "시작하지 못함: " + r["error"][:60]])
            continue
        mb = r.get("memcpy_bytes", {})
        steps = r.get("memcpy_steps", 1) or 1
        pred = link_prediction(r, n)
        z = r["zero_optimization"]
        on_gpu = placement_bytes(r["psi"], n, z["stage"], "offload_optimizer" in z, "offload_param" in z)["gpu"]
        peak = r.get("gpu_max_allocated_bytes")
        if peak is not None:
            peak -= r.get("gpu_allocated_at_start_bytes", 0)
        rows.append([r["config"], r.get("client_optimizer", "—"), f"{mb.get('DtoH', 0) / steps / 1e6:,.2f}",
                     "—" if pred is None else f"{pred['DtoH'] / 1e6:,.2f}",
                     f"{mb.get('HtoD', 0) / steps / 1e6:,.2f}", "—" if pred is None else f"{pred['HtoD'] / 1e6:,.2f}",
                     "—" if peak is None else f"{peak / 1e6:,.1f}", f"{on_gpu / 1e6:,.1f}"])
    return rows


GPU_HEADER = ["config", "client optimizer", "DtoH MB / step (측정)", "DtoH 예측", "HtoD MB / step (측정)", "HtoD 예측",
              "max_memory_allocated − 시작 시 allocated, MB (측정)", "GPU 의 model states MB (정의 5.6.1)"]


def pcie_rows(result) -> list[list]:
    """The host probe's pinned copies over the link (CUDA only) next to the BW_pcie experiment 3 assumes."""
    return [[p["rank"], f"{p['pcie_h2d_GBps']:.1f}", f"{p['pcie_d2h_GBps']:.1f}", f"{ASSUMED.pcie / GB:.1f}",
             f"{p['pcie_h2d_GBps'] * GB / ASSUMED.pcie:.2f}"] for p in probe_rows(result) if "pcie_h2d_GBps" in p]


PCIE_HEADER = ["rank", "pinned HtoD (GB/s, 측정)", "pinned DtoH (GB/s, 측정)", "가정한 BW_pcie, Gen4 (GB/s)", "HtoD / 가정"]
# --8<-- [end:gpu]


# ------------------------------------------------------------------ experiment 5: the link offload crosses

MEM_PROGRAM = "mem_bandwidth"
DIRECTIONS = {"host_to_device": "HtoD (host → GPU)", "device_to_host": "DtoH (GPU → host)"}


# --8<-- [start:hostlink]
def link_rates(result) -> dict[str, float] | None:
    """The fastest copy of each direction × host memory in one mem_bandwidth file (bytes / s), or None when
    the file says host↔device copies do not apply (no CUDA device)."""
    m = result.measurements
    if not all(m[d]["applies"] for d in DIRECTIONS):
        return None
    return {f"{d}/{mem}": max(r["GBps"] for r in m[d][mem]) * 1e9 for d in DIRECTIONS for mem in ("pinned", "pageable")}


def shipped_link_bandwidth(h2d: float, d2h: float) -> float:
    """One bandwidth for DeepSpeed 0.19.8's ZeRO-2 offload step (4 bytes a parameter down, 2 up, one after the
    other): the rate B with LINK_BYTES_SHIPPED / B = 4 / d2h + 2 / h2d, as step_times' link term takes it."""
    return LINK_BYTES_SHIPPED / (FP32 / d2h + PARAM_BYTES / h2d)


def link_share(bw: float, hw: Hardware = ASSUMED) -> float:
    """The link's part of τ* (Theorem 5.6.5): (c_L / B) / (c_L / B + c_A / BW_cpu)."""
    link = LINK_BYTES_SHIPPED / bw
    return link / (link + ADAM_CPU_BYTES / hw.cpu_bw)
# --8<-- [end:hostlink]


def host_link_tab(plat) -> str:
    """Experiment 5 on one hardware: pinned and pageable copies each way by size, and the page's τ* (Theorem 5.6.5)
    with the measured link in place of the assumed one; where the file says the copies do not apply, its reason."""
    from snippets import results

    run = plat.runs[0]
    m = run.measurements
    if not all(m[d]["applies"] for d in DIRECTIONS):
        reasons = "\n".join(f"    - {DIRECTIONS[d]}: {m[d]['reason']}" for d in DIRECTIONS if not m[d]["applies"])
        return (f'!!! note "이 하드웨어에는 host↔device 복사가 없습니다"\n    결과 파일이 적은 이유 그대로 (숫자는 기록되지 '
                f'않았습니다):\n\n{reasons}\n\n    이 파일에 있는 것은 {m["device_to_device"]["memory"]} 안의 복사뿐이고, '
                f'그것은 Ch1-05 의 실험 7 이 읽습니다.\n')
    sizes = [r["bytes"] for r in m["host_to_device"]["pinned"]]
    col = {(d, mem): {r["bytes"]: r for r in m[d][mem]} for d in DIRECTIONS for mem in ("pinned", "pageable")}
    fmt = lambda n: f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"  # noqa: E731
    table = results.markdown_table(
        ["S", "HtoD pinned (GB/s)", "HtoD pageable", "DtoH pinned", "DtoH pageable"],
        [[fmt(s), *[f"{col[(d, mem)][s]['GBps']:.2f}" for d in DIRECTIONS for mem in ("pinned", "pageable")]]
         for s in sizes])
    rates = link_rates(run)
    big = max(sizes)
    wall = "; ".join(f"{DIRECTIONS[d].split()[0]} {mem} {col[(d, mem)][big]['wall_GBps']:.2f} (event {col[(d, mem)][big]['GBps']:.2f})"
                     for d in DIRECTIONS for mem in ("pinned", "pageable"))
    lines = [f"가장 빠른 복사: " + ", ".join(f"{DIRECTIONS[k.split('/')[0]].split()[0]} {k.split('/')[1]} "
                                            f"{v / GB:.2f} GB/s" for k, v in rates.items()),
             "pinned / pageable: " + ", ".join(
                 f"{DIRECTIONS[d].split()[0]} {rates[f'{d}/pinned'] / rates[f'{d}/pageable']:.2f}×" for d in DIRECTIONS),
             f"host 의 wall clock 으로 잰 GB/s (두 번째 방법, S = {fmt(big)}): {wall}"]
    links = {"가정: PCIe Gen4 x16 의 80 % (실험 3)": ASSUMED.pcie,
             "측정: pinned": shipped_link_bandwidth(rates["host_to_device/pinned"], rates["device_to_host/pinned"]),
             "측정: pageable": shipped_link_bandwidth(rates["host_to_device/pageable"], rates["device_to_host/pageable"])}
    model = results.markdown_table(
        ["링크", "B (GB/s, DtoH 4 + HtoD 2 bytes 에 맞춘 값)", "c_L / B (ns / 파라미터)", "τ* 에서 링크 항의 몫",
         f"τ* (N = {NODE_N}, token / GPU)"],
        [[k, f"{b / GB:.2f}", f"{LINK_BYTES_SHIPPED / b * 1e9:.3f}", f"{link_share(b):.0%}",
          f"{breakeven_tokens(NODE_N, ASSUMED, pcie=b):,.0f}"] for k, b in links.items()])
    return "\n\n".join([table, "\n".join(f"- {x}" for x in lines),
                        f"실험 3 의 모델 (CPU, GPU 의 가정은 그대로) 에 이 링크를 넣으면:", model])

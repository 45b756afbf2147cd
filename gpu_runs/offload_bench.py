"""ZeRO-Offload / ZeRO-Infinity with DeepSpeed: where every model state lives, and what a step costs.

For each DeepSpeed configuration (ZeRO-2 without offload, ZeRO-2 with "offload_optimizer": cpu,
ZeRO-3 with optimizer and parameter offload to cpu, ZeRO-3 with optimizer offload to nvme) it
builds the same MLP, runs a few bf16 training steps and records, per rank:
  * an inventory of the model states right after backward (before the optimizer step):
    16-bit parameters, gradient partitions, fp32 master weights, Adam m and v, each with its
    device, dtype, element count and bytes;
  * the median time of forward+backward and of the optimizer step;
  * on CUDA only: the bytes copied device->host and host->device during the measured steps
    (torch.profiler memcpy events), i.e. the PCIe traffic of the offload.
A configuration that DeepSpeed refuses on this machine is recorded with its exact error.
A host probe, run by all ranks at once (as offloading ranks share the host), records the copy
bandwidth of host memory, one torch.optim.AdamW step on fp32 parameters (the CPU side of offload),
and on CUDA the pinned host<->device copy bandwidth (the PCIe link).

The optimizer is torch.optim.AdamW passed as a client optimizer with
"zero_force_ds_cpu_optimizer": false, so no compiled DeepSpeedCPUAdam op is needed (DeepSpeed is
installed with DS_BUILD_OPS=0).

    torchrun --nproc_per_node=2 gpu_runs/offload_bench.py                    # CPU, gloo
    torchrun --nproc_per_node=1 gpu_runs/offload_bench.py --preset gpu       # one GPU, NCCL
    torchrun --nproc_per_node=2 gpu_runs/offload_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

PROGRAM = "offload_bench"
CONFIGS = ("zero2", "zero2_offload_cpu", "zero3_offload_cpu", "zero3_offload_nvme")
PRESETS = {
    # tiny (what the tests launch): the offload path and the NVMe refusal only, to stay well under 30 s
    "tiny": {"hidden": 64, "layers": 2, "batch": 4, "warmup": 1, "steps": 2, "probe_numel": 1 << 16, "probe_reps": 3,
             "configs": ["zero2_offload_cpu", "zero3_offload_nvme"]},
    "full": {"hidden": 512, "layers": 4, "batch": 8, "warmup": 3, "steps": 15, "probe_numel": 1 << 23, "probe_reps": 7},
    # NVMe is left out of the GPU preset: where libaio exists, async_io would first be JIT-compiled (minutes)
    "gpu": {"hidden": 4096, "layers": 4, "batch": 16, "seq": 1024, "warmup": 3, "steps": 10,
            "probe_numel": 1 << 25, "probe_reps": 5, "probe_pcie_bytes": 1 << 28,
            "configs": ["zero2", "zero2_offload_cpu", "zero3_offload_cpu"]},
}


def build_model(hidden: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden)]
    return torch.nn.Sequential(*blocks)


def ds_config(name: str, batch: int, nvme_path: str) -> dict:
    zero: dict = {"stage": 3 if name.startswith("zero3") else 2}
    if name.endswith("offload_cpu"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
        if zero["stage"] == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    if name.endswith("offload_nvme"):
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme_path, "pin_memory": False}
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "zero_optimization": zero,
            "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
            "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


def _entry(state: str, tensors) -> dict:
    tensors = [t for t in tensors if t is not None and t.numel() > 0]
    if not tensors:
        return {"state": state, "device": None, "dtype": None, "numel": 0, "bytes": 0}
    devs = sorted({t.device.type for t in tensors})
    dts = sorted({str(t.dtype).replace("torch.", "") for t in tensors})
    return {"state": state, "device": ",".join(devs), "dtype": ",".join(dts),
            "numel": int(sum(t.numel() for t in tensors)),
            "bytes": int(sum(t.numel() * t.element_size() for t in tensors))}


def inventory(engine, stage: int) -> list[dict]:
    """Model states of this rank right after backward: device, dtype, elements, bytes."""
    opt = engine.optimizer
    params = list(engine.module.parameters())
    adam = [s for s in opt.optimizer.state.values()]
    m = [s.get("exp_avg") for s in adam]
    v = [s.get("exp_avg_sq") for s in adam]
    if stage == 3:
        p16 = [p.ds_tensor for p in params]
        master = list(opt.fp32_partitioned_groups_flat)
        grads = [opt.grad_partitions_flat_buffer]
    else:
        p16 = params
        master = list(opt.single_partition_of_fp32_groups)
        if getattr(opt, "cpu_offload", False):
            grads = [t.grad for t in master]
        else:
            ag = opt.averaged_gradients
            grads = [t for g in (ag.values() if isinstance(ag, dict) else ag) for t in (g or [])]
    return [_entry("params16", p16), _entry("grads", grads), _entry("master_fp32", master),
            _entry("adam_m", m), _entry("adam_v", v)]


def memcpy_bytes(prof) -> dict:
    """Sum the bytes of CUDA memcpy events in a profiler trace (device->host, host->device)."""
    out = {"DtoH": 0, "HtoD": 0, "DtoD": 0}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path)).get("traceEvents", [])
    for e in events:
        name = e.get("name", "")
        if e.get("cat") in ("gpu_memcpy", "Memcpy") or name.startswith("Memcpy"):
            for k in out:
                if k in name:
                    out[k] += int(e.get("args", {}).get("bytes", 0))
    return out


def run_config(name: str, cfg: dict, env: harness.Env, nvme_path: str) -> dict:
    import deepspeed

    model = build_model(cfg["hidden"], cfg["layers"])
    psi = sum(p.numel() for p in model.parameters())
    row: dict = {"config": name, "psi": psi, "ok": False}
    conf = ds_config(name, cfg["batch"], nvme_path)
    row["zero_optimization"] = conf["zero_optimization"]
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=conf)
    except Exception as exc:  # DeepSpeed refuses the configuration here: keep its exact words
        row["error"] = f"{type(exc).__name__}: {exc}"[:600]
        return row
    stage = conf["zero_optimization"]["stage"]
    row["optimizer_class"] = type(engine.optimizer).__name__
    row["cpu_offload_flag"] = bool(getattr(engine.optimizer, "cpu_offload", False)
                                   or getattr(engine.optimizer, "offload_optimizer", False))
    g = torch.Generator().manual_seed(1 + env.rank)
    seq = cfg.get("seq", 1)
    x = torch.randn(cfg["batch"] * seq, cfg["hidden"], generator=g).to(env.device, torch.bfloat16)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    fb, st, losses = [], [], []
    prof = None
    for i in range(cfg["warmup"] + cfg["steps"]):
        measured = i >= cfg["warmup"]
        if measured and prof is None and env.device.type == "cuda":
            from torch.profiler import ProfilerActivity, profile
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        sync()
        t1 = time.perf_counter()
        if i == 1:  # Adam creates m and v in the first step: look after the second backward
            row["inventory"] = inventory(engine, stage)
        engine.step()
        sync()
        t2 = time.perf_counter()
        losses.append(float(loss.item()))
        if measured:
            fb.append(t1 - t0)
            st.append(t2 - t1)
    if prof is not None:
        prof.__exit__(None, None, None)
        row["memcpy_bytes"] = memcpy_bytes(prof)
        row["memcpy_steps"] = cfg["steps"]
    # the step lasts as long as its slowest rank: max over ranks per iteration, then the median
    t = torch.tensor([fb, st], dtype=torch.float64)
    if env.backend == "nccl":
        t = t.to(env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    fb, st = t.cpu().tolist()
    row.update({"ok": True, "fwd_bwd_ms_median": statistics.median(fb) * 1e3,
                "step_ms_median": statistics.median(st) * 1e3, "losses": losses})
    if env.device.type == "cuda":
        row["gpu_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(env.device))
    engine.destroy() if hasattr(engine, "destroy") else None
    del engine
    gc.collect()
    return row


def host_probe(cfg: dict, env: harness.Env) -> dict:
    """Host memory copy bandwidth, a CPU AdamW step, and (CUDA only) pinned PCIe copy bandwidth."""
    numel, reps = cfg["probe_numel"], cfg["probe_reps"]
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)

    def timed(fn) -> float:
        times = []
        for _ in range(reps):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    src = torch.randn(numel)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t_copy = timed(lambda: dst.copy_(src))
    p = torch.nn.Parameter(torch.randn(numel))
    p.grad = torch.randn(numel)
    opt = torch.optim.AdamW([p], lr=1e-3)
    opt.step()  # creates m and v
    t_adam = timed(opt.step)
    out = {"numel": numel, "reps": reps, "threads": torch.get_num_threads(),
           "copy_ms": t_copy * 1e3, "copy_GBps": 2 * numel * 4 / t_copy / 1e9,  # read + write
           "adam_ms": t_adam * 1e3}
    if env.device.type == "cuda":
        nbytes = cfg["probe_pcie_bytes"]
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=env.device)
        dev.copy_(host, non_blocking=True)
        out["pcie_bytes"] = nbytes
        out["pcie_h2d_GBps"] = nbytes / timed(lambda: dev.copy_(host, non_blocking=True)) / 1e9
        out["pcie_d2h_GBps"] = nbytes / timed(lambda: host.copy_(dev, non_blocking=True)) / 1e9
    return out


def main(argv=None) -> int:
    parser = harness.base_parser(__doc__.splitlines()[0], PRESETS)
    parser.add_argument("--configs", default=None, help="comma-separated subset of " + ",".join(CONFIGS)
                        + " (default: the preset's list, else all)")
    args = parser.parse_args(argv)
    names = [c for c in (args.configs or ",".join(PRESETS[args.preset].get("configs", CONFIGS))).split(",") if c]
    bad = [c for c in names if c not in CONFIGS]
    if bad:
        raise harness.UsageError(f"unknown config(s) {bad}; choose from {list(CONFIGS)}")
    env = harness.init(min_world_size=1)
    warnings.filterwarnings("ignore")
    import deepspeed
    from deepspeed.ops.op_builder import AsyncIOBuilder, CPUAdamBuilder

    deepspeed.init_distributed(dist_backend=env.backend)
    cfg = PRESETS[args.preset]
    ops = {}
    for name, builder in (("cpu_adam", CPUAdamBuilder), ("async_io", AsyncIOBuilder)):
        try:
            ops[name] = {"compatible": bool(builder().is_compatible(verbose=False))}
        except Exception as exc:  # pragma: no cover - depends on the installation
            ops[name] = {"compatible": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    rows = []
    with tempfile.TemporaryDirectory(prefix="ds-nvme-") as nvme_path:
        for name in names:
            row = run_config(name, cfg, env, nvme_path)
            rows.append({"rank": env.rank, **row})
            dist.barrier()
            if env.is_main:
                msg = (f"fwd+bwd {row['fwd_bwd_ms_median']:.2f} ms  step {row['step_ms_median']:.2f} ms"
                       if row["ok"] else row["error"][:160])
                print(f"{name:>20}  psi={row['psi']}  {msg}", flush=True)
    probe = host_probe(cfg, env)
    rows.append({"rank": env.rank, "config": "host_probe", "ok": True, "probe": probe})
    if env.is_main:
        print(f"host probe: copy {probe['copy_GBps']:.2f} GB/s, AdamW step on {probe['numel']:,} params "
              f"{probe['adam_ms']:.1f} ms", flush=True)
    # every rank's inventory goes into the file: gather the rows on rank 0
    gathered = [None] * env.world_size
    dist.all_gather_object(gathered, rows)
    measurements = [r for per_rank in gathered for r in per_rank]
    params = {"preset": args.preset, **{k: v for k, v in cfg.items() if k != "configs"}, "configs": names, "dtype": "bfloat16",
              "optimizer": "torch.optim.AdamW (client optimizer, zero_force_ds_cpu_optimizer=false)",
              "op_builders": ops,
              "timing": "per step: barrier, time forward+backward and engine.step() separately; "
                        "max over ranks; median over measured steps. Host probe: per rank, all ranks at once, "
                        "median of probe_reps (copy bandwidth counts read + write)"}
    harness.write_results(env, PROGRAM, __file__, params, measurements, args.out, save=not args.no_save)
    harness.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""ZeRO-Offload / ZeRO-Infinity with DeepSpeed: where every model state lives, and what a step costs.

For each DeepSpeed configuration (ZeRO-2 without offload, ZeRO-2 with "offload_optimizer": cpu,
ZeRO-3 with optimizer and parameter offload to cpu, ZeRO-3 with optimizer offload to nvme) it
builds the same MLP, runs a few bf16 training steps and records, per rank:
  * an inventory of the model states right after backward (before the optimizer step):
    16-bit parameters, gradient partitions, fp32 master weights, Adam m and v, each with its
    device, dtype, element count and bytes;
  * the median time of forward+backward and of the optimizer step (harness.time_call: a fence, then
    CUDA events on a GPU, time.perf_counter on CPU; no profiler running);
  * on CUDA only: the bytes copied device->host and host->device during `memcpy_steps` further steps
    run under torch.profiler (memcpy events), i.e. the PCIe traffic of the offload, and the caching
    allocator's peak during the configuration (reset when it starts).
A configuration that DeepSpeed refuses on this machine is recorded with its exact error.
A host probe, run by all ranks at once (as offloading ranks share the host), records the copy
bandwidth of host memory, one torch.optim.AdamW step on fp32 parameters (the CPU side of offload),
and on CUDA the pinned host<->device copy bandwidth (the PCIe link).

The optimizer of an offloading configuration is DeepSpeedCPUAdam (AdamW mode) when its op loads
(--cpu-adam auto: on a GPU machine it is loaded, JIT-compiled if need be; on CPU only if it is already
built, since building takes minutes), else torch.optim.AdamW, passed as a client optimizer with
"zero_force_ds_cpu_optimizer": false; the configuration without offload uses torch.optim.AdamW. Every
row records which optimizer ran (client_optimizer) and params.cpu_adam why. Offloaded states live in
pinned host memory on a GPU machine ("pin_memory": true, --pin-memory auto), pageable on CPU.

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
    "tiny": {"hidden": 64, "layers": 2, "batch": 4, "warmup": 1, "steps": 2, "memcpy_steps": 2, "probe_numel": 1 << 16,
             "probe_reps": 3, "configs": ["zero2_offload_cpu", "zero3_offload_nvme"]},
    "full": {"hidden": 512, "layers": 4, "batch": 8, "warmup": 3, "steps": 15, "memcpy_steps": 3, "probe_numel": 1 << 23,
             "probe_reps": 7},
    # NVMe is left out of the GPU preset: where libaio exists, async_io would first be JIT-compiled (minutes)
    "gpu": {"hidden": 4096, "layers": 4, "batch": 16, "seq": 1024, "warmup": 3, "steps": 10, "memcpy_steps": 3,
            "probe_numel": 1 << 25, "probe_reps": 5, "probe_pcie_bytes": 1 << 28,
            "configs": ["zero2", "zero2_offload_cpu", "zero3_offload_cpu"]},
}


def build_model(hidden: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden)]
    return torch.nn.Sequential(*blocks)


def ds_config(name: str, batch: int, nvme_path: str, pin: bool = False) -> dict:
    zero: dict = {"stage": 3 if name.startswith("zero3") else 2}
    if name.endswith("offload_cpu"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
        if zero["stage"] == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    if name.endswith("offload_nvme"):
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme_path, "pin_memory": pin}
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


def cpu_adam(mode: str, env) -> tuple[type | None, str]:
    """DeepSpeedCPUAdam if its op loads (see the module docstring), else None; and why."""
    if mode == "off":
        return None, "off (--cpu-adam off)"
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder import CPUAdamBuilder
    from torch.utils.cpp_extension import _get_build_directory

    builder = CPUAdamBuilder()
    built = installed_ops.get(builder.name) or \
        (Path(_get_build_directory(builder.name, False)) / f"{builder.name}.so").exists()
    if mode == "auto" and not harness.on_cuda(env) and not built:
        return None, ("auto on CPU: the cpu_adam op is not built here (building it takes minutes); "
                      "--cpu-adam on builds and uses it")
    try:
        builder.load(verbose=False)
    except Exception as exc:  # noqa: BLE001 - no compiler, no ninja, …: fall back, say why
        return None, f"the cpu_adam op did not load: {type(exc).__name__}: {exc}"[:400]
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    return DeepSpeedCPUAdam, "loaded (prebuilt)" if built else "loaded (JIT-compiled in this run)"


def run_config(name: str, cfg: dict, env: harness.Env, nvme_path: str, pin: bool, cpu_adam_cls) -> dict:
    import deepspeed

    model = build_model(cfg["hidden"], cfg["layers"])
    psi = sum(p.numel() for p in model.parameters())
    row: dict = {"config": name, "psi": psi, "ok": False, "pin_memory": pin}
    conf = ds_config(name, cfg["batch"], nvme_path, pin)
    row["zero_optimization"] = conf["zero_optimization"]
    offloads = "offload_optimizer" in conf["zero_optimization"]
    opt_cls = cpu_adam_cls if (offloads and cpu_adam_cls is not None) else torch.optim.AdamW
    row["client_optimizer"] = opt_cls.__name__
    mem = harness.PeakMemory(env).__enter__()  # this configuration's peak only (reset here)
    try:
        opt = opt_cls(model.parameters(), lr=1e-3)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=conf)
    except Exception as exc:  # DeepSpeed refuses the configuration here: keep its exact words
        row["error"] = f"{type(exc).__name__}: {exc}"[:600]
        return row
    stage = conf["zero_optimization"]["stage"]
    row["optimizer_class"] = type(engine.optimizer).__name__
    row["inner_optimizer"] = type(getattr(engine.optimizer, "optimizer", engine.optimizer)).__name__
    row["cpu_offload_flag"] = bool(getattr(engine.optimizer, "cpu_offload", False)
                                   or getattr(engine.optimizer, "offload_optimizer", False))
    g = torch.Generator().manual_seed(1 + env.rank)
    seq = cfg.get("seq", 1)
    x = torch.randn(cfg["batch"] * seq, cfg["hidden"], generator=g).to(env.device, torch.bfloat16)
    fb, st, losses = [], [], []
    box = {}

    def fwd_bwd():
        box["loss"] = loss = engine(x).float().pow(2).mean()
        engine.backward(loss)

    for i in range(cfg["warmup"] + cfg["steps"]):
        t_fb = harness.time_call(env, fwd_bwd)
        if i == 1:  # Adam creates m and v in the first step: look after the second backward (untimed)
            row["inventory"] = inventory(engine, stage)
        t_st = harness.time_call(env, engine.step, barrier=False)
        losses.append(float(box["loss"].item()))
        if i >= cfg["warmup"]:
            fb.append(t_fb)
            st.append(t_st)
    if harness.on_cuda(env):  # PCIe bytes: further steps under the profiler, after (never during) the timing
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(cfg["memcpy_steps"]):
                fwd_bwd()
                engine.step()
            harness.sync(env)
        row["memcpy_bytes"] = memcpy_bytes(prof)
        row["memcpy_steps"] = cfg["memcpy_steps"]
    mem.__exit__(None, None, None)
    # the step lasts as long as its slowest rank: max over ranks per iteration, then the median
    t = harness.max_over_ranks(env, fb + st)
    fb, st = t[:len(fb)], t[len(fb):]
    row.update({"ok": True, "fwd_bwd_ms_median": statistics.median(fb) * 1e3,
                "step_ms_median": statistics.median(st) * 1e3, "losses": losses})
    if harness.on_cuda(env):
        row["gpu_max_allocated_bytes"] = mem.peak            # since this configuration started
        row["gpu_allocated_at_start_bytes"] = mem.base       # what earlier configurations left behind
    engine.destroy() if hasattr(engine, "destroy") else None
    del engine
    gc.collect()
    return row


def host_probe(cfg: dict, env: harness.Env, cpu_adam_cls=None) -> dict:
    """Host memory copy bandwidth, a CPU AdamW step (and a DeepSpeedCPUAdam step where it loads), and
    (CUDA only) pinned PCIe copy bandwidth."""
    numel, reps = cfg["probe_numel"], cfg["probe_reps"]

    def timed(fn) -> float:
        return statistics.median(harness.time_call(env, fn) for _ in range(reps))

    src = torch.randn(numel)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t_copy = timed(lambda: dst.copy_(src))

    def adam_step_s(cls) -> float:
        p = torch.nn.Parameter(torch.randn(numel))
        p.grad = torch.randn(numel)
        opt = cls([p], lr=1e-3)
        opt.step()  # creates m and v
        return timed(opt.step)

    t_adam = adam_step_s(torch.optim.AdamW)
    out = {"numel": numel, "reps": reps, "threads": torch.get_num_threads(),
           "copy_ms": t_copy * 1e3, "copy_GBps": 2 * numel * 4 / t_copy / 1e9,  # read + write
           "adam_ms": t_adam * 1e3,
           "ds_cpu_adam_ms": adam_step_s(cpu_adam_cls) * 1e3 if cpu_adam_cls is not None else None}
    if harness.on_cuda(env):
        nbytes = cfg["probe_pcie_bytes"]
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=env.device)
        dev.copy_(host, non_blocking=True)
        out["pcie_bytes"] = nbytes
        out["pcie_h2d_GBps"] = nbytes / timed(lambda: dev.copy_(host, non_blocking=True)) / 1e9
        out["pcie_d2h_GBps"] = nbytes / timed(lambda: host.copy_(dev, non_blocking=True)) / 1e9
    return out


def options(parser) -> None:
    parser.add_argument("--configs", default=None, help="comma-separated subset of " + ",".join(CONFIGS)
                        + " (default: the preset's list, else all)")
    parser.add_argument("--cpu-adam", choices=("auto", "on", "off"), default="auto",
                        help="DeepSpeedCPUAdam for the offloading configurations: auto = on a GPU machine, or "
                             "where the op is already built (default); on = build it if need be; off = torch AdamW")
    parser.add_argument("--pin-memory", choices=("auto", "true", "false"), default="auto",
                        help="pin_memory of the offloaded states: auto = true on CUDA, false on CPU")


def check(args, cfg) -> None:
    args.configs = [c for c in (args.configs or ",".join(cfg.get("configs", CONFIGS))).split(",") if c]
    bad = [c for c in args.configs if c not in CONFIGS]
    if bad:
        raise harness.UsageError(f"unknown config(s) {bad}; choose from {list(CONFIGS)}")


def measure(env, cfg, args):
    warnings.filterwarnings("ignore")
    import deepspeed
    from deepspeed.ops.op_builder import AsyncIOBuilder, CPUAdamBuilder

    deepspeed.init_distributed(dist_backend=env.backend)
    names = args.configs
    pin = harness.on_cuda(env) if args.pin_memory == "auto" else args.pin_memory == "true"
    ops = {}
    for name, builder in (("cpu_adam", CPUAdamBuilder), ("async_io", AsyncIOBuilder)):
        try:
            ops[name] = {"compatible": bool(builder().is_compatible(verbose=False))}
        except Exception as exc:  # pragma: no cover - depends on the installation
            ops[name] = {"compatible": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    cpu_adam_cls, cpu_adam_why = cpu_adam(args.cpu_adam, env)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ds-nvme-") as nvme_path:
        for name in names:
            row = run_config(name, cfg, env, nvme_path, pin, cpu_adam_cls)
            rows.append({"rank": env.rank, **row})
            dist.barrier()
            if env.is_main:
                msg = (f"fwd+bwd {row['fwd_bwd_ms_median']:.2f} ms  step {row['step_ms_median']:.2f} ms"
                       if row["ok"] else row["error"][:160])
                print(f"{name:>20}  psi={row['psi']}  {row['client_optimizer']}  {msg}", flush=True)
    probe = host_probe(cfg, env, cpu_adam_cls)
    rows.append({"rank": env.rank, "config": "host_probe", "ok": True, "probe": probe})
    if env.is_main:
        print(f"host probe: copy {probe['copy_GBps']:.2f} GB/s, AdamW step on {probe['numel']:,} params "
              f"{probe['adam_ms']:.1f} ms", flush=True)
    # every rank's inventory goes into the file: gather the rows on rank 0
    measurements = [r for per_rank in harness.gather(rows) for r in per_rank]
    offload_opt = cpu_adam_cls.__name__ if cpu_adam_cls is not None else "torch.optim.AdamW"
    params = {**{k: v for k, v in cfg.items() if k != "configs"}, "configs": names, "dtype": "bfloat16",
              "optimizer": f"{offload_opt} for the offloading configurations, torch.optim.AdamW without "
                           "offload (client optimizer, zero_force_ds_cpu_optimizer=false)",
              "cpu_adam": {"used": cpu_adam_cls is not None, "mode": args.cpu_adam, "why": cpu_adam_why},
              "pin_memory": pin, "op_builders": ops,
              "timing": "per step: barrier, synchronize, forward+backward, then (synchronize) engine.step(), each "
                        "between " + ("CUDA events" if harness.on_cuda(env) else "time.perf_counter calls")
                        + ", no profiler running; max over ranks; median over measured steps. Host probe: per "
                        "rank, all ranks at once, median of probe_reps (copy bandwidth counts read + write)"}
    return params, measurements


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=1,
                          options=options, check=check))

"""DeepSpeed ZeRO stages 0–3: per-rank model-state bytes and collective traffic, measured.

One launch = one world size N. For each ZeRO stage 0, 1, 2, 3 the program builds the same MLP
(a stack of `layers` Linear(d, d) layers, ψ = layers·(d² + d) parameters), wraps it with
deepspeed.initialize (bf16, torch.optim.Adam via "zero_allow_untested_optimizer": the fused
and CPU Adam kernels need compiled ops, which this install does not build), runs a warm-up
step, then one instrumented step, and records

  * per_rank_bytes: bytes held by the engine's own tensors, on every rank —
      params    16-bit parameters: stage 0 the module's tensors, stages 1–2 the flat
                buffer `bit16_groups_flat`, stage 3 each parameter's shard `ds_tensor`;
      grads     16-bit gradients, the most held at once during the instrumented backward
                (sampled at every collective call of backward and when engine.backward
                returns; the samples are kept in grad_trace): the union
                of the memory of every `param.grad`, `grads_in_partition`,
                `averaged_gradients` and `grad_partitions_flat_buffer`. The reduce bucket
                (`ipg` buffer, `reduce_bucket_size` elements) is reported apart;
      optimizer fp32 master copy + Adam exp_avg + exp_avg_sq of the inner torch optimizer
                (the 4-byte `step` counters are listed apart in optimizer_parts);
  * comm: calls and bytes per torch.distributed collective in the instrumented step
    (gpu_runs/comm_counter.py, plus the functions DeepSpeed captured at start-up), also
    split by phase (forward / backward / step);
  * stage 3: parameter all-gathers in forward and in backward, and the number of layers;
    and `zero_init`: the same model built inside deepspeed.zero.Init — per rank, the bytes of the
    16-bit shards (`ds_tensor`) and the elements left in `param.data` right after construction
    (a model that is never materialised whole on any rank).

    torchrun --standalone --nproc_per_node=4 gpu_runs/zero_bench.py               # CPU, gloo
    torchrun --standalone --nproc_per_node=1 gpu_runs/zero_bench.py               # N = 1
    torchrun --standalone --nproc_per_node=2 gpu_runs/zero_bench.py --preset tiny --no-save
    torchrun --standalone --nproc_per_node=8 gpu_runs/zero_bench.py --preset gpu                  # GPUs, NCCL
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from gpu_runs.comm_counter import CommCounter  # noqa: E402

PROGRAM = "zero_bench"
PRESETS = {
    "tiny": {"layers": 2, "dim": 64, "batch": 4, "timed_steps": 1, "reduce_variant": False},
    "full": {"layers": 6, "dim": 512, "batch": 8, "timed_steps": 5, "reduce_variant": True},
    # CUDA + NCCL (make gpu-runs): ψ ≈ 1.3e8, large enough that the 16-bit buffers dominate and step times mean something
    "gpu": {"layers": 8, "dim": 4096, "batch": 16, "timed_steps": 10, "reduce_variant": True},
}
STAGES = (0, 1, 2, 3)


# --------------------------------------------------------------------------- model

def make_model(layers: int, dim: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(dim, dim) for _ in range(layers)])


def ds_config(stage: int, layer_numel: int, batch: int, multi_rank_allreduce: bool = True) -> dict:
    zero = {
        "stage": stage,
        # one reduce bucket per layer: stage 2 frees the other ranks' gradients bucket by bucket
        "reduce_bucket_size": layer_numel,
        "allgather_bucket_size": 1 << 24,
        "use_multi_rank_bucket_allreduce": multi_rank_allreduce,
    }
    if stage == 3:
        # the paper's schedule: every layer gathered before its forward and again before its
        # backward, released after use (no persistent small params, no reuse, no prefetch)
        zero.update({"stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
                     "stage3_prefetch_bucket_size": 0, "stage3_max_live_parameters": 0})
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "zero_optimization": zero,
            "zero_allow_untested_optimizer": True, "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False}


# --------------------------------------------------------------------------- bytes

def nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def union_bytes(tensors) -> int:
    """Bytes covered by the union of the tensors' memory ranges (views counted once)."""
    spans = sorted((t.data_ptr(), t.data_ptr() + nbytes(t)) for t in tensors
                   if isinstance(t, torch.Tensor) and t.numel())
    total, end = 0, -1
    for a, b in spans:
        if a >= end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def ipg_buffers(opt) -> list:
    out = []
    for bucket in getattr(opt, "ipg_buckets", {}).values():
        buf = getattr(bucket, "buffer", None)
        out += [b for b in buf if isinstance(b, torch.Tensor)] if isinstance(buf, list) else [buf]
    return [b for b in out if isinstance(b, torch.Tensor)]


def grad_tensors(engine) -> list:
    opt = engine.optimizer
    ts = [p.grad for p in engine.module.parameters() if p.grad is not None]
    for name in ("grads_in_partition", "grad_partitions_flat_buffer"):
        t = getattr(opt, name, None)
        if isinstance(t, torch.Tensor):
            ts.append(t)
    ag = getattr(opt, "averaged_gradients", None)
    if isinstance(ag, dict):
        for v in ag.values():
            ts += [t for t in (v or []) if isinstance(t, torch.Tensor)]
    return ts


def param_bytes(engine, stage: int) -> tuple[int, int]:
    """(16-bit parameter bytes held by this rank, padding elements in the partitioning)."""
    opt, params = engine.optimizer, list(engine.module.parameters())
    psi = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in params)
    if stage == 3:
        shards = [p.ds_tensor for p in params]
        held = sum(nbytes(s) for s in shards) + sum(nbytes(p.data) for p in params)  # p.data is empty when released
        return held, sum(s.numel() for s in shards) * dist.get_world_size() - psi
    if stage in (1, 2):
        flat = opt.bit16_groups_flat
        return sum(nbytes(f) for f in flat), sum(f.numel() for f in flat) - psi
    return union_bytes([p.data for p in params]), 0


def optimizer_parts(engine, stage: int) -> dict:
    opt = engine.optimizer
    if stage == 0:
        master = [t for g in opt.fp32_groups for t in g]
    elif stage in (1, 2):
        master = list(opt.single_partition_of_fp32_groups)
    else:
        master = list(opt.fp32_partitioned_groups_flat)
    state = opt.optimizer.state.values()  # the inner torch.optim.Adam
    return {"fp32_master": sum(nbytes(t) for t in master),
            "exp_avg": sum(nbytes(s.get("exp_avg")) for s in state),
            "exp_avg_sq": sum(nbytes(s.get("exp_avg_sq")) for s in state),
            "step": sum(nbytes(s.get("step")) for s in state)}


# --------------------------------------------------------------------------- counting

class _Calls(list):
    """CommCounter's call list; each append also tags the phase and samples gradient bytes."""

    def __init__(self, probe):
        super().__init__()
        self.probe = probe
        self.phases: list[str] = []

    def append(self, item):
        super().append(item)
        self.phases.append(self.probe.phase)
        self.probe.sample()


class StepProbe(CommCounter):
    """CommCounter that also sees the collectives DeepSpeed captured before the counter started
    (TorchBackend keeps all_gather_into_tensor / reduce_scatter_tensor as attributes, and
    ZeRO-3's coalesced gather calls torch.distributed.distributed_c10d directly)."""

    def __init__(self, engine):
        super().__init__()
        self.engine = engine
        self.phase = "idle"
        self.grad_peak = 0
        self.bucket_peak = 0
        self.trace: list[list] = []  # [phase, op or "end of backward", gradient bytes, bucket bytes]
        self.calls = _Calls(self)
        self._extra = []

    def sample(self, label=None):
        g = union_bytes(grad_tensors(self.engine))
        b = sum(nbytes(t) for t in ipg_buffers(self.engine.optimizer))
        self.grad_peak, self.bucket_peak = max(self.grad_peak, g), max(self.bucket_peak, b)
        if self.phase == "backward" or label:
            self.trace.append([self.phase, label or self.calls[-1][0], g, b])

    def __enter__(self):
        super().__enter__()
        import deepspeed.comm.comm as dscomm

        cdb = dscomm.cdb
        for obj, attr, name in ((cdb, "all_gather_function", "all_gather_into_tensor"),
                                (cdb, "reduce_scatter_function", "reduce_scatter_tensor"),
                                (c10d, "all_gather_into_tensor", "all_gather_into_tensor"),
                                (c10d, "reduce_scatter_tensor", "reduce_scatter_tensor"),
                                (c10d, "all_reduce", "all_reduce")):
            if obj is not None and hasattr(obj, attr):
                self._extra.append((obj, attr, getattr(obj, attr)))
                setattr(obj, attr, getattr(dist, name))
        return self

    def __exit__(self, *exc):
        for obj, attr, orig in reversed(self._extra):
            setattr(obj, attr, orig)
        self._extra.clear()
        return super().__exit__(*exc)

    def by_phase(self) -> dict:
        out: dict = {}
        for (name, b), ph in zip(self.calls, self.calls.phases):
            d = out.setdefault(ph, {}).setdefault(name, {"calls": 0, "bytes": 0})
            d["calls"] += 1
            d["bytes"] += b
        return out


def zero_init_probe(cfg: dict, env) -> dict:
    """Build the model inside deepspeed.zero.Init (ZeRO-3 config): what each rank holds right after construction."""
    import deepspeed

    conf = ds_config(3, cfg["dim"] ** 2 + cfg["dim"], cfg["batch"])
    with deepspeed.zero.Init(config_dict_or_path=conf):
        model = make_model(cfg["layers"], cfg["dim"])
    params = list(model.parameters())
    mine = {"rank": env.rank, "psi": sum(p.ds_numel for p in params),
            "shard_numel": sum(p.ds_tensor.numel() for p in params),
            "shard_bytes": sum(nbytes(p.ds_tensor) for p in params),
            "shard_dtype": str(params[0].ds_tensor.dtype).replace("torch.", ""),
            "param_data_numel": sum(p.data.numel() for p in params)}
    gathered = [None] * env.world_size
    dist.all_gather_object(gathered, mine)
    del model, params
    return {"per_rank": gathered}


# --------------------------------------------------------------------------- one stage

def run_stage(stage: int, cfg: dict, env, multi_rank_allreduce: bool = True, timed: bool = True) -> dict:
    import deepspeed

    layers, dim, batch = cfg["layers"], cfg["dim"], cfg["batch"]
    model = make_model(layers, dim)
    psi = sum(p.numel() for p in model.parameters())
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optim,
                                      config=ds_config(stage, dim * dim + dim, batch, multi_rank_allreduce))
    gen = torch.Generator().manual_seed(1000 + env.rank)
    x = torch.randn(batch, dim, generator=gen).to(device=env.device, dtype=torch.bfloat16)

    def train_step(probe=None):
        if probe:
            probe.phase = "forward"
        loss = engine(x).float().pow(2).mean()
        if probe:
            probe.phase = "backward"
        engine.backward(loss)
        if probe:
            probe.sample("end of backward")  # also covers N = 1 paths without collectives
            probe.phase = "step"
        engine.step()
        return loss

    train_step()  # warm-up: Adam state is created lazily at the first step
    with harness.PeakMemory(env) as mem, StepProbe(engine) as probe:
        train_step(probe)
    opt_parts = optimizer_parts(engine, stage)
    p_bytes, padding = param_bytes(engine, stage)
    mine = {"params": p_bytes, "grads": probe.grad_peak,
            "optimizer": opt_parts["fp32_master"] + opt_parts["exp_avg"] + opt_parts["exp_avg_sq"]}
    gathered = [None] * env.world_size
    dist.all_gather_object(gathered, {"rank": env.rank, **mine,
                                      "grads_end_of_backward": probe.trace[-1][2],
                                      "reduce_bucket": probe.bucket_peak, "padding_elements": padding,
                                      "optimizer_parts": opt_parts, "grad_trace": probe.trace})
    rec = {"stage": stage, "world_size": env.world_size, "psi": psi, "dtype": "bfloat16",
           "per_rank_bytes": mine, "per_rank_bytes_all": gathered,
           "comm": probe.summary(), "comm_by_phase": probe.by_phase(),
           "optimizer_class": type(engine.optimizer).__name__,
           "use_multi_rank_bucket_allreduce": multi_rank_allreduce,
           # CUDA only: the caching allocator during the instrumented step (reset at its start)
           "cuda_allocated_before_step": mem.base, "cuda_peak_step": mem.peak}
    if stage == 3:
        ph = rec["comm_by_phase"]
        rec["zero3_allgathers"] = {
            "forward": ph.get("forward", {}).get("all_gather_into_tensor", {}).get("calls", 0),
            "backward": ph.get("backward", {}).get("all_gather_into_tensor", {}).get("calls", 0),
            "layers": layers}
    rec["step_time_s"] = None  # not timed: more processes than cores would time the scheduler
    if timed:  # per step: barrier, synchronize, then the step between CUDA events; slowest rank per step
        times = harness.max_over_ranks(env, [harness.time_call(env, train_step) for _ in range(cfg["timed_steps"])])
        rec["step_time_s"] = {"median": statistics.median(times), "min": min(times),
                              "label": f"CPU ({env.backend}, {env.world_size} processes on "
                                       f"{os.cpu_count()} cores)" if env.device.type == "cpu"
                              else f"GPU ({env.backend})"}
    if hasattr(engine, "destroy"):
        engine.destroy()
    del engine, model, optim
    return rec


def options(parser) -> None:
    parser.add_argument("--stages", default="0,1,2,3", help="comma-separated subset of 0,1,2,3")


def check(args, cfg) -> None:
    args.stages = [int(s) for s in args.stages.split(",") if s]
    if any(s not in STAGES for s in args.stages):
        raise harness.UsageError(f"stages must be in {STAGES}, got {args.stages}")


def measure(env, cfg, args):
    import deepspeed

    deepspeed.init_distributed(dist_backend=env.backend)  # reuses the harness's process group
    rows = []
    for stage in args.stages:
        rec = run_stage(stage, cfg, env, timed=not args.no_timing)
        if stage in (1, 2) and cfg["reduce_variant"]:  # the same step with DeepSpeed's per-destination reduce path
            alt = run_stage(stage, cfg, env, multi_rank_allreduce=False, timed=False)
            rec["comm_variant_reduce"] = {"use_multi_rank_bucket_allreduce": False, "comm": alt["comm"],
                                          "per_rank_bytes": alt["per_rank_bytes"]}
        if stage == 3:
            rec["zero_init"] = zero_init_probe(cfg, env)
        rows.append(rec)
        if env.is_main:
            c = ", ".join(f"{k} {v['calls']}×/{v['bytes']} B" for k, v in rec["comm"].items())
            print(f"stage {stage} N={env.world_size} psi={rec['psi']} bytes/rank {rec['per_rank_bytes']} | {c}",
                  flush=True)
    params = {**cfg, "stages": args.stages, "dtype": "bfloat16",
              "optimizer": "torch.optim.Adam (zero_allow_untested_optimizer)",
              "zero_config": {s: ds_config(s, cfg["dim"] ** 2 + cfg["dim"], cfg["batch"])["zero_optimization"]
                              for s in args.stages},
              "measured": "one step after a warm-up step; per_rank_bytes.grads = peak during backward",
              "timing": "per timed step: " + harness.timing_note(env, "the step")
                        + "; max over ranks per step; median and min over timed_steps"}
    return params, rows


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, options=options, check=check,
                          timing_flag=True))

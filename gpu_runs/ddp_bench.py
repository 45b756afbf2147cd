"""DistributedDataParallel measured: equivalence with global-batch SGD, construction and buffer sync, buckets, overlap.

One torchrun program for Chapter 2's distributed measurements (Ch2-01, Ch2-02, Ch2-03). On every rank it
records:

  * equivalence (Ch2-01): K SGD steps of DDP against one process on the concatenated global batch:
    losses, max |Δθ| per step, whether the ranks' parameters are bitwise equal to each other and to the
    reference;
  * construction (Ch2-02): parameters seeded differently on every rank, checksums before and after
    wrapping (DDP broadcasts rank 0's parameters and buffers);
  * buffers (Ch2-02): BatchNorm running_mean seen at the start of each forward and after it, with
    forward_sync_buffers True/False; local vs global batch statistics; whether SyncBatchNorm runs here;
  * buckets (Ch2-03): a comm hook records, for iterations 0..3, each bucket's index, bytes and parameter
    names, for a sweep of bucket_cap_mb, with static_graph and find_unused_parameters;
  * overlap (Ch2-03): per-parameter gradient-ready times (register_post_accumulate_grad_hook) against
    each bucket's all-reduce launch (hook call) and completion (future callback), one step. Every time
    is a harness.Clock mark: on a GPU a CUDA event recorded in the hook on the current stream (in the
    completion callback: the stream that waits for the all-reduce), read after the step, so nothing
    synchronises inside backward; on CPU time.perf_counter;
  * a torch.profiler summary of a few steps (CPU time, and on a GPU device time);
  * timing (Ch2-03, only with --timing on as many processes as cores): median step time over a sweep
    of bucket_cap_mb, the local compute times and per-parameter ready times without communication,
    and all_reduce times at several sizes (for the α-β fit). On CPU + gloo these are CPU results.

    torchrun --nproc_per_node=2 gpu_runs/ddp_bench.py                  # CPU, gloo (timing)
    torchrun --nproc_per_node=4 gpu_runs/ddp_bench.py --no-timing      # CPU, counts only
    torchrun --nproc_per_node=8 gpu_runs/ddp_bench.py --preset gpu     # 8 GPUs, NCCL
    torchrun --nproc_per_node=2 gpu_runs/ddp_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import hashlib
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

PROGRAM = "ddp_bench"
PRESETS = {
    # eq: the equivalence model (width, rows per rank, SGD steps); d/layers/batch: the bucket model;
    # caps: bucket_cap_mb sweep (None = DDP's default); iters/warmup: timed steps per cap
    "tiny": {"eq": {"d": 16, "b": 4, "steps": 3}, "d": 64, "layers": 2, "batch": 8,
             "caps": [0.02, None], "overlap_cap": 0.02, "warmup": 1, "iters": 3,
             "sizes": [1024, 65536], "ar_iters": 3, "prof_steps": 1},
    "full": {"eq": {"d": 64, "b": 16, "steps": 5}, "d": 512, "layers": 6, "batch": 64,
             "caps": [0.25, 0.5, 1, 2, 4, 8, 16, None], "overlap_cap": 1, "warmup": 5, "iters": 40,
             "sizes": [4096, 65536, 262144, 1048576, 4194304, 8388608], "ar_iters": 20, "prof_steps": 3},
    "gpu": {"eq": {"d": 64, "b": 16, "steps": 5}, "d": 2048, "layers": 8, "batch": 256,
            "caps": [1, 4, 16, 25, 64, 256, None], "overlap_cap": 25, "warmup": 10, "iters": 50,
            "sizes": [65536, 1048576, 16777216, 67108864, 268435456], "ar_iters": 20, "prof_steps": 3},
}
LR = 0.1
BUCKET_ITERS = 4  # iterations 0..3 are recorded: 0 is before any rebuild


# ---------------------------------------------------------------- models

class Mlp(nn.Module):
    """The equivalence model: no BatchNorm, so the per-rank and the global computations are the same math."""

    def __init__(self, d: int):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(d, 2 * d), nn.Linear(2 * d, 2 * d), nn.Linear(2 * d, 1)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x))))).squeeze(-1)


class BucketNet(nn.Module):
    """`head` is registered first but used last, so model.parameters() order is not the backward order."""

    def __init__(self, d: int, layers: int):
        super().__init__()
        self.head = nn.Linear(d, d)
        self.embed = nn.Linear(d, d)
        self.blocks = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = F.relu(b(x))
        return self.head(x)


class BnNet(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc1, self.bn, self.fc2 = nn.Linear(d, d), nn.BatchNorm1d(d), nn.Linear(d, 1)

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x))))


def digest(module: nn.Module) -> str:
    """SHA-256 of every parameter and buffer's bytes: equal digests = bitwise equal states."""
    h = hashlib.sha256()
    for t in list(module.parameters()) + list(module.buffers()):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


gather = harness.gather


# ---------------------------------------------------------------- Ch2-01: equivalence

def eq_data(cfg: dict, n: int, step: int):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(n * cfg["b"], cfg["d"], generator=g)
    return x, torch.sin(x.sum(1))


def equivalence(cfg: dict, env: harness.Env) -> dict:
    n, r, b = env.world_size, env.rank, cfg["b"]
    torch.manual_seed(0)
    ref = Mlp(cfg["d"]).to(env.device)
    torch.manual_seed(0)
    model = DDP(Mlp(cfg["d"]).to(env.device))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ropt = torch.optim.SGD(ref.parameters(), lr=LR)
    rows = []
    for step in range(cfg["steps"]):
        x, y = (t.to(env.device) for t in eq_data(cfg, n, step))
        opt.zero_grad()
        loss = F.mse_loss(model(x[r * b:(r + 1) * b]), y[r * b:(r + 1) * b])
        loss.backward()
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        mean_loss /= n
        ropt.zero_grad()
        rloss = F.mse_loss(ref(x), y)  # one process, the whole global batch B = N·b
        rloss.backward()
        ropt.step()
        diffs = [(p - q).abs() for p, q in zip(model.module.parameters(), ref.parameters())]
        digests = gather(digest(model.module))
        rows.append({"step": step, "ddp_loss": float(mean_loss), "ref_loss": float(rloss.detach()),
                     "max_abs_param_diff": max(float(d.max()) for d in diffs),
                     "params_differing": int(sum(int((d > 0).sum()) for d in diffs)),
                     "ranks_bitwise_equal": len(set(digests)) == 1,
                     "bitwise_equal_to_reference": digests[0] == digest(ref)})
    return {"cfg": cfg, "psi": sum(p.numel() for p in ref.parameters()), "rows": rows, "lr": LR}


# ---------------------------------------------------------------- Ch2-02: construction and buffers

def construction(cfg: dict, env: harness.Env) -> dict:
    torch.manual_seed(1000 + env.rank)  # deliberately different initial weights on every rank
    m = BnNet(cfg["d"]).to(env.device)
    with torch.no_grad():
        m.bn.running_mean.add_(env.rank + 1.0)  # and different buffers
    before = gather(digest(m))
    model = DDP(m)
    after = gather(digest(model.module))
    torch.manual_seed(2000 + env.rank)
    m2 = BnNet(cfg["d"]).to(env.device)
    DDP(m2, init_sync=False)
    no_sync = gather(digest(m2))
    return {"before": before, "after": after, "init_sync_false": no_sync}


def buffers(cfg: dict, env: harness.Env, forward_sync: bool, steps: int = 3) -> dict:
    torch.manual_seed(0)
    model = DDP(BnNet(cfg["d"]).to(env.device), forward_sync_buffers=forward_sync)
    seen: list[list[float]] = []
    model.module.bn.register_forward_pre_hook(lambda mod, a: seen.append(mod.running_mean[:3].tolist()))
    rows = []
    for step in range(steps):
        g = torch.Generator().manual_seed(10 * step + env.rank)  # every rank its own data
        x = (torch.randn(cfg["b"], cfg["d"], generator=g) + env.rank).to(env.device)
        model(x).sum().backward()
        at_start = gather(seen[-1])
        after = gather(model.module.bn.running_mean[:3].tolist())
        rows.append({"step": step, "at_forward_start": at_start, "after_forward": after,
                     "equal_at_start": all(a == at_start[0] for a in at_start),
                     "equal_after": all(a == after[0] for a in after)})
    return {"forward_sync_buffers": forward_sync, "rows": rows}


def batch_stats(cfg: dict, env: harness.Env) -> dict:
    """Local BatchNorm statistics vs the global-batch ones SyncBatchNorm would use; does SyncBN run here?"""
    g = torch.Generator().manual_seed(7 + env.rank)
    h = (torch.randn(cfg["b"], cfg["d"], generator=g) + 2.0 * env.rank).to(env.device)
    local_mean = h.mean(0)
    stats = torch.stack([h.sum(0), (h * h).sum(0), torch.full_like(h[0], h.shape[0])])
    dist.all_reduce(stats)  # the global statistics SyncBatchNorm reconstructs (it all-gathers per-rank mean, invstd and count)
    global_mean = stats[0] / stats[2]
    rec = {"local_mean0": gather(float(local_mean[0])), "global_mean0": float(global_mean[0]),
           "max_local_vs_global": max(gather(float((local_mean - global_mean).abs().max())))}
    bn = nn.SyncBatchNorm(cfg["d"]).to(env.device)
    try:
        bn(h)
        rec["syncbn_runs"] = True
        rec["syncbn_error"] = None
        rec["syncbn_running_mean_matches_global"] = bool(torch.allclose(
            bn.running_mean, 0.9 * torch.zeros_like(global_mean) + 0.1 * global_mean, atol=1e-5))
    except ValueError as exc:
        rec["syncbn_runs"] = False
        rec["syncbn_error"] = str(exc)
        rec["syncbn_running_mean_matches_global"] = None
    return rec


# ---------------------------------------------------------------- Ch2-03: buckets and overlap

def bucket_data(cfg: dict, env: harness.Env, it: int):
    g = torch.Generator().manual_seed(1000 * it + env.rank)
    x = torch.randn(cfg["batch"], cfg["d"], generator=g)
    return x.to(env.device), torch.randn(cfg["batch"], cfg["d"], generator=g).to(env.device)


def names_by_ptr(model: nn.Module) -> dict[int, str]:
    return {p.data_ptr(): k for k, p in model.named_parameters()}


def bucket_layouts(cfg: dict, env: harness.Env, label: str, cap, **ddp_kw) -> dict:
    torch.manual_seed(0)
    net = BucketNet(cfg["d"], cfg["layers"]).to(env.device)
    model = DDP(net, bucket_cap_mb=cap, **ddp_kw)
    names = names_by_ptr(net)
    log: list[dict] = []
    it_box = [0]

    def hook(state, bucket):
        log.append({"iter": it_box[0], "index": bucket.index(),
                    "bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
                    "params": [names[p.data_ptr()] for p in bucket.parameters()]})
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for it in range(BUCKET_ITERS):
        it_box[0] = it
        x, y = bucket_data(cfg, env, it)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    iters = [[{k: e[k] for k in ("index", "bytes", "params")} for e in log if e["iter"] == it]
             for it in range(BUCKET_ITERS)]
    return {"label": label, "bucket_cap_mb": cap, **{k: v for k, v in ddp_kw.items()}, "iterations": iters}


def overlap(cfg: dict, env: harness.Env, cap, steps: int = 4) -> dict:
    """One step after the rebuild: gradient-ready times vs bucket launch and completion (seconds from backward start).

    The hooks only take marks (harness.Clock: a CUDA event on the current stream, or perf_counter on CPU);
    the marks are read after backward, so the instrumentation does not serialise backward with NCCL."""
    torch.manual_seed(0)
    net = BucketNet(cfg["d"], cfg["layers"]).to(env.device)
    model = DDP(net, bucket_cap_mb=cap)
    names = names_by_ptr(net)
    clock = harness.Clock(env)
    ready: dict = {}
    launches: list[dict] = []

    for k, p in net.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, k=k: ready.update({k: clock.mark()}) and None)

    def hook(state, bucket):
        rec = {"index": bucket.index(), "bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
               "params": [names[p.data_ptr()] for p in bucket.parameters()], "launch": clock.mark()}
        launches.append(rec)
        fut = allreduce_hook(state, bucket)

        def done(f):
            # on CUDA this callback runs on a stream that waits for the all-reduce (torch.futures then):
            # an event recorded here completes when the all-reduce has; on gloo the work has completed
            rec["done"] = clock.mark()
            return f.value()

        return fut.then(done)

    model.register_comm_hook(None, hook)
    for it in range(steps):
        ready.clear()
        launches.clear()
        x, y = bucket_data(cfg, env, it)
        model.zero_grad()
        loss = F.mse_loss(model(x), y)
        clock.start(barrier=True)
        loss.backward()
        end = clock.mark()
    clock.resolve()  # after the step: now every mark can be read
    at = clock.since_start
    buckets = [{**b, "launch": at(b["launch"]), "done": at(b["done"])} for b in launches]
    return {"bucket_cap_mb": cap, "param_ready": {k: at(m) for k, m in ready.items()}, "buckets": buckets,
            "backward_end": at(end), "clock": "CUDA events" if clock.cuda else "time.perf_counter"}


def profile_summary(cfg: dict, env: harness.Env, cap, steps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = DDP(BucketNet(cfg["d"], cfg["layers"]).to(env.device), bucket_cap_mb=cap)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for it in range(2):  # past the rebuild
        x, y = bucket_data(cfg, env, it)
        F.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for it in range(steps):
            x, y = bucket_data(cfg, env, it + 2)
            F.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    rows = []
    for e in prof.key_averages():
        rows.append({"name": e.key, "count": int(e.count), "cpu_total_us": float(e.cpu_time_total),
                     # the kernels' time on the GPU (NCCL's included); 0 on CPU
                     "device_total_us": float(getattr(e, "device_time_total", 0.0))})
    keep = [r for r in rows if any(s in r["name"].lower() for s in ("all_reduce", "allreduce", "gloo", "nccl"))]
    top = sorted(rows, key=lambda r: -r["cpu_total_us"])[:12]
    # the Reducer's own ops (copy into the bucket with the 1/N scaling, copy back), whatever their rank in `top`
    reducer = [r for r in rows if "reducer" in r["name"]]
    return {"bucket_cap_mb": cap, "steps": steps, "comm_events": keep, "top": top, "reducer_events": reducer}


# ---------------------------------------------------------------- Ch2-03: timing

def med_max(times: list[float], env: harness.Env) -> float:
    return statistics.median(harness.max_over_ranks(env, times))


def ready_med_max(ready: dict[str, list[float]], env: harness.Env) -> dict[str, float]:
    """Per-parameter ready time: the slowest rank's at each step, then the median over steps — the same
    statistic as `med_max` gives backward_s, so the two can be compared (a tail is max over ranks)."""
    keys = list(ready)
    flat = harness.max_over_ranks(env, [v for k in keys for v in ready[k]])
    n = len(ready[keys[0]]) if keys else 0
    return {k: statistics.median(flat[i * n:(i + 1) * n]) for i, k in enumerate(keys)}


def time_steps(cfg: dict, env: harness.Env, model, opt) -> float:
    def step(it):
        x, y = bucket_data(cfg, env, it)
        return lambda: (F.mse_loss(model(x), y).backward(), opt.step(), opt.zero_grad())

    times = [harness.time_call(env, step(it)) for it in range(cfg["warmup"] + cfg["iters"])]
    return med_max(times[cfg["warmup"]:], env)


def local_profile(cfg: dict, env: harness.Env) -> dict:
    """No DDP: forward, backward, optimizer times and per-parameter ready times (medians over steps).

    One fence before the forward; the phase boundaries and the ready hooks only take marks, read after
    the step (on a GPU the phases are not separated by synchronizes that would idle the device)."""
    torch.manual_seed(0)
    net = BucketNet(cfg["d"], cfg["layers"]).to(env.device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    clock = harness.Clock(env)
    marks: dict = {}
    ready: dict[str, list[float]] = {k: [] for k, _ in net.named_parameters()}

    for k, p in net.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, k=k: marks.update({k: clock.mark()}) and None)
    fwd, bwd, step = [], [], []
    for it in range(cfg["warmup"] + cfg["iters"]):
        x, y = bucket_data(cfg, env, it)
        marks.clear()
        clock.start(barrier=True)
        t0 = clock.mark()
        loss = F.mse_loss(net(x), y)
        t1 = clock.mark()
        loss.backward()
        t2 = clock.mark()
        opt.step()
        opt.zero_grad()
        t3 = clock.mark()
        clock.resolve()
        if it >= cfg["warmup"]:
            fwd.append(clock.seconds(t0, t1))
            bwd.append(clock.seconds(t1, t2))
            step.append(clock.seconds(t2, t3))
            for k, m in marks.items():  # from backward start, as before: the window DDP overlaps into
                ready[k].append(clock.seconds(t1, m))
    return {"forward_s": med_max(fwd, env), "backward_s": med_max(bwd, env), "optimizer_s": med_max(step, env),
            "param_ready_s": ready_med_max(ready, env),
            "param_bytes": {k: p.numel() * p.element_size() for k, p in net.named_parameters()}}


def allreduce_times(cfg: dict, env: harness.Env) -> list[dict]:
    rows = []
    for s in cfg["sizes"]:
        t = torch.ones(s // 4, device=env.device)
        times = [harness.time_call(env, lambda: dist.all_reduce(t)) for _ in range(3 + cfg["ar_iters"])]
        rows.append({"bytes": s, "median_s": med_max(times[3:], env)})
    return rows


def timing(cfg: dict, env: harness.Env) -> dict:
    local = local_profile(cfg, env)
    sweep = []
    for cap in cfg["caps"]:
        torch.manual_seed(0)
        model = DDP(BucketNet(cfg["d"], cfg["layers"]).to(env.device), bucket_cap_mb=cap)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        sweep.append({"bucket_cap_mb": cap, "step_median_s": time_steps(cfg, env, model, opt)})
    torch.manual_seed(0)
    net = BucketNet(cfg["d"], cfg["layers"]).to(env.device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    local_step = time_steps(cfg, env, net, opt)
    return {"local": local, "local_step_median_s": local_step, "sweep": sweep,
            "allreduce": allreduce_times(cfg, env)}


# ---------------------------------------------------------------- main

def measure(env, cfg, args):
    run_timing = not args.no_timing
    eq = equivalence(cfg["eq"], env)
    cons = construction(cfg["eq"], env)
    bufs = [buffers(cfg["eq"], env, fs) for fs in (True, False)]
    stats = batch_stats(cfg["eq"], env)
    layouts = [bucket_layouts(cfg, env, f"bucket_cap_mb={cap}", cap) for cap in cfg["caps"]]
    layouts.append(bucket_layouts(cfg, env, "static_graph=True", None, static_graph=True))
    layouts.append(bucket_layouts(cfg, env, "find_unused_parameters=True", None, find_unused_parameters=True))
    layouts.append(bucket_layouts(cfg, env, f"find_unused_parameters=True, bucket_cap_mb={cfg['overlap_cap']}",
                                  cfg["overlap_cap"], find_unused_parameters=True))
    torch.manual_seed(0)
    probe = BucketNet(cfg["d"], cfg["layers"])
    params = [{"name": k, "bytes": p.numel() * p.element_size()} for k, p in probe.named_parameters()]
    ov = overlap(cfg, env, cfg["overlap_cap"])
    prof = profile_summary(cfg, env, cfg["overlap_cap"], cfg["prof_steps"])
    measurements = {
        "equivalence": eq, "construction": cons, "buffers": bufs, "batch_stats": stats,
        "model_params": params, "default_first_bucket_bytes": int(dist._DEFAULT_FIRST_BUCKET_BYTES),
        "layouts": layouts, "overlap": ov, "profile": prof,
    }
    if run_timing:
        measurements["timing"] = timing(cfg, env)
    if env.is_main:
        for r in eq["rows"]:
            print(f"eq step {r['step']}: loss {r['ddp_loss']:.6f} vs {r['ref_loss']:.6f} "
                  f"max|Δθ| {r['max_abs_param_diff']:.2e} ranks equal {r['ranks_bitwise_equal']}", flush=True)
        for lay in layouts:
            print(lay["label"], [len(it) for it in lay["iterations"]], flush=True)
        if run_timing:
            for s in measurements["timing"]["sweep"]:
                print(f"cap {s['bucket_cap_mb']}: {s['step_median_s'] * 1e3:.2f} ms", flush=True)
    clock = "CUDA events" if harness.on_cuda(env) else "time.perf_counter"
    pset = {**cfg, "lr": LR, "timing": run_timing, "bucket_iters": BUCKET_ITERS,
            "model": "BucketNet: head (registered first, used last), embed, `layers` × Linear(d, d) + ReLU",
            "timing_method": "per step: " + harness.timing_note(env, "forward+backward+SGD step")
                             + "; max over ranks; median over steps",
            "overlap_method": f"marks ({clock}) taken in the hooks without synchronizing, read after the step"}
    bad = [r["step"] for r in eq["rows"] if not r["ranks_bitwise_equal"]]
    return pset, measurements, f"DDP ranks diverged at steps {bad}" if bad else ""


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2,
                          timing_flag=True))

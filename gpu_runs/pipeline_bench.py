"""torch.distributed.pipelining schedules on 2 ranks, instrumented: per-rank action timelines.

A stack of L square layers is cut into S = p·v stages by hand and each rank builds its own
`PipelineStage`s (one per local chunk; looped placement s = chunk·p + rank for the interleaved
schedules, V placement for ZBV / DualPipeV). Every schedule runs several steps; for each step the
program records, on every rank, what really ran:

  * every call of PipelineStage.forward_one_chunk / backward_one_chunk / backward_weight_one_chunk
    (op, stage, micro-batch, start, end on the host's monotonic clock; one host) — the
    timeline is drawn from these calls, never from the schedule's planned `pipeline_order`. The marks
    are harness.Clock's: on a GPU CUDA events recorded around each call on the compute stream and read
    after the step (no synchronize around a chunk, which would also wait for the pending send/recv and
    serialise them), placed on the host clock by a reference event taken after a barrier and a
    synchronize; on CPU time.perf_counter;
  * the activations alive on the rank, counted twice, each in a step of its own after the timed steps
    (the timed steps carry no memory instrumentation):
      - without touching autograd (LiveCounter): after every forward call the storages that autograd
        saved in that chunk's graph are found by walking the graph and registered as weak references
        (weakref.ref to the untyped storage; nothing keeps them alive); after every call the program
        counts the (stage, micro-batch) pairs whose storages are still alive. This is
        `peak_live_microbatches` and `live_trace`;
      - with autograd saved-tensor hooks (Recorder.hooks), whose pack hook holds each saved tensor:
        `peak_live_microbatches_hooked` and the byte counts `peak_saved_bytes` / `per_mb_saved_bytes`.
        Where the backward is split (input grad, then weight grad: retain_graph=True in torch's
        stage_backward_input, torch/distributed/pipelining/_backward.py:250) the held tensors of a
        non-first stage outlive their graph, so this count is larger than what is really alive: the
        instrumentation changes what it measures, and the file keeps both to show it;
  * the loss and the gradients against the same model run without a pipeline.

Two variants of the same layer:
  * "sleep": each layer's forward, input-grad and weight-grad compute is a fixed sleep (T per
    layer each), so the schedule itself is visible even on 2 shared CPU cores;
  * "real": each layer is a real Linear + tanh (single-threaded matmul), whose time varies.

    torchrun --nproc_per_node=2 gpu_runs/pipeline_bench.py                  # CPU, gloo
    torchrun --nproc_per_node=2 gpu_runs/pipeline_bench.py --preset gpu     # 2 GPUs, NCCL
    torchrun --nproc_per_node=2 gpu_runs/pipeline_bench.py --preset tiny --no-save
"""
from __future__ import annotations

import contextlib
import gc
import sys
import time  # the sleep variant's compute
import weakref
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402
from snippets.common.pipeline_sim import bubble_fraction_of_total, bubble_relative_to_ideal  # noqa: E402

from torch.distributed.pipelining import (  # noqa: E402
    PipelineStage, Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe, ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble, ScheduleLoopedBFS, ScheduleZBVZeroBubble)

PROGRAM = "pipeline_bench"
# layers: L (divisible by 4, at least 2 per stage of a v = 2 schedule, so every stage saves an activation
# that is neither its input nor its output: what LiveCounter counts); d, rows: width and rows per micro-batch of the real variant; sleep_d,
# sleep_rows: the same for the sleep variant (tiny, so its real arithmetic is negligible next to the
# sleeps); sleep_ms: T per layer and per op (forward, input grad, weight grad); steps: measured steps
# per run (after one warm-up step)
PRESETS = {
    "tiny": {"layers": 8, "d": 16, "rows": 4, "sleep_d": 8, "sleep_rows": 2, "sleep_ms": 1.0, "steps": 1,
             "m_all": 4, "m_sweep": [1, 2, 4], "variants": ["sleep", "real"]},
    "full": {"layers": 8, "d": 512, "rows": 128, "sleep_d": 16, "sleep_rows": 4, "sleep_ms": 3.0, "steps": 5,
             "m_all": 8, "m_sweep": [1, 2, 4, 8, 16], "variants": ["sleep", "real"]},
    "gpu": {"layers": 8, "d": 4096, "rows": 512, "sleep_d": 16, "sleep_rows": 4, "sleep_ms": 3.0, "steps": 10,
            "m_all": 8, "m_sweep": [1, 2, 4, 8, 16, 32], "variants": ["sleep", "real"]},
}
# name -> (class, chunks per rank, placement)
SCHEDULES = {
    "gpipe": (ScheduleGPipe, 1, "loop"),
    "1f1b": (Schedule1F1B, 1, "loop"),
    "interleaved": (ScheduleInterleaved1F1B, 2, "loop"),
    "looped_bfs": (ScheduleLoopedBFS, 2, "loop"),
    "interleaved_zb": (ScheduleInterleavedZeroBubble, 2, "loop"),
    "zbv": (ScheduleZBVZeroBubble, 2, "v"),
    "dualpipev": (ScheduleDualPipeV, 2, "v"),
}


# --8<-- [start:sleep_layer]
class _Sleep(torch.autograd.Function):
    """Identity on the layer's output: forward sleeps T_F, its backward (the input-grad path) T_B."""

    @staticmethod
    def forward(ctx, y, t_f, t_b):
        time.sleep(t_f)
        ctx.t_b = t_b
        return y.clone()

    @staticmethod
    def backward(ctx, g):
        time.sleep(ctx.t_b)
        return g, None, None


class _SleepW(torch.autograd.Function):
    """Identity on the weight: its backward runs only when the weight's gradient is computed (T_W)."""

    @staticmethod
    def forward(ctx, w, t_w):
        ctx.t_w = t_w
        return w.view_as(w)

    @staticmethod
    def backward(ctx, g):
        time.sleep(ctx.t_w)
        return g, None


class Layer(nn.Module):
    def __init__(self, d: int, sleep_s: float | None):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.sleep_s = sleep_s

    def forward(self, x):
        if self.sleep_s is None:  # real compute
            return torch.tanh(self.lin(x))
        t = self.sleep_s
        w = _SleepW.apply(self.lin.weight, t)
        return _Sleep.apply(torch.tanh(nn.functional.linear(x, w, self.lin.bias)), t, t)
# --8<-- [end:sleep_layer]


# --8<-- [start:instrument]
class Recorder:
    """Wraps a PipelineStage's compute calls and counts the saved activations alive on this rank."""

    def __init__(self, params, clock: harness.Clock | None = None):
        self.clock = clock or harness.Clock("cpu")  # marks only: never a synchronize inside the step
        self.events: list[dict] = []
        self.t0 = 0.0
        self.alive = 0  # bytes of saved activations alive
        self.peak = 0
        self.cur = None  # (stage, micro-batch) whose forward is running: saved tensors are tagged with it
        self.live: dict = {}  # (stage, micro-batch) -> bytes alive
        self.peak_live = 0  # most (stage, micro-batch) pairs with activations alive at once
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.counter: LiveCounter | None = None  # set for the step that counts live activations by weakref

    def wrap(self, stage):
        rec = self

        def timed(fn, op):
            def run(chunk_id, *a, **k):
                if op == "F":
                    rec.cur = (stage.stage_index, int(chunk_id))
                t = rec.clock.mark()
                out = fn(chunk_id, *a, **k)
                full = k.get("full_backward", True) if op == "B" else None
                rec.events.append({"op": op, "stage": stage.stage_index, "mb": int(chunk_id),
                                   "start": t, "end": rec.clock.mark(),    # marks: read() after the step
                                   **({"full": bool(full)} if op == "B" else {})})
                if rec.counter is not None:  # the weakref step only: after the call's end mark
                    if op == "F":
                        rec.counter.register(stage, int(chunk_id))
                    rec.counter.count(op if op != "B" or full else "I", stage.stage_index, int(chunk_id))
                return out
            return run

        stage.forward_one_chunk = timed(stage.forward_one_chunk, "F")
        stage.backward_one_chunk = timed(stage.backward_one_chunk, "B")
        stage.backward_weight_one_chunk = timed(stage.backward_weight_one_chunk, "W")

    def read(self) -> list[dict]:
        """The step's events with their marks as seconds on the host clock (after the step)."""
        self.clock.resolve()
        return [{**e, "start": self.clock.host(e["start"]) - self.t0, "end": self.clock.host(e["end"]) - self.t0}
                for e in self.events]

    def hooks(self):
        rec = self

        class Held:  # one saved tensor; its death releases its bytes
            __slots__ = ("t", "n", "key")

            def __init__(self, t):
                self.t, self.key = t, rec.cur
                self.n = 0 if t.untyped_storage().data_ptr() in rec._param_ptrs else t.numel() * t.element_size()
                rec.alive += self.n
                rec.peak = max(rec.peak, rec.alive)
                if self.n:
                    rec.live[self.key] = rec.live.get(self.key, 0) + self.n
                    rec.peak_live = max(rec.peak_live, len(rec.live))

            def __del__(self):
                rec.alive -= self.n
                if self.n:
                    rec.live[self.key] -= self.n
                    if rec.live[self.key] == 0:
                        del rec.live[self.key]

        return torch.autograd.graph.saved_tensors_hooks(lambda t: Held(t), lambda h: h.t)
# --8<-- [end:instrument]


# --8<-- [start:live_counter]
class LiveCounter:
    """Activations alive on this rank, without hooks: weak references to the storages each chunk's graph saved.

    After a forward call for (stage, micro-batch), walk that chunk's autograd graph from its outputs and take
    every saved tensor (the nodes' `_saved_*` attributes) that is not a parameter, not one of the chunk's
    inputs and not one of its outputs: torch keeps those for other reasons (parameters; one receive buffer
    per micro-batch for the whole run, stage.py:2249-2265; the last stage's outputs for the step's return
    value, stage.py:908). Register each such storage as a weakref. After every call, a pair is alive while one
    of its storages is. Nothing here holds a tensor, so nothing lives longer than it would without it."""

    def __init__(self, params):
        self._params = {q.untyped_storage()._cdata for q in params}
        self.refs: dict = {}  # (stage, mb) -> [(weakref to storage, nbytes)]
        self.trace: list = []  # after each call: [op, stage, mb, pairs alive]
        self.peak = self.peak_bytes = 0

    def register(self, stage, mb: int) -> None:
        out, inputs = stage.fwd_cache[mb]
        skip = self._params | {t.untyped_storage()._cdata for t in (*out, *inputs) if isinstance(t, torch.Tensor)}
        seen, todo, refs = set(), [t.grad_fn for t in out if isinstance(t, torch.Tensor) and t.grad_fn], []
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            for name in dir(node):
                if name.startswith("_saved_") and not name.endswith(("_sym_sizes", "_sym_strides")):
                    t = getattr(node, name)
                    if isinstance(t, torch.Tensor):
                        st = t.untyped_storage()
                        if st._cdata not in skip:
                            skip.add(st._cdata)
                            refs.append((weakref.ref(st), st.nbytes()))
            todo += [f for f, _ in node.next_functions]
        self.refs[(stage.stage_index, mb)] = refs

    def count(self, op: str, stage_index: int, mb: int) -> None:
        alive = {k: [r for r in rs if r[0]() is not None] for k, rs in self.refs.items()}
        self.refs = {k: rs for k, rs in alive.items() if rs}
        self.peak = max(self.peak, len(self.refs))
        self.peak_bytes = max(self.peak_bytes, sum(n for rs in self.refs.values() for _, n in rs))
        self.trace.append([op, stage_index, mb, len(self.refs)])
# --8<-- [end:live_counter]


def full_model(layers: int, d: int, sleep_s):
    torch.manual_seed(0)
    return nn.Sequential(*[Layer(d, sleep_s) for _ in range(layers)])


def stage_ids(name: str, rank: int, p: int) -> list[int]:
    _, v, place = SCHEDULES[name]
    if v == 1:
        return [rank]
    return [rank, 2 * p - 1 - rank] if place == "v" else [c * p + rank for c in range(v)]


def reference(model, x, y, m):
    """The same model without a pipeline: loss = mean over micro-batches of the MSE."""
    model.zero_grad()
    loss = sum(nn.functional.mse_loss(model(xc), yc) for xc, yc in zip(x.chunk(m), y.chunk(m))) / m
    loss.backward()
    return float(loss), [q.grad.detach().clone() for q in model.parameters()]


def run_one(env, cfg, name, m, variant):
    p = env.world_size
    cls, v, _ = SCHEDULES[name]
    n_stages = p * v
    per = cfg["layers"] // n_stages
    sleep_s = cfg["sleep_ms"] / 1e3 if variant == "sleep" else None
    d, rows = (cfg["sleep_d"], cfg["sleep_rows"]) if variant == "sleep" else (cfg["d"], cfg["rows"])
    ref_model = full_model(cfg["layers"], d, sleep_s)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(m * rows, d, generator=g)
    y = torch.randn(m * rows, d, generator=g)
    ids = stage_ids(name, env.rank, p)
    mods = [nn.Sequential(*[full_model(cfg["layers"], d, sleep_s)[k] for k in range(s * per, (s + 1) * per)])
            for s in ids]
    for mod in mods:
        mod.to(env.device)
    params = [q for mod in mods for q in mod.parameters()]
    rec = Recorder(params, harness.Clock(env))
    stages = []
    for s, mod in zip(ids, mods):
        st = PipelineStage(mod, s, n_stages, env.device)
        rec.wrap(st)
        stages.append(st)
    sched = cls(stages if v > 1 else stages[0], n_microbatches=m, loss_fn=nn.functional.mse_loss)
    steps, out_losses, memory = [], [], {}
    # step 0 warms up; steps 1..steps are timed (no memory instrumentation); then one step counts live
    # activations by weakref (LiveCounter) and one with the saved-tensor hooks (Recorder.hooks)
    for it in range(cfg["steps"] + 3):
        phase = "timed" if 0 < it <= cfg["steps"] else ("warmup" if it == 0 else
                                                         "weakref" if it == cfg["steps"] + 1 else "hooks")
        for mod in mods:
            mod.zero_grad()
        gc.collect()
        rec.events, rec.peak, rec.alive, rec.live, rec.peak_live = [], 0, 0, {}, 0
        rec.counter = LiveCounter(params) if phase == "weakref" else None
        losses: list = []
        # times are on the host's time.perf_counter() (CLOCK_MONOTONIC, shared by the processes of one
        # host), so the ranks' timelines line up without relying on when each rank left the barrier
        rec.t0 = 0.0
        rec.clock.start(barrier=True)
        with rec.hooks() if phase == "hooks" else contextlib.nullcontext():
            if 0 in ids:
                sched.step(x.to(env.device), target=y.to(env.device), losses=losses)
            else:
                sched.step(target=y.to(env.device), losses=losses)
        events = rec.read()
        if phase == "timed":
            steps.append({"events": events})
        elif phase == "weakref":
            memory.update(peak_live=rec.counter.peak, peak_live_bytes=rec.counter.peak_bytes, live_trace=rec.counter.trace)
        elif phase == "hooks":
            memory.update(peak_saved_bytes=rec.peak, peak_live_hooked=rec.peak_live)
        rec.counter = None
        out_losses = losses
    # correctness against the unpipelined model (ref on CPU, sleeps included in the reference: identity maps)
    ref_loss, ref_grads = reference(ref_model, x, y, m)
    err = 0.0
    for s, mod in zip(ids, mods):
        for q, gq in zip(mod.parameters(), ref_grads[s * per * 2:(s + 1) * per * 2]):
            err = max(err, float((q.grad.cpu() - gq).abs().max()))
    loss_val = float(torch.stack([t.detach().cpu() for t in out_losses]).mean()) if out_losses else None
    # bytes of one micro-batch's saved activations in one stage: from a plain forward of chunk 0's module
    probe = Recorder(params)
    with probe.hooks():
        out = mods[0](x[:rows].to(env.device).requires_grad_(True))
    per_mb_bytes = probe.peak
    del out
    return {"loss": loss_val, "ref_loss": ref_loss, "grad_max_err": err, "per_mb_saved_bytes": per_mb_bytes,
            "steps": steps, **memory}


def summarize(per_rank, p):
    """Per step: busy time per rank, makespan (first start to last end, all ranks), both bubbles."""
    steps = []
    for k in range(len(per_rank[0]["steps"])):
        evs = [r["steps"][k]["events"] for r in per_rank]
        t_start = min(e["start"] for ev in evs for e in ev)
        t_end = max(e["end"] for ev in evs for e in ev)
        busy = [sum(e["end"] - e["start"] for e in ev) for ev in evs]
        mk = t_end - t_start
        steps.append({"makespan_s": mk, "busy_s": busy,
                      "bubble_fraction": bubble_fraction_of_total(busy, mk),
                      "bubble_relative": bubble_relative_to_ideal(busy, mk)})
    med = sorted(range(len(steps)), key=lambda i: steps[i]["makespan_s"])[len(steps) // 2]
    return steps, med


def measure(env, cfg, args):
    torch.set_num_threads(1)
    if cfg["layers"] // (2 * env.world_size) < 2:  # LiveCounter counts what a stage saves besides its input and output
        raise ValueError("pipeline_bench needs at least 2 layers per stage of the v = 2 schedules")
    runs = []
    plan = [(name, cfg["m_all"]) for name in SCHEDULES]
    # micro-batch sweep; Schedule1F1B refuses m < p (torch checks n_microbatches >= number of stages)
    plan += [(name, m) for name in ("gpipe", "1f1b") for m in cfg["m_sweep"]
             if m != cfg["m_all"] and (name == "gpipe" or m >= env.world_size)]
    for variant in cfg["variants"]:
        for name, m in plan:
            if variant == "real" and m != cfg["m_all"] and not (name == "gpipe" and m == 1):
                continue  # real compute: every schedule at m_all, and the naive pipeline (GPipe, m = 1)
            local = run_one(env, cfg, name, m, variant)
            per_rank = harness.gather(local)
            steps, med = summarize(per_rank, env.world_size)
            runs.append({
                "schedule": name, "torch_class": SCHEDULES[name][0].__name__, "variant": variant, "m": m,
                "v": SCHEDULES[name][1], "stages_per_rank": [stage_ids(name, r, env.world_size)
                                                             for r in range(env.world_size)],
                "loss": per_rank[-1]["loss"] if per_rank[-1]["loss"] is not None else per_rank[0]["loss"],
                "ref_loss": per_rank[0]["ref_loss"],
                "grad_max_err": max(r["grad_max_err"] for r in per_rank),
                "per_mb_saved_bytes": [r["per_mb_saved_bytes"] for r in per_rank],
                "peak_saved_bytes": [r["peak_saved_bytes"] for r in per_rank],  # hooks step
                "peak_live_microbatches": [r["peak_live"] for r in per_rank],  # weakref step (LiveCounter)
                "peak_live_bytes": [r["peak_live_bytes"] for r in per_rank],
                "peak_live_microbatches_hooked": [r["peak_live_hooked"] for r in per_rank],
                "live_trace": [r["live_trace"] for r in per_rank],
                "step_stats": [{k: s[k] for k in ("makespan_s", "bubble_fraction", "bubble_relative")}
                               for s in steps],
                "median_step": med,
                "timeline": [r["steps"][med]["events"] for r in per_rank],
            })
            if env.is_main:
                s = steps[med]
                print(f"{variant:5s} {name:15s} m={m:2d} makespan {s['makespan_s'] * 1e3:7.1f} ms "
                      f"bubble {s['bubble_fraction']:.3f} of total, {s['bubble_relative']:.3f} rel. ideal; "
                      f"grad err {runs[-1]['grad_max_err']:.1e}", flush=True)
    params = {"p": env.world_size,
              **{k: cfg[k] for k in ("layers", "d", "rows", "sleep_d", "sleep_rows", "sleep_ms", "steps", "m_all",
                                     "m_sweep")},
              "clock": ("CUDA events around each chunk call, read after the step" if harness.on_cuda(env)
                        else "time.perf_counter around each chunk call"),
              "memory": ("timed steps uninstrumented; peak_live_microbatches / peak_live_bytes / live_trace from one "
                         "more step, weak references to the saved storages (no hooks); peak_live_microbatches_hooked "
                         "/ peak_saved_bytes from one more step under saved_tensors_hooks that hold the tensors")}
    return params, runs


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, allowed_world_sizes={2}))

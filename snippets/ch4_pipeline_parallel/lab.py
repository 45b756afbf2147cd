"""Chapter 4 lab: worker functions the notebook docs/ch4-pipeline-parallel/lab.py spawns.

A 4-layer Linear+tanh model cut into 2 stages, one per process (gloo). Hand-written GPipe and 1F1B
move activations and gradients with dist.isend / dist.recv; the torch.distributed.pipelining
versions run ScheduleGPipe / Schedule1F1B on the same model. Every worker records its compute calls
(op, micro-batch, start, end on the host's monotonic clock), the peak number of micro-batches whose
activations it still holds, and its stage's gradients; the parent compares them with one process.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from snippets.common.procs import start_workers

# the library worker imports torch.distributed.pipelining lazily (it pulls in torch._dynamo and torch.fx:
# about 1.1 s of CPU a process); the forkserver imports it once instead (snippets.common.procs.start_workers)
PRELOAD = ("torch.distributed.pipelining",)

D, ROWS, M, LAYERS = 32, 8, 4, 4
SLEEP = 0.004  # seconds added to each forward (twice to each backward): makes the schedule visible on a busy CPU
STEPS = 3  # timed steps of the library schedules, after one untimed warm-up step (the first step pays lazy setup)


def make_model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(D, D), nn.Tanh())])


def stage_module(rank: int) -> nn.Sequential:
    full = make_model()
    half = len(full) // 2
    return full[:half] if rank == 0 else full[half:]


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(M * ROWS, D, generator=g), torch.randn(M * ROWS, D, generator=g)


def reference_grads() -> list[list[float]]:
    """One process, no pipeline: loss = mean over micro-batches of the MSE; gradients per stage (flattened)."""
    full = make_model()
    x, y = data()
    loss = sum(nn.functional.mse_loss(full(a), b) for a, b in zip(x.chunk(M), y.chunk(M))) / M
    loss.backward()
    half = len(full) // 2
    return [torch.cat([p.grad.reshape(-1) for p in full[:half].parameters()]).tolist(),
            torch.cat([p.grad.reshape(-1) for p in full[half:].parameters()]).tolist()]


def _init(rank: int, world: int, store: str):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


def _dump(outdir: str, rank: int, data_: dict):
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(data_))


# --8<-- [start:manual]
def manual_worker(rank: int, world: int, store: str, outdir: str, schedule: str):
    """GPipe or 1F1B by hand on 2 ranks: rank 0 = first half of the layers, rank 1 = second half + loss."""
    _init(rank, world, store)
    stage = stage_module(rank)
    x, y = data()
    xs, ys = x.chunk(M), y.chunk(M)
    events, held, peak, pending = [], {}, 0, []

    def forward(j):
        nonlocal peak
        if rank == 0:
            t0 = time.perf_counter()
            out = stage(xs[j])
            pending.append(dist.isend(out.detach(), dst=1))  # activation to the next stage
            held[j] = out
        else:
            inp = torch.empty(ROWS, D)
            dist.recv(inp, src=0)  # waiting here is idle time, not compute: the clock starts after it
            t0 = time.perf_counter()
            inp.requires_grad_(True)
            held[j] = (inp, nn.functional.mse_loss(stage(inp), ys[j]) / M)
        time.sleep(SLEEP)
        peak = max(peak, len(held))
        events.append(["F", j, t0, time.perf_counter()])

    def backward(j):
        if rank == 0:
            grad = torch.empty(ROWS, D)
            dist.recv(grad, src=1)  # gradient of the loss w.r.t. this stage's output
            t0 = time.perf_counter()
            held.pop(j).backward(grad)
        else:
            t0 = time.perf_counter()
            inp, loss = held.pop(j)
            loss.backward()
            pending.append(dist.isend(inp.grad, dst=0))
        time.sleep(2 * SLEEP)
        events.append(["B", j, t0, time.perf_counter()])

    dist.barrier()
    if schedule == "gpipe":
        for j in range(M):
            forward(j)
        for j in range(M):
            backward(j)
    else:  # 1F1B: p − 1 − r warm-up forwards, then one forward / one backward
        warm = min(world - 1 - rank, M)
        for j in range(warm):
            forward(j)
        for j in range(M - warm):
            forward(warm + j)
            backward(j)
        for j in range(M - warm, M):
            backward(j)
    for w in pending:
        w.wait()
    grads = torch.cat([p.grad.reshape(-1) for p in stage.parameters()]).tolist()
    _dump(outdir, rank, {"events": events, "peak_held": peak, "grads": grads})
    dist.destroy_process_group()
# --8<-- [end:manual]


# --8<-- [start:library]
def library_worker(rank: int, world: int, store: str, outdir: str, schedule: str):
    """The same model and data with torch.distributed.pipelining's ScheduleGPipe / Schedule1F1B: one cold step
    (the first, which pays PipelineStage's lazy setup and first-call costs), then STEPS warm steps, each recorded;
    gradients from the last step (zeroed before every step)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    _init(rank, world, store)
    mod = stage_module(rank)
    stage = PipelineStage(mod, rank, world, torch.device("cpu"))
    events = []
    for name, op in (("forward_one_chunk", "F"), ("backward_one_chunk", "B")):
        fn = getattr(stage, name)

        def timed(j, *a, _fn=fn, _op=op, **k):
            t0 = time.perf_counter()
            out = _fn(j, *a, **k)
            time.sleep(SLEEP if _op == "F" else 2 * SLEEP)
            events.append([_op, int(j), t0, time.perf_counter()])
            return out
        setattr(stage, name, timed)
    cls = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
    sched = cls(stage, n_microbatches=M, loss_fn=nn.functional.mse_loss)
    x, y = data()
    steps = []
    for _ in range(1 + STEPS):
        mod.zero_grad()
        events.clear()
        dist.barrier()
        if rank == 0:
            sched.step(x)
        else:
            sched.step(target=y)
        steps.append(list(events))
    grads = torch.cat([p.grad.reshape(-1) for p in mod.parameters()]).tolist()
    _dump(outdir, rank, {"steps": steps, "events": steps[0], "grads": grads})
    dist.destroy_process_group()
# --8<-- [end:library]


@contextlib.contextmanager
def _main_not_rerun():
    """While the workers start, make the calling script look like an interactive session to multiprocessing.

    A started process (forkserver or spawn) first re-imports the parent's main module when that module has a
    file or a module name (CPython 3.11 multiprocessing/spawn.py, get_preparation_data lines 192-202, and
    prepare lines 243-246). Run as `python docs/ch4-pipeline-parallel/lab.py`, the lab's cells would then run
    again in every worker, and the first `run` there stops with multiprocessing's "bootstrapping phase"
    error. The workers need nothing from the script: they import their function from this module by name.
    In a notebook kernel `__main__` has neither attribute, so this changes nothing there."""
    main = sys.modules["__main__"]
    saved = {k: main.__dict__.pop(k) for k in ("__file__",) if k in main.__dict__}
    spec = getattr(main, "__spec__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)
        main.__spec__ = spec


def run(worker, schedule: str, world: int = 2) -> list[dict]:
    """Spawn `world` gloo processes running worker(rank, world, store, outdir, schedule)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        with _main_not_rerun():
            start_workers(worker, (world, store, tmp, schedule), world, preload=PRELOAD)
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]


def show(svg: str, name: str) -> None:
    """A figure: displayed in a notebook; written to ch4_lab_figures/<name>.svg (current folder) when the lab
    runs as a plain script, which has nowhere to draw it."""
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = lambda: None  # noqa: E731
    if get_ipython() is not None:
        from IPython.display import HTML, display

        display(HTML(svg))
        return
    out = Path("ch4_lab_figures", f"{name}.svg")
    out.parent.mkdir(exist_ok=True)
    out.write_text(svg)
    print(f"그림을 {out} 에 저장했습니다 (브라우저로 여십시오).")


def step_span(ranks: list[dict], k: int) -> float:
    """Makespan of recorded step k over all ranks (first call start to last call end)."""
    ev = [e for r in ranks for e in r["steps"][k]]
    return max(e[3] for e in ev) - min(e[2] for e in ev)


def warm_median(ranks: list[dict]) -> list[dict]:
    """The library run with `events` set to its median warm step (by makespan over both ranks; step 0 is cold)."""
    warm = sorted(range(1, len(ranks[0]["steps"])), key=lambda k: step_span(ranks, k))
    k = warm[len(warm) // 2]
    return [{**r, "events": r["steps"][k], "step": k} for r in ranks]


def rows(ranks: list[dict]) -> list[list[dict]]:
    """Per-rank events in the Gantt row format of snippets.common.pipeline_sim, shifted to start at 0."""
    t0 = min(e[2] for r in ranks for e in r["events"])
    return [[{"op": op, "mb": j, "start": s - t0, "end": e - t0} for op, j, s, e in sorted(r["events"], key=lambda e: e[2])]
            for r in ranks]


def max_grad_error(ranks: list[dict], ref: list[list[float]]) -> float:
    return max(float((torch.tensor(r["grads"]) - torch.tensor(g)).abs().max()) for r, g in zip(ranks, ref))


def hop_gaps(rws: list[list[dict]]) -> list[float]:
    """For every cross-rank dependency of a 2-rank GPipe/1F1B run (F_j on rank 1 after F_j on rank 0; B_j on
    rank 0 after B_j on rank 1): how long the consumer started after both its producer and its own previous
    action had ended. That slack is the boundary's cost (send/recv + the schedule's Python), not compute."""
    out = []
    for r, op, src in ((1, "F", 0), (0, "B", 1)):
        acts = rws[r]
        for k, a in enumerate(acts):
            if a["op"] != op:
                continue
            prod = next(x for x in rws[src] if x["op"] == op and x["mb"] == a["mb"])
            ready = max(prod["end"], acts[k - 1]["end"] if k else 0.0)
            if prod["end"] >= (acts[k - 1]["end"] if k else 0.0):  # the cross-rank dependency was the last to arrive
                out.append(a["start"] - ready)
    return out


def gap_parts(ranks: list[dict], schedule: str) -> dict:
    """The measured 𝓑_tot of a run taken apart: the formula (equal ops, no communication), the simulator with this
    run's mean F and B, then also with the median boundary slack as T_hop; the rest is what neither explains
    (calls of the same op that differ in length, the schedule's own work between calls, two processes on two
    busy cores)."""
    import statistics

    from snippets.common import pipeline_sim as ps

    rws = rows(ranks)
    p = len(rws)
    tf = statistics.mean(a["end"] - a["start"] for r in rws for a in r if a["op"] == "F")
    tb = statistics.mean(a["end"] - a["start"] for r in rws for a in r if a["op"] == "B")
    hop = statistics.median(hop_gaps(rws))
    dur = ps.simulate(schedule, p, M, t_f=tf, t_b=tb, t_w=0.0).bubble_fraction()
    hops = ps.simulate(schedule, p, M, t_f=tf, t_b=tb, t_w=0.0, t_comm=hop).bubble_fraction()
    measured = ps.measured_bubbles(rws)["fraction"]
    # the schedule's own time: gaps between consecutive calls on one rank whose inputs were all there already
    own = 0.0
    for r, acts in enumerate(rws):
        for k in range(1, len(acts)):
            a, src = acts[k], (1 - r)
            dep = [x["end"] for x in rws[src] if x["op"] == a["op"] and x["mb"] == a["mb"]
                   and ((a["op"] == "F" and r == 1) or (a["op"] == "B" and r == 0))]
            if not dep or dep[0] <= acts[k - 1]["end"]:
                own += a["start"] - acts[k - 1]["end"]
    span = ps.measured_bubbles(rws)["makespan"]
    return {"own": own, "own_share": own / (p * span), "formula": float(ps.gpipe_bubble_fraction(p, M)), "with_durations": dur, "with_hops": hops,
            "measured": measured, "rest": measured - hops, "hop": hop, "t_f": tf, "t_b": tb}

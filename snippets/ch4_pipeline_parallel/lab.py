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
STEPS = 3  # warm steps of the library schedules, after the first (cold) step, which is recorded too


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
    """The same model and data with torch.distributed.pipelining's ScheduleGPipe / Schedule1F1B: one cold step (the
    first), then STEPS warm steps. Per step it records the chunk calls (op, micro-batch, start, end), the whole
    sched.step call (start, end) and the time spent in the schedule's stage setup, which torch 2.13 runs at the top of
    every step (_initialize_stage: shape inference and buffers on the first step, an early return after that) before
    the first chunk call. Gradients from the last step (zeroed before every step)."""
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
    setup = []
    init = sched._initialize_stage  # torch 2.13's name (schedules.py:726)

    def timed_init(*a, **k):
        t0 = time.perf_counter()
        out = init(*a, **k)
        setup.append(time.perf_counter() - t0)
        return out
    sched._initialize_stage = timed_init
    x, y = data()
    steps, calls = [], []
    for _ in range(1 + STEPS):
        mod.zero_grad()
        events.clear()
        setup.clear()
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            sched.step(x)
        else:
            sched.step(target=y)
        calls.append([t0, time.perf_counter(), sum(setup)])  # the whole step call, and the setup inside it
        steps.append(list(events))
    grads = torch.cat([p.grad.reshape(-1) for p in mod.parameters()]).tolist()
    _dump(outdir, rank, {"steps": steps, "calls": calls, "events": steps[0], "grads": grads})
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


def step_walls(ranks: list[dict], k: int) -> dict:
    """Step k of a library run timed as the whole sched.step call, from the first rank entering it to the last rank
    leaving it: wall = before (until the first recorded chunk call starts) + window (the recorded calls, what the
    bubble is measured on) + after (from the last call's end); setup = the longest time a rank spent in the stage
    setup, which runs inside `before`."""
    call = [r["calls"][k] for r in ranks]
    ev = [e for r in ranks for e in r["steps"][k]]
    t_in, t_out = min(c[0] for c in call), max(c[1] for c in call)
    first, last = min(e[2] for e in ev), max(e[3] for e in ev)
    return {"wall": t_out - t_in, "before": first - t_in, "window": last - first, "after": t_out - last,
            "setup": max(c[2] for c in call)}


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


def gap_reading(g: dict) -> str:
    """The lab's reading of one gap_parts decomposition, from its numbers: which part is largest, and how much of the
    rest the rank-time spent idle with its inputs already there (the schedule's own work, the shared cores) covers."""
    parts = {"op 시간": g["with_durations"] - g["formula"], "경계 T_hop": g["with_hops"] - g["with_durations"],
             "남은 몫": g["rest"]}
    big = max(parts, key=lambda k: abs(parts[k]))
    text = (f"측정 − 공식 = {g['measured'] - g['formula']:+.3f} 가운데 가장 큰 몫은 {big} ({parts[big]:+.3f}) 입니다. ")
    if g["rest"] <= 0:
        return text + "남은 몫이 0 이하이므로, 잰 op 시간과 T_hop 을 넣은 시뮬레이터가 이 실행의 bubble 을 다 설명합니다."
    share = g["own_share"] / g["rest"]
    return text + (f"입력이 와 있는데도 쉰 시간 ({g['own_share']:.3f}) 은 남은 몫 ({g['rest']:+.3f}) 의 {share:.0%} 이므로, "
                   + ("남은 몫의 대부분은 schedule 자신의 처리와 core 를 기다린 시간입니다."
                      if share >= 0.5 else "남은 몫의 나머지는 이 분해가 나누지 못한 몫입니다 (호출마다 다른 op 길이와 그것이 만든 기다림, 두 rank 에서 겹쳐 센 쉰 시간이 후보입니다)."))


def cold_warm(ranks: list[dict], schedule: str) -> dict:
    """The cold step (step 0) against the median warm step of a library run: both timed by step_walls, their bubbles
    over the recorded window, mean F, and the range of the recorded window over the warm steps (their own jitter)."""
    warm = warm_median(ranks)
    k = warm[0]["step"]
    windows = [step_walls(ranks, j)["window"] for j in range(1, len(ranks[0]["steps"]))]
    gc = gap_parts([{**r, "events": r["steps"][0]} for r in ranks], schedule)
    gw = gap_parts(warm, schedule)
    return {"cold": step_walls(ranks, 0), "warm": step_walls(ranks, k), "jitter": max(windows) - min(windows),
            "bubble_cold": gc["measured"], "bubble_warm": gw["measured"], "t_f_cold": gc["t_f"], "t_f_warm": gw["t_f"]}


def cold_warm_reading(d: dict) -> str:
    """Where the cold step's extra time lies, printed from cold_warm's numbers (ms)."""
    c, w = d["cold"], d["warm"]
    diff = {k: (c[k] - w[k]) * 1e3 for k in ("wall", "before", "window", "after")}
    line = (f"sched.step 전체: cold {c['wall'] * 1e3:.1f} ms, warm {w['wall'] * 1e3:.1f} ms (차이 {diff['wall']:+.1f} ms) "
            f"= 첫 기록 호출 전 {diff['before']:+.1f} + 기록 구간 {diff['window']:+.1f} + 마지막 호출 뒤 {diff['after']:+.1f} ms. "
            f"Stage 준비 (_initialize_stage) 안의 시간: cold {c['setup'] * 1e3:.1f} ms, warm {w['setup'] * 1e3:.2f} ms.\n   → 읽기: ")
    out = diff["before"] + diff["after"]
    if diff["wall"] > 0:
        line += (f"cold step 이 더 걸린 {diff['wall']:.1f} ms 중 기록 구간 밖 (앞뒤 합) 이 {out:+.1f} ms, 기록 구간 안이 "
                 f"{diff['window']:+.1f} ms 입니다. 첫 호출 전의 차이는 {diff['before']:+.1f} ms, 준비 함수 안의 시간 차이는 "
                 f"{(c['setup'] - w['setup']) * 1e3:+.1f} ms 입니다. ")
    else:
        line += "이번에는 cold step 의 전체 시간이 warm 보다 길지 않습니다. "
    inside = abs(diff["window"]) <= d["jitter"] * 1e3
    line += (f"기록 구간의 차이는 warm step 끼리의 기록 구간 범위 ({d['jitter'] * 1e3:.1f} ms) "
             + ("안에 있어 흔들림과 구별되지 않습니다. " if inside else "보다 큽니다. ")
             + f"기록 구간으로 잰 𝓑_tot 는 cold {d['bubble_cold']:.3f}, warm {d['bubble_warm']:.3f} 로 cold 가 "
             + ("더 작습니다" if d["bubble_cold"] < d["bubble_warm"] else "더 큽니다")
             + f" (잰 T_F cold {d['t_f_cold'] * 1e3:.1f} ms, warm {d['t_f_warm'] * 1e3:.1f} ms). ")
    # the setup always runs before the first recorded call (tests/ch4_pipeline_parallel/test_lab.py checks it from the
    # raw records): so it never enters the bubble; what the window shows is read against the warm steps' own spread
    line += ("Stage 준비는 첫 기록 호출 전에 끝나므로 기록 구간으로 잰 bubble 에는 들어가지 않고, step 전체 시간에서만 보입니다. ")
    if inside:
        line += "기록 구간 안의 cold 와 warm 의 차이는 warm step 끼리의 흔들림 안에 있습니다."
    elif diff["window"] > 0:
        line += ("기록 구간 안에서도 cold step 이 흔들림보다 더 걸렸습니다: 준비 함수 밖에서 첫 호출만 치르는 비용 (처음 쓰는 buffer, "
                 "첫 통신) 이나 한 번의 큰 흔들림입니다.")
    else:
        line += "기록 구간 안에서는 cold step 이 warm step 의 흔들림보다 더 짧았습니다."
    return line

"""Pipeline schedules: per-rank action orders, a vectorised timeline simulator, closed forms.

Shared by every Chapter 4 page, the Ch7 planner and gpu_runs/pipeline_bench.py (which only
imports the closed forms and the bubble definitions from here).

Notation (docs/notation.md): p pipeline ranks, m micro-batches, v model chunks per rank,
T_F / T_B / T_W the durations of one forward, one backward (input-grad, or the whole backward when
it is not split) and one weight-grad pass of ONE CHUNK on one rank. A stage is one chunk on one
rank; there are S = p·v stages.

An action is (op, micro-batch, chunk) with op in {"F", "B", "W"}. When a schedule does not split
the backward, "B" is the whole backward (input + weight grad) and takes T_B + T_W.

Two bubble definitions, named every time a percentage is printed (ERRATA rows 17-21):
  * fraction of total time:  1 − (busy time) / (p · makespan)          — GPipe's (p−1)/(m+p−1)
  * relative to ideal time:  makespan / (ideal per-rank time) − 1        — Megatron's (p−1)/m
The two are the same quantity on two scales: rel = frac / (1 − frac), frac = rel / (1 + rel).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "looped_bfs", "zb_h1", "zbv")  # and "chimera" (Ch4-05)
SPLIT_BACKWARD = {"zb_h1", "zbv"}  # schedules whose backward is split into B (input grad) and W
OP_CODE = {"F": 0, "B": 1, "W": 2}


# --8<-- [start:orders]
def stage_of(schedule: str, rank: int, chunk: int, p: int, v: int) -> int:
    """Global stage index of (rank, chunk): looped placement s = chunk·p + rank; V placement
    (zbv) puts chunk 1 of rank r at stage 2p − 1 − r."""
    if schedule == "zbv":
        return rank if chunk == 0 else 2 * p - 1 - rank
    if schedule == "chimera":  # chunk = pipeline: 0 down (stage r on rank r), 1 up (stage p−1−r on rank r)
        return rank if chunk == 0 else p - 1 - rank
    return chunk * p + rank


def _mb_chunk(k: int, p: int, v: int, backward: bool) -> tuple[int, int]:
    """Megatron's interleaved order: virtual step k -> (micro-batch, chunk), groups of p micro-batches."""
    chunk = (k // p) % v
    if backward:
        chunk = v - 1 - chunk
    return (k // (p * v)) * p + k % p, chunk


# --8<-- [start:order-gpipe]
def order_gpipe(r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """GPipe: all m forwards, then all m backwards (same order on every rank)."""
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
# --8<-- [end:order-gpipe]


# --8<-- [start:order-1f1b]
def order_1f1b(r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """PipeDream-Flush (1F1B): p−1−r warm-up forwards, then one F one B, then the cool-down Bs."""
    w = min(p - 1 - r, m)
    out = [("F", i, 0) for i in range(w)]
    for i in range(m - w):
        out += [("F", w + i, 0), ("B", i, 0)]
    return out + [("B", i, 0) for i in range(m - w, m)]
# --8<-- [end:order-1f1b]


# --8<-- [start:order-interleaved]
def order_interleaved(r: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Megatron-LM interleaved 1F1B: virtual steps over v chunks, in groups of p micro-batches."""
    if m % p:
        raise ValueError("interleaved 1F1B (Megatron order) needs m to be a multiple of p")
    total = m * v
    w = min(2 * (p - 1 - r) + (v - 1) * p, total)  # warm-up forwards
    out = [("F", *_mb_chunk(k, p, v, False)) for k in range(w)]
    for k in range(total - w):
        out += [("F", *_mb_chunk(w + k, p, v, False)), ("B", *_mb_chunk(k, p, v, True))]
    return out + [("B", *_mb_chunk(k, p, v, True)) for k in range(total - w, total)]
# --8<-- [end:order-interleaved]


# --8<-- [start:order-looped-bfs]
def order_looped_bfs(r: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Breadth first: every micro-batch through chunk c before chunk c+1; backward in reverse."""
    out = [("F", i, c) for c in range(v) for i in range(m)]
    return out + [("B", i, c) for c in reversed(range(v)) for i in reversed(range(m))]
# --8<-- [end:order-looped-bfs]


# --8<-- [start:order-zb-h1]
def order_zb_h1(r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """ZB-H1: 1F1B with the backward split into B (input grad) and W (weight grad);
    rank r defers its first r weight passes into the cool-down's idle slots."""
    w = min(p - 1 - r, m)
    out, pending_w = [("F", i, 0) for i in range(w)], []
    for i in range(m):
        if i < m - w:
            out.append(("F", w + i, 0))
        out.append(("B", i, 0))
        pending_w.append(i)
        if i >= r:
            out.append(("W", pending_w.pop(0), 0))
    return out + [("W", i, 0) for i in pending_w]
# --8<-- [end:order-zb-h1]


def rank_order(schedule: str, rank: int, p: int, m: int, v: int = 1) -> list[tuple[str, int, int]]:
    """The ordered actions (op, micro-batch, chunk) that rank `rank` executes in one step."""
    r = rank
    if schedule == "naive":  # the whole batch as one micro-batch, one stage per rank
        return [("F", 0, 0), ("B", 0, 0)]
    if schedule == "gpipe":
        return order_gpipe(r, p, m)
    if schedule == "1f1b":
        return order_1f1b(r, p, m)
    if schedule == "interleaved":
        return order_interleaved(r, p, m, v)
    if schedule == "looped_bfs":
        return order_looped_bfs(r, p, m, v)
    if schedule == "zb_h1":
        return order_zb_h1(r, p, m)
    if schedule == "zbv":  # ZB-V (Qi et al. 2024, arXiv v2 §6): two chunks per rank in V order
        return _zbv_order(r, p, m)
    if schedule == "chimera":  # two 1F1B pipelines in opposite directions, merged greedily
        return chimera_orders(p, m)[r]
    raise ValueError(f"unknown schedule {schedule!r}; one of {SCHEDULES}")


# --8<-- [start:order-zbv]
def _zbv_order(r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    n = max(m, 2 * p - 1)  # the V needs at least 2p − 1 micro-batches to fill; extra ones are dropped
    out: list[tuple[str, int, int]] = []
    cnt = {"F0": 0, "F1": 0, "B0": 0, "B1": 0}

    def act(op, c):
        key = f"{op}{c}"
        out.append((op, cnt[key], c))
        cnt[key] += 1

    for _ in range(2 * (p - r) - 1):  # chunk 0 forwards until the V's bottom returns
        act("F", 0)
    for _ in range(r):
        act("F", 1), act("F", 0)
    for _ in range(p - r):  # chunk 1: F, B, W back to back
        act("F", 1)
        act("B", 1)
        out.append(("W", cnt["B1"] - 1, 1))
    while cnt["F1"] < cnt["F0"] or cnt["F0"] < n:  # steady state
        if cnt["F0"] < n:
            act("F", 0)
        act("B", 0)
        out.append(("W", cnt["B0"] - 1, 0))
        act("F", 1)
        act("B", 1)
        out.append(("W", cnt["B1"] - 1, 1))
    w0, w1 = cnt["B0"], cnt["B1"]
    for _ in range(r):  # cool-down: input grads first, weight grads fill the tail
        act("B", 0), act("B", 1)
    for _ in range(p - r):
        act("B", 0)
        out.append(("W", w0, 0))
        w0 += 1
    out += [("W", i, 1) for i in range(w1, cnt["B1"])]
    out += [("W", i, 0) for i in range(w0, cnt["B0"])]
    return [a for a in out if a[1] < m]
# --8<-- [end:order-zbv]


_CHIMERA: dict = {}


def _chimera_list_schedule(p, m, t_f, t_b, cap=True):
    """The list schedule behind chimera_orders; returns (orders, makespan)."""
    half = m // 2
    stages_of = [[(0, r), (1, p - 1 - r)] for r in range(p)]  # (pipeline, stage) held by rank r
    first = {0: 0, 1: half}  # first micro-batch of each pipeline
    nxt = {(op, k, st): 0 for op in "FB" for k in (0, 1) for st in range(p)}  # next index within the pipeline
    end: dict = {}
    free = [0.0] * p
    orders: list[list[tuple[str, int, int]]] = [[] for _ in range(p)]
    inf = float("inf")

    def candidate(r, op, k, st):
        """(start, priority, action) of rank r's next op on stage st of pipeline k, or None."""
        i = nxt[(op, k, st)]
        if i >= half:
            return None
        j = first[k] + i
        if op == "F":
            if cap and i - nxt[("B", k, st)] >= p - st:  # 1F1B's in-flight limit of the stage
                return None
            dep = 0.0 if st == 0 else end.get(("F", j, st - 1), inf)
        else:
            if ("F", j, st) not in end:
                return None
            dep = max(end[("F", j, st)], 0.0 if st == p - 1 else end.get(("B", j, st + 1), inf))
        if dep == inf:
            return None
        # backward first, then the lower index within its pipeline, then the down pipeline
        return max(free[r], dep), (0 if op == "B" else 1, i, k), (op, j, st, k)

    def rank_best(r):
        cs = [c for k, st in stages_of[r] for op in "BF" if (c := candidate(r, op, k, st)) is not None]
        return min(cs, key=lambda c: (c[0], c[1])) if cs else None

    # each rank's next action in a heap (stale entries skipped by version); only neighbours change
    best, version, heap = [None] * p, [0] * p, []

    def refresh(q):
        version[q] += 1
        best[q] = rank_best(q)
        if best[q] is not None:
            heapq.heappush(heap, (best[q][0], best[q][1], q, version[q]))

    for q in range(p):
        refresh(q)
    for _ in range(2 * m * p):
        while True:
            *_, r, ver = heapq.heappop(heap)
            if ver == version[r]:
                break
        now, _, (op, j, st, k) = best[r]
        end[(op, j, st)] = free[r] = now + (t_f if op == "F" else t_b)
        orders[r].append((op, j, k))
        nxt[(op, k, st)] += 1
        for q in {s2 if k == 0 else p - 1 - s2 for s2 in (st - 1, st, st + 1) if 0 <= s2 < p}:
            refresh(q)  # the producer's consumers live on the neighbouring stages' ranks
    return orders, max(free)


def chimera_orders(p: int, m: int, t_f: float = 1.0, t_b: float = 2.0) -> list[list[tuple[str, int, int]]]:
    """Bidirectional pipelines in the style of Chimera (Li & Hoefler 2021): micro-batches 0..m/2−1 flow
    down (stage s on rank s), m/2..m−1 flow up (stage s on rank p−1−s); every rank holds one stage of
    each pipeline (two stages' weights). The per-rank order is this book's construction, not the
    paper's own schedule: chronological list scheduling (the action that can start earliest on any
    rank starts; on one rank, backward before forward, then the lower micro-batch index within its
    pipeline), every stage keeping 1F1B's limit of p − s micro-batches in flight. Durations t_f and
    t_b (the whole backward) only shape the order. Returns (op, micro-batch, pipeline) per rank."""
    key = (p, m, t_f, t_b)
    if key in _CHIMERA:
        return _CHIMERA[key]
    if m % 2:
        raise ValueError("chimera needs an even number of micro-batches (half per direction)")
    _CHIMERA[key] = _chimera_list_schedule(p, m, t_f, t_b)[0]
    return _CHIMERA[key]
# --8<-- [end:orders]


@dataclass
class Timeline:
    """Every action of one step: flat arrays, one entry per action."""

    schedule: str
    p: int
    m: int
    v: int
    rank: np.ndarray
    op: np.ndarray  # 0 F, 1 B, 2 W
    mb: np.ndarray
    chunk: np.ndarray
    stage: np.ndarray
    start: np.ndarray
    end: np.ndarray
    durations: dict = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return float(self.end.max() - min(0.0, self.start.min()))

    def busy(self) -> np.ndarray:
        """Busy time per rank."""
        return np.bincount(self.rank, weights=self.end - self.start, minlength=self.p)

    def ideal(self) -> float:
        """Ideal (bubble-free) time: the busiest rank's work."""
        return float(self.busy().max())

    def bubble_fraction(self) -> float:
        """Bubble as a fraction of total time: idle rank-time / (p · makespan)."""
        return bubble_fraction_of_total(self.busy(), self.makespan)

    def bubble_relative(self) -> float:
        """Bubble relative to the ideal time (Megatron): makespan / ideal − 1."""
        return bubble_relative_to_ideal(self.busy(), self.makespan)

    def inflight(self, until: str = "B") -> np.ndarray:
        """Peak number of (micro-batch, chunk) activations alive per rank: counted from the start of
        its F to the end of its B (until="B") or of its W (until="W", split schedules). A rank runs
        one action at a time, so this is a walk along the rank's executed sequence."""
        peak = np.zeros(self.p, dtype=int)
        close = OP_CODE[until] if until == "W" and self.schedule in SPLIT_BACKWARD else OP_CODE["B"]
        for r in range(self.p):
            idx = np.flatnonzero(self.rank == r)
            idx = idx[np.argsort(self.start[idx], kind="stable")]
            step = np.where(self.op[idx] == 0, 1, np.where(self.op[idx] == close, -1, 0))
            peak[r] = np.cumsum(step).max()
        return peak

    def actions(self, rank: int) -> list[dict]:
        """Rank's actions in execution order, as dicts (for tables and Gantt charts)."""
        idx = np.flatnonzero(self.rank == rank)
        idx = idx[np.argsort(self.start[idx], kind="stable")]
        name = "FBW"
        return [{"op": name[self.op[i]], "mb": int(self.mb[i]), "chunk": int(self.chunk[i]),
                 "stage": int(self.stage[i]), "start": float(self.start[i]), "end": float(self.end[i])}
                for i in idx]


# --8<-- [start:simulate]
def simulate(schedule: str, p: int, m: int, v: int = 1, t_f: float = 1.0, t_b: float = 1.0,
             t_w: float = 1.0, t_comm: float = 0.0, stage_cost=None) -> Timeline:
    """Earliest start times of every action, given each rank's order.

    Dependencies: F(i, s) after F(i, s−1); B(i, s) after B(i, s+1) and F(i, s); W(i, s) after
    B(i, s); every action after the previous action of its rank. A dependency that crosses ranks
    costs t_comm. `stage_cost` (length p·v, default all 1) scales every duration of a stage
    (unbalanced stages). Solved as a longest-path fixed point: each sweep takes the ready times from the
    other ranks and solves every rank's chain at once with a running maximum
    (end_k = C_k + max_{j≤k}(ready_j − C_{j−1}), C the cumulative durations).
    """
    if schedule == "zbv":
        v = 2
    elif schedule in ("naive", "gpipe", "1f1b", "zb_h1", "chimera"):
        v = 1
    if schedule == "naive":
        m = 1
    split = schedule in SPLIT_BACKWARD
    if schedule == "chimera":  # the list schedule's order depends on the durations
        orders = chimera_orders(p, m, t_f, t_b + t_w)
    else:
        orders = [rank_order(schedule, r, p, m, v) for r in range(p)]
    k_max = max(len(o) for o in orders)
    n_st = p * v
    # flat arrays, rank-major with padding to k_max (padding: zero duration, no dependency)
    rank = np.repeat(np.arange(p), k_max)
    op = np.full(p * k_max, -1)
    mb = np.zeros(p * k_max, int)
    chunk = np.zeros(p * k_max, int)
    for r, o in enumerate(orders):
        if o:
            a = np.array([(OP_CODE[x], i, c) for x, i, c in o])
            op[r * k_max:r * k_max + len(o)], mb[r * k_max:r * k_max + len(o)] = a[:, 0], a[:, 1]
            chunk[r * k_max:r * k_max + len(o)] = a[:, 2]
    real = op >= 0
    stage = np.array([stage_of(schedule, int(r), int(c), p, v) for r, c in zip(rank, chunk)])
    dur_of = np.array([t_f, t_b if split else t_b + t_w, t_w])
    scale = np.ones(n_st) if stage_cost is None else np.asarray(stage_cost, dtype=float)
    if scale.shape != (n_st,):
        raise ValueError(f"stage_cost needs {n_st} entries (p·v), got {scale.shape}")
    dur = np.where(real, dur_of[np.clip(op, 0, 2)] * scale[stage], 0.0)
    # where each (op, stage, micro-batch) sits
    where = np.full((3, n_st, m), -1)
    where[op[real], stage[real], mb[real]] = np.flatnonzero(real)
    dep1 = np.full(p * k_max, -1)  # cross-stage dependency
    dep2 = np.full(p * k_max, -1)  # same-stage dependency
    f, b, w = real & (op == 0), real & (op == 1), real & (op == 2)
    dep1[f & (stage > 0)] = where[0, stage[f & (stage > 0)] - 1, mb[f & (stage > 0)]]
    lb = b & (stage < n_st - 1)
    dep1[lb] = where[1, stage[lb] + 1, mb[lb]]
    dep2[b] = where[0, stage[b], mb[b]]
    dep2[w] = where[1, stage[w], mb[w]]
    if np.any((dep1 == -1) & (f & (stage > 0) | lb)) or np.any(dep2[b | w] == -1):
        raise ValueError(f"{schedule}: an action's producer is missing from every rank's order")
    lat1 = np.where((dep1 >= 0) & (rank[np.maximum(dep1, 0)] != rank), t_comm, 0.0)
    csum = np.cumsum(dur.reshape(p, k_max), axis=1)
    cprev = csum - dur.reshape(p, k_max)
    end = csum.ravel().copy()
    for _ in range(len(dur) + 2):
        ready = np.maximum(np.where(dep1 >= 0, end[np.maximum(dep1, 0)] + lat1, 0.0),
                           np.where(dep2 >= 0, end[np.maximum(dep2, 0)], 0.0)).reshape(p, k_max)
        new = (csum + np.maximum.accumulate(ready - cprev, axis=1)).ravel()
        if np.array_equal(new, end):
            break
        end = new
    else:
        raise ValueError(f"{schedule}: the per-rank orders deadlock (p={p}, m={m}, v={v})")
    start = end - dur
    return Timeline(schedule, p, m, v, rank[real], op[real], mb[real], chunk[real], stage[real],
                    start[real], end[real], {"F": t_f, "B": t_b, "W": t_w, "comm": t_comm})
# --8<-- [end:simulate]


# --8<-- [start:closed]
def bubble_fraction_of_total(busy, makespan: float) -> float:
    """Idle rank-time over total rank-time: 1 − Σ busy / (p · makespan)."""
    busy = np.asarray(busy, dtype=float)
    return float(1.0 - busy.sum() / (len(busy) * makespan))


def bubble_relative_to_ideal(busy, makespan: float) -> float:
    """Megatron's definition: (makespan − ideal) / ideal, ideal = the busiest rank's work."""
    ideal = float(np.max(busy))
    return float(makespan / ideal - 1.0)


def frac_to_rel(frac):
    return np.asarray(frac) / (1 - np.asarray(frac))


def rel_to_frac(rel):
    return np.asarray(rel) / (1 + np.asarray(rel))


def naive_bubble_fraction(p):
    """One batch, p stages: each rank is busy 1/p of the time -> (p−1)/p of total time."""
    p = np.asarray(p, dtype=float)
    return (p - 1) / p


def gpipe_bubble_fraction(p, m):
    """GPipe / 1F1B with uniform stages: (p−1)/(m+p−1) of total time."""
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    return (p - 1) / (m + p - 1)


def gpipe_bubble_relative(p, m):
    """The same bubble relative to ideal time (Megatron §2.2): (p−1)/m."""
    return (np.asarray(p, dtype=float) - 1) / np.asarray(m, dtype=float)


def interleaved_bubble_relative(p, m, v):
    """Interleaved 1F1B, relative to ideal time: (p−1)/(v·m) (Narayanan et al. 2021 §2.2.2)."""
    return (np.asarray(p, dtype=float) - 1) / (np.asarray(v, dtype=float) * np.asarray(m, dtype=float))


def zb_h1_bubble_relative(p, m, t_f=1.0, t_b=1.0, t_w=1.0):
    """ZB-H1, relative to ideal time: (p−1)(T_F + T_B − T_W) / (m(T_F + T_B + T_W)); (p−1)/(3m) at equal T."""
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    return (p - 1) * (t_f + t_b - t_w) / (m * (t_f + t_b + t_w))


def one_f_one_b_peak_inflight(p, m, rank):
    """1F1B: rank r holds at most min(p − r, m) micro-batches' activations."""
    return np.minimum(np.asarray(p) - np.asarray(rank), np.asarray(m))


def gpipe_peak_inflight(p, m, rank=0):
    """GPipe: every rank holds all m micro-batches at the forward/backward boundary."""
    return np.broadcast_to(np.asarray(m), np.shape(rank)).copy()


def interleaved_peak_chunks(p, m, v, rank=0):
    """Interleaved 1F1B: rank r holds its 2(p−1−r) + (v−1)p warm-up chunks plus one (Megatron's
    warm-up count, core/pipeline_parallel/schedules.py), capped at m·v."""
    return np.minimum(2 * (np.asarray(p) - 1 - np.asarray(rank)) + (v - 1) * np.asarray(p) + 1, m * v)


def interleaved_first_rank_memory(p, v, a=1.0):
    """Rank 0's activation memory in units of A (one micro-batch through all of one rank's layers):
    chunks of size A/v, 2(p−1) + (v−1)p + 1 of them -> pA(1 + (p−1)/(pv))."""
    return (2 * (p - 1) + (v - 1) * p + 1) * a / v
# --8<-- [end:closed]


# --8<-- [start:gantt]
OP_COLOURS = {"F": "#4C72B0", "B": "#DD8452", "W": "#55A868"}


def gantt(ax, rows, title: str = "", unit: float = 1.0, label_mb: bool = True) -> None:
    """Draw per-rank action bars on `ax`. rows[r] is a list of dicts with op, mb, start, end (and
    optionally chunk); rank 0 is drawn on top. Times are divided by `unit`."""
    for r, acts in enumerate(rows):
        for a in acts:
            x0, w = a["start"] / unit, (a["end"] - a["start"]) / unit
            colour = OP_COLOURS[a["op"]]
            ax.barh(r, w, left=x0, height=0.8, color=colour, edgecolor="white", linewidth=0.5,
                    alpha=1.0 if a.get("chunk", 0) == 0 else 0.6, hatch=None if a.get("chunk", 0) == 0 else "//")
            if label_mb and w > 0:
                ax.text(x0 + w / 2, r, str(a["mb"]), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(rows)), [f"rank {r}" for r in range(len(rows))])
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", visible=False)
# --8<-- [end:gantt]


def timeline_rows(tl: Timeline) -> list[list[dict]]:
    """A simulated timeline in the row format of `gantt` (and of pipeline_bench's results)."""
    return [tl.actions(r) for r in range(tl.p)]


def measured_rows(entry: dict) -> list[list[dict]]:
    """One pipeline_bench run (an entry of its results) in the row format of `gantt`: per rank, the
    recorded calls sorted by start, times shifted so the first call starts at 0, chunk from the stage."""
    p = len(entry["timeline"])
    t0 = min(e["start"] for ev in entry["timeline"] for e in ev)
    v_place = entry["schedule"] in ("zbv", "dualpipev")
    rows = []
    for ev in entry["timeline"]:
        rows.append([{**e, "start": e["start"] - t0, "end": e["end"] - t0,
                      "chunk": (int(e["stage"] >= p) if v_place else e["stage"] // p)}
                     for e in sorted(ev, key=lambda e: e["start"])])
    return rows


def measured_bubbles(rows: list[list[dict]]) -> dict:
    """Both bubble definitions for measured rows (makespan: first start to last end over all ranks)."""
    busy = [sum(a["end"] - a["start"] for a in acts) for acts in rows]
    makespan = max(a["end"] for acts in rows for a in acts) - min(a["start"] for acts in rows for a in acts)
    return {"makespan": makespan, "busy": busy, "fraction": bubble_fraction_of_total(busy, makespan),
            "relative": bubble_relative_to_ideal(busy, makespan)}


def max_overlap(rows: list[list[dict]]) -> float:
    """Longest time during which two or more ranks compute at once (0 for a strictly sequential run)."""
    ev = sorted([(a["start"], 1) for acts in rows for a in acts] + [(a["end"], -1) for acts in rows for a in acts],
                key=lambda x: (x[0], x[1]))
    active, last, total = 0, None, 0.0
    for t, d in ev:
        if active >= 2 and last is not None:
            total += t - last
        active += d
        last = t
    return total


# --------------------------------------------------------------------------- Ch4-05: explicit orders, several steps
# Orders here are lists of actions (op, micro-batch, chunk) with op in {"F", "B", "W", "BW"}: "B" is the
# input-grad half of a split backward, "W" its weight-grad half, "BW" a whole (unsplit) backward. Schedules
# that mix both (DualPipeV) need the fourth op; the functions above keep their three.


# --8<-- [start:order-interleaved-zb]
def order_interleaved_zb(r: int, p: int, m: int, v: int = 2) -> list[tuple[str, int, int]]:
    """torch's ScheduleInterleavedZeroBubble (the paper's ZB1P on v chunks): the looped chunks' forwards in
    rounds of m/rounds micro-batches, (v−1)·round + p−1−r warm-up forwards (one per hop, not two as in
    interleaved 1F1B), then one F one B (input grad); rank r runs a W after each B once it has deferred r."""
    rounds = max(1, m // p)
    per_round = m // rounds
    warm = min((v - 1) * per_round + p - 1 - r, m * v)
    nxt = {("F", c): 0 for c in range(v)} | {("B", c): 0 for c in range(v)} | {("W", c): 0 for c in range(v)}

    def act(op, c):
        i = nxt[(op, c)]
        nxt[(op, c)] += 1
        return (op, i, c)

    f_chunk = lambda k: (k // per_round) % v  # noqa: E731  the k-th forward's chunk
    b_chunk = lambda k: v - 1 - (k // per_round) % v  # noqa: E731  the k-th backward's chunk
    out = [act("F", f_chunk(k)) for k in range(warm)]
    done_b: list[int] = []  # chunks of the backwards run so far, oldest first (their W follow in that order)
    n_w = 0
    for k in range(m * v):
        if warm + k < m * v:
            out.append(act("F", f_chunk(warm + k)))
        out.append(act("B", b_chunk(k)))
        done_b.append(b_chunk(k))
        if k >= r:
            out.append(act("W", done_b[n_w]))
            n_w += 1
    out += [act("W", c) for c in done_b[n_w:]]
    return out
# --8<-- [end:order-interleaved-zb]


# --8<-- [start:order-dualpipev]
def order_dualpipev(r: int, p: int, m: int) -> list[tuple]:
    """DualPipeV (DeepSeek-V3's DualPipe folded into a V, as torch's ScheduleDualPipeV builds it): chunk 0 is
    stage r, chunk 1 stage 2p−1−r. Returns the rank's SLOTS: an action (op, mb, chunk), or ("OVERLAP", f, bw)
    pairing one micro-batch's forward with another's whole backward, which a runtime may run at once (torch
    runs the two one after the other unless a custom OVERLAP_F_B function is registered)."""
    if m < 2 * p:
        raise ValueError("DualPipeV needs at least 2p micro-batches")
    nxt: dict = {}
    pending_w: list[tuple[int, int]] = []  # (chunk, mb) of split backwards, oldest first
    out: list[tuple] = []

    def take(op, c):  # the next micro-batch index of (op, chunk); B and BW share one counter
        key = ("B" if op in ("B", "BW") else op, c)
        i = nxt.get(key, 0)
        nxt[key] = i + 1
        if op == "B":
            pending_w.append((c, i))
        return (op, i, c)

    def weight():
        if pending_w:
            c, i = pending_w.pop(0)
            out.append(("W", i, c))

    out += [take("F", 0) for _ in range(2 * (p - r - 1))]          # 1: chunk 0 forwards
    for _ in range(r + 1):                                          # 2: F0 F1
        out += [take("F", 0), take("F", 1)]
    for _ in range(p - r - 1):                                      # 3: B1 W1 F1 (zero bubble)
        out.append(take("B", 1))
        weight()
        out.append(take("F", 1))
    for i in range(m - 2 * p + r + 1):                              # 4: the main part, overlapped pairs
        if i == 0 and r == p - 1:
            out += [take("F", 0), take("BW", 1)]                    # not overlapped: a smaller bubble
        else:
            out.append(("OVERLAP", take("F", 0), take("BW", 1)))
        out.append(("OVERLAP", take("F", 1), take("BW", 0)))
    for _ in range(p - r - 1):                                      # 5: B1, then F1 with B0
        out.append(take("BW", 1))
        out.append(("OVERLAP", take("F", 1), take("BW", 0)))
    zb = False
    for i in range(r + 1):                                          # 6: B1 B0, the second half split
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        out.append(take("B" if zb else "BW", 1))
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        out.append(take("B" if zb else "BW", 0))
    for _ in range(p - r - 1):                                      # 7: W0 B0
        weight()
        out.append(take("B" if zb else "BW", 0))
    for _ in range(r + 1):                                          # 8: the remaining weight passes
        weight()
    return out
# --8<-- [end:order-dualpipev]


_ZB_H2: dict = {}


def flatten_slots(slots: list[tuple]) -> list[tuple[str, int, int]]:
    """A rank's slots as the actions that run, an overlapped pair as its forward then its backward."""
    out = []
    for s in slots:
        out += [s[1], s[2]] if s[0] == "OVERLAP" else [s]
    return out


# --8<-- [start:order-zb-h2]
def order_zb_h2(r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """ZB-H2 (Qi et al., ICLR 2024 §2.2), built the way the paper describes it: under T_F = T_B = T_W every
    rank, whenever it is free, runs a ready B first; else the next F if fewer than 2p − 1 micro-batches are
    alive on it (counted until their W: the paper's (2p−1)·M_B); else its oldest pending W. The extra warm-up
    forwards fill the slots 1F1B leaves idle before its first B, and the W passes slide to the tail, so every
    rank's busy span has no gap (the parallelogram of the paper's Figure 3)."""
    if (p, m) not in _ZB_H2:
        cap, end, done = 2 * p - 1, {}, [{"F": 0, "B": 0, "W": 0} for _ in range(p)]
        orders: list[list[tuple[str, int, int]]] = [[] for _ in range(p)]
        t = 0
        while any(d["W"] < m for d in done):
            for q, d in enumerate(done):  # every rank picks at integer time t (unit durations)
                if end.get(("busy", q), 0) > t:
                    continue
                i, f = d["B"], d["F"]
                if i < m and end.get(("F", i, q), t + 1) <= t and (q == p - 1 or end.get(("B", i, q + 1), t + 1) <= t):
                    op, j = "B", i
                elif f < m and f - d["W"] < cap and (q == 0 or end.get(("F", f, q - 1), t + 1) <= t):
                    op, j = "F", f
                elif d["W"] < d["B"]:
                    op, j = "W", d["W"]
                else:
                    continue
                end[(op, j, q)] = end[("busy", q)] = t + 1
                d[op] += 1
                orders[q].append((op, j, 0))
            t += 1
        _ZB_H2[(p, m)] = orders
    return list(_ZB_H2[(p, m)][r])
# --8<-- [end:order-zb-h2]


# --8<-- [start:peak-live]
def peak_live(order: list[tuple[str, int, int]]) -> int:
    """Peak number of (micro-batch, chunk) activations alive along one rank's order: one more at its F, one
    fewer at the last backward action of that (micro-batch, chunk): its W if the backward is split, else its
    B / BW. Order alone decides it (Theorem 4.3.4's count)."""
    last = {}
    for k, (op, i, c) in enumerate(order):
        if op != "F":
            last[(i, c)] = k
    live = peak = 0
    for k, (op, i, c) in enumerate(order):
        live += 1 if op == "F" else -(last[(i, c)] == k)
        peak = max(peak, live)
    return peak
# --8<-- [end:peak-live]


def orders_of(schedule: str, p: int, m: int) -> tuple[list[list[tuple[str, int, int]]], int, object]:
    """(per-rank orders, v, stage function) of every schedule this book simulates, as explicit orders:
    the ones of rank_order and interleaved_zb, zb_h2, dualpipev."""
    if schedule == "interleaved_zb":
        return [order_interleaved_zb(r, p, m, 2) for r in range(p)], 2, lambda r, c: c * p + r
    if schedule == "zb_h2":
        return [order_zb_h2(r, p, m) for r in range(p)], 1, lambda r, c: r
    if schedule == "dualpipev":
        return [flatten_slots(order_dualpipev(r, p, m)) for r in range(p)], 2, lambda r, c: r if c == 0 else 2 * p - 1 - r
    v = 2 if schedule in ("zbv", "interleaved", "looped_bfs") else 1
    split = schedule in SPLIT_BACKWARD
    orders = [[(("B" if split else "BW") if o == "B" else o, i, c) for o, i, c in rank_order(schedule, r, p, m, v)]
              for r in range(p)]
    return orders, v, lambda r, c: stage_of(schedule, r, c, p, v)


# --8<-- [start:simulate-steps]
def simulate_steps(schedule: str, p: int, m: int, steps: int = 4, sync: bool = True, t_f: float = 1.0,
                   t_b: float = 1.0, t_w: float = 1.0) -> dict:
    """`steps` training steps back to back. Each rank runs step k's order, then its optimizer step (taken as
    instant), then step k+1's order. sync=True: a global synchronisation between steps (gradient-norm
    clipping, the NaN/inf check: an all-reduce over every stage), so no rank starts step k+1 before every rank
    has ended step k. sync=False: Qi et al.'s optimizer post-validation (the check runs after the update and
    rolls back if needed), so step k+1's forwards start as soon as their own dependencies allow.
    Returns per-step end times, the steady-state period (last end − previous end) and the bubbles."""
    orders, v, stage = orders_of(schedule, p, m)
    n_st, dur = p * v, {"F": t_f, "B": t_b, "W": t_w, "BW": t_b + t_w}
    acts = [[(op, k * m + i, stage(r, c), k) for k in range(steps) for op, i, c in o] for r, o in enumerate(orders)]
    end: dict = {}  # (kind, mb, stage) -> end; kind F, G (input grad: B or BW) or W
    free, pos = [0.0] * p, [0] * p
    step_end, left = [0.0] * steps, [len(orders[r]) * steps for r in range(p)]
    per_step_left = [sum(len(o) for o in orders)] * steps
    work = [sum(dur[a[0]] for a in o) for o in orders]
    rows: list[list[dict]] = [[] for _ in range(p)]  # per rank, in the format of `gantt` (chunk = step parity)
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while pos[r] < len(acts[r]):
                op, i, s, k = acts[r][pos[r]]
                if op == "F":
                    deps = [("F", i, s - 1)] if s > 0 else []
                elif op in ("B", "BW"):
                    deps = [("F", i, s)] + ([("G", i, s + 1)] if s < n_st - 1 else [])
                else:
                    deps = [("G", i, s)]
                if any(d not in end for d in deps) or (sync and k > 0 and per_step_left[k - 1] > 0):
                    break
                t0 = max([free[r]] + [end[d] for d in deps] + ([step_end[k - 1]] if sync and k > 0 else []))
                t1 = free[r] = t0 + dur[op]
                rows[r].append({"op": "B" if op == "BW" else op, "mb": i, "chunk": k % 2, "start": t0, "end": t1})
                end[("F" if op == "F" else "W" if op == "W" else "G", i, s)] = t1
                if op == "BW":
                    end[("W", i, s)] = t1
                step_end[k] = max(step_end[k], t1)
                per_step_left[k] -= 1
                left[r] -= 1
                pos[r] += 1
                progress = True
    if any(left):
        raise ValueError(f"{schedule}: the orders deadlock over {steps} steps (p={p}, m={m})")
    period = step_end[-1] - step_end[-2] if steps > 1 else step_end[0]
    ideal = max(work)
    return {"step_end": step_end, "first_step": step_end[0], "period": period, "ideal": ideal,
            "bubble_first": step_end[0] / ideal - 1, "bubble_steady": period / ideal - 1, "rows": rows}
# --8<-- [end:simulate-steps]


def span_idle(schedule: str, p: int, m: int, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0) -> list[float]:
    """Idle time inside each rank's own busy span (its first start to its last end) in one step: the bubble
    that no overlap of consecutive steps can remove (the next step's work comes after the span in the order)."""
    rows = simulate_steps(schedule, p, m, steps=1, t_f=t_f, t_b=t_b, t_w=t_w)["rows"]
    return [max(a["end"] for a in acts) - min(a["start"] for a in acts) - sum(a["end"] - a["start"] for a in acts)
            for acts in rows]

"""Ch1-02 AllReduce 의 구현 비교: simulators that move real NumPy arrays, and the page's helpers.

Every simulator takes x of shape (N, count) (row r = rank r's input vector), returns a Sim:
out[r] is what rank r holds at the end, sent/recv are the bytes each rank sent/received, steps is
the number of communication steps and step_bytes the largest message of each step, so that the
α-β time of Definition 1.3.1 (Ch1-03) is steps·α + sum(step_bytes)·β. Within a step every rank
sends at most one message and receives at most one (full-duplex, single-port); the simulators
check this. The cost formulas live once in snippets/common/alphabeta.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce
from snippets.common import alphabeta as ab


@dataclass
class Sim:
    out: np.ndarray
    sent: np.ndarray
    recv: np.ndarray
    steps: int = 0
    step_bytes: list = field(default_factory=list)

    def time(self, alpha: float, beta: float) -> float:
        """α-β time of the schedule that ran: Σ_steps (α + largest message·β)."""
        return self.steps * alpha + float(np.sum(self.step_bytes)) * beta

    def correct(self, x: np.ndarray) -> bool:
        """Does every rank hold the sum of all inputs?"""
        return bool(np.array_equal(self.out, np.broadcast_to(x.sum(0), x.shape)))


def _single_port(src, dst) -> None:
    """A step may have each rank send at most once and receive at most once."""
    src, dst = np.asarray(src), np.asarray(dst)
    assert len(np.unique(src)) == len(src) and len(np.unique(dst)) == len(dst), "not single-port"


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


# --8<-- [start:naive]
def naive_allreduce(x: np.ndarray, root: int = 0) -> Sim:
    """Reduce to `root` one message at a time, then broadcast from it one message at a time."""
    n, count = x.shape
    b = count * x.dtype.itemsize
    acc = x[root].copy()
    sent, recv = np.zeros(n, np.int64), np.zeros(n, np.int64)
    others = [r for r in range(n) if r != root]
    for r in others:            # step: r -> root, root adds (the root receives one message per step)
        acc += x[r]
        sent[r] += b
        recv[root] += b
    out = np.empty_like(x)
    out[root] = acc
    for r in others:            # step: root -> r
        out[r] = acc
        sent[root] += b
        recv[r] += b
    steps = 2 * (n - 1)
    return Sim(out, sent, recv, steps, [b] * steps)
# --8<-- [end:naive]


# --8<-- [start:rd]
def _recursive_doubling_core(data: np.ndarray, sim: Sim, ranks: np.ndarray) -> None:
    """p = 2^k ranks: in step i rank r and r XOR 2^i swap their whole vectors and both add."""
    p, count = data.shape
    b = count * data.dtype.itemsize
    r = np.arange(p)
    d = 1
    while d < p:
        _single_port(r, r ^ d)
        data[:] = data + data[r ^ d]          # the right side is read before the write
        sim.sent[ranks] += b
        sim.recv[ranks] += b
        sim.steps += 1
        sim.step_bytes.append(b)
        d <<= 1
# --8<-- [end:rd]


# --8<-- [start:rab]
def _rabenseifner_core(data: np.ndarray, sim: Sim, ranks: np.ndarray) -> None:
    """p = 2^k ranks, count divisible by p.

    Reduce-scatter by recursive halving: at distance d = p/2, p/4, …, 1 rank r keeps the lower
    half of its current window if bit d of r is 0 (else the upper half), sends the other half to
    r XOR d and adds what it receives. Rank r ends with the sum of block r (count/p elements).
    All-gather by recursive doubling: at distance d = 1, 2, …, p/2 partners swap their windows.
    """
    p, count = data.shape
    item = data.dtype.itemsize
    assert count % p == 0, "Rabenseifner needs count divisible by the number of ranks"
    r = np.arange(p)
    off, length = np.zeros(p, dtype=np.int64), count      # each rank's window [off, off+length)
    d = p // 2
    while d >= 1:                                          # recursive halving reduce-scatter
        half, partner = length // 2, r ^ d
        _single_port(r, partner)
        keep = off + np.where(r & d, half, 0)
        idx = keep[:, None] + np.arange(half)
        theirs = data[partner[:, None], idx]               # what the partner sends me (its copy)
        data[r[:, None], idx] += theirs
        sim.sent[ranks] += half * item
        sim.recv[ranks] += half * item
        sim.steps += 1
        sim.step_bytes.append(half * item)
        off, length, d = keep, half, d // 2
    d = 1
    while d < p:                                           # recursive doubling all-gather
        partner = r ^ d
        _single_port(r, partner)
        pidx = off[partner][:, None] + np.arange(length)
        data[r[:, None], pidx] = data[partner[:, None], pidx]
        sim.sent[ranks] += length * item
        sim.recv[ranks] += length * item
        sim.steps += 1
        sim.step_bytes.append(length * item)
        off, length, d = np.minimum(off, off[partner]), 2 * length, 2 * d
# --8<-- [end:rab]


# --8<-- [start:fold]
def _folded(x: np.ndarray, core) -> Sim:
    """Run a power-of-two algorithm on any N, reducing to 2^⌊log₂N⌋ ranks as MPICH does
    (src/mpi/coll/allreduce/allreduce_intra_recursive_doubling.c, …_reduce_scatter_allgather.c).

    With p = 2^⌊log₂N⌋ and q = N − p: in one extra step each even rank 2i < 2q sends its whole
    vector to 2i+1, which adds it; the p remaining ranks run `core`; in one more step each odd
    rank 2i+1 < 2q sends the result back to 2i.
    """
    n, count = x.shape
    b = count * x.dtype.itemsize
    p = 1 << (n.bit_length() - 1)
    q = n - p
    data = x.copy()
    sim = Sim(data, np.zeros(n, np.int64), np.zeros(n, np.int64))
    even = np.arange(0, 2 * q, 2)
    if q:
        data[even + 1] += data[even]
        sim.sent[even] += b
        sim.recv[even + 1] += b
        sim.steps += 1
        sim.step_bytes.append(b)
    active = np.concatenate([np.arange(1, 2 * q, 2), np.arange(2 * q, n)])
    sub = data[active]
    core(sub, sim, active)
    data[active] = sub
    if q:
        data[even] = data[even + 1]
        sim.sent[even + 1] += b
        sim.recv[even] += b
        sim.steps += 1
        sim.step_bytes.append(b)
    return sim


def recursive_doubling_allreduce(x: np.ndarray) -> Sim:
    return _folded(x, _recursive_doubling_core)


def rabenseifner_allreduce(x: np.ndarray) -> Sim:
    return _folded(x, _rabenseifner_core)
# --8<-- [end:fold]


def ring(x: np.ndarray) -> Sim:
    """Ch1-03's ring simulator, wrapped as a Sim (chunks of np.array_split)."""
    n, count = x.shape
    out, sent, recv, steps = ring_allreduce(x)
    chunk = -(-count // n) * x.dtype.itemsize
    return Sim(out, sent, recv, steps, [chunk] * steps)


# --8<-- [start:trees]
def nccl_btree(n: int) -> np.ndarray:
    """parent[r] of NCCL's binary tree (ncclGetBtree in src/graph/trees.cc), root 0 (parent −1).

    Let b be the lowest set bit of r > 0. Its parent is (r XOR b) | 2b, or r XOR b when that is
    out of range. For N = 2^k: 0 — N/2, and below N/2 a complete in-order tree of height k−1
    whose inner nodes are the even ranks and whose leaves are the odd ranks.
    """
    parent = np.full(n, -1)
    for r in range(1, n):
        b = r & -r
        up = (r ^ b) | (b << 1)
        parent[r] = up if up < n else r ^ b
    return parent


def nccl_double_tree(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's two trees (ncclGetDtree): the btree, and its mirror r -> N−1−r (N even) or its shift
    r -> r+1 (N odd)."""
    t0 = nccl_btree(n)
    r = np.arange(n)
    if n % 2 == 0:
        m = n - 1 - r
        t1 = np.where(t0[m] < 0, -1, n - 1 - t0[m])
    else:
        s = (r - 1) % n
        t1 = np.where(t0[s] < 0, -1, (t0[s] + 1) % n)
    return t0, t1


def tree_depth(parent: np.ndarray) -> int:
    depth = np.zeros(len(parent), dtype=int)
    for r in range(len(parent)):
        v = r
        while parent[v] >= 0:
            depth[r] += 1
            v = parent[v]
    return int(depth.max())
# --8<-- [end:trees]


# --8<-- [start:bintree]
def binary_tree_allreduce(x: np.ndarray, parent: np.ndarray | None = None) -> Sim:
    """Unpipelined: the whole S-byte vector climbs the tree, then the sum descends it.

    Reduce: a rank whose children have all arrived sends its partial sum to its parent; a parent
    takes one child per step (single-port), the lowest rank first. Broadcast: a rank that has the
    sum sends it to one child per step. Greedy: every rank acts as soon as it can.
    """
    n, count = x.shape
    b = count * x.dtype.itemsize
    parent = nccl_btree(n) if parent is None else parent
    root = int(np.flatnonzero(parent < 0)[0])
    nonroot = np.flatnonzero(parent >= 0)
    kids = [np.flatnonzero(parent == v) for v in range(n)]
    data = x.copy()
    sim = Sim(data, np.zeros(n, np.int64), np.zeros(n, np.int64))
    waiting = np.bincount(parent[nonroot], minlength=n)          # children not yet received
    done_up = np.zeros(n, dtype=bool)
    while waiting[root] > 0:                                     # reduce
        ready = nonroot[(waiting[nonroot] == 0) & ~done_up[nonroot]]
        _, first = np.unique(parent[ready], return_index=True)   # one child per parent per step
        src = ready[first]
        dst = parent[src]
        _single_port(src, dst)
        data[dst] += data[src]
        waiting[dst] -= 1
        done_up[src] = True
        sim.sent[src] += b
        sim.recv[dst] += b
        sim.steps += 1
        sim.step_bytes.append(b)
    has = np.zeros(n, dtype=bool)
    has[root] = True
    nxt = np.zeros(n, dtype=int)                                 # next child to serve
    nkids = np.array([len(k) for k in kids])
    while not has.all():                                         # broadcast
        src = np.flatnonzero(has & (nxt < nkids))
        dst = np.array([kids[v][nxt[v]] for v in src])
        _single_port(src, dst)
        data[dst] = data[src]
        has[dst] = True
        nxt[src] += 1
        sim.sent[src] += b
        sim.recv[dst] += b
        sim.steps += 1
        sim.step_bytes.append(b)
    return sim
# --8<-- [end:bintree]


# --8<-- [start:dbt]
def _greedy_matching(cand: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """A maximal set of candidate messages (given in priority order) with distinct senders and
    distinct receivers: repeatedly take each free sender's best message to a free receiver."""
    chosen = []
    busy_s, busy_d = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    while len(cand):
        cand = cand[~busy_s[src[cand]] & ~busy_d[dst[cand]]]
        if not len(cand):
            break
        pick = cand[np.unique(src[cand], return_index=True)[1]]   # best message of each sender
        pick = np.sort(pick)
        pick = pick[np.unique(dst[pick], return_index=True)[1]]   # best sender of each receiver
        busy_s[src[pick]] = True
        busy_d[dst[pick]] = True
        chosen.append(pick)
    return np.concatenate(chosen) if chosen else cand


def double_binary_tree_allreduce(x: np.ndarray, segments: int = 8) -> Sim:
    """NCCL-style double binary tree, pipelined.

    Tree τ ∈ {0, 1} (nccl_double_tree) carries half τ of the vector, cut into `segments` equal
    segments. A rank sends segment j up tree τ once all its τ-children's segment j have arrived
    (adding each on arrival), and sends segment j of the sum down once it has it. Each step a
    greedy single-port scheduler picks, for every rank, the ready message with the lowest
    (segment, phase, tree) that does not collide with another rank's choice of receiver.
    """
    n, count = x.shape
    m = segments
    assert count % (2 * m) == 0, "count must be divisible by 2·segments"
    seg = count // (2 * m)
    b = seg * x.dtype.itemsize
    trees = nccl_double_tree(n)
    buf = x.reshape(n, 2, m, seg).transpose(1, 0, 2, 3).copy()   # buf[τ, rank, segment, :]
    nchild = np.stack([np.bincount(t[t >= 0], minlength=n) for t in trees])
    got = np.zeros((2, n, m), dtype=int)                         # children's segments received
    final = np.zeros((2, n, m), dtype=bool)                      # holds the sum of this segment
    # one row per message, in priority order: segment, then reduce before broadcast, then tree
    rows = []
    for j in range(m):
        for phase in (0, 1):
            for tau, t in enumerate(trees):
                c = np.flatnonzero(t >= 0)
                p = t[c]
                src, dst = (c, p) if phase == 0 else (p, c)
                rows.append(np.stack([np.full_like(c, tau), np.full_like(c, phase), np.full_like(c, j), src, dst]))
    tau_, ph_, j_, src_, dst_ = np.concatenate(rows, axis=1)
    pending = np.ones(len(src_), dtype=bool)
    sim = Sim(None, np.zeros(n, np.int64), np.zeros(n, np.int64))
    roots = [int(np.flatnonzero(t < 0)[0]) for t in trees]
    for tau, r0 in enumerate(roots):
        final[tau, r0] = nchild[tau, r0] == 0
    while pending.any():
        cand = np.flatnonzero(pending)
        up = ph_[cand] == 0
        ready = np.where(up, got[tau_[cand], src_[cand], j_[cand]] == nchild[tau_[cand], src_[cand]],
                         final[tau_[cand], src_[cand], j_[cand]])
        cand = _greedy_matching(cand[ready], src_, dst_, n)
        t, ph, j, s, d = tau_[cand], ph_[cand], j_[cand], src_[cand], dst_[cand]
        _single_port(s, d)
        payload = buf[t, s, j]                                    # read everything before writing
        red = ph == 0
        buf[t[red], d[red], j[red]] += payload[red]
        got[t[red], d[red], j[red]] += 1
        buf[t[~red], d[~red], j[~red]] = payload[~red]
        final[t[~red], d[~red], j[~red]] = True
        for tau, r0 in enumerate(roots):                          # a root whose reduce is complete
            final[tau, r0] |= got[tau, r0] == nchild[tau, r0]
        pending[cand] = False
        np.add.at(sim.sent, s, b)
        np.add.at(sim.recv, d, b)
        sim.steps += 1
        sim.step_bytes.append(b)
    sim.out = buf.transpose(1, 0, 2, 3).reshape(n, count)
    return sim
# --8<-- [end:dbt]


SIMULATORS = {
    "naive (reduce+bcast)": naive_allreduce,
    "recursive doubling": recursive_doubling_allreduce,
    "Rabenseifner": rabenseifner_allreduce,
    "ring": ring,
    "binary tree": binary_tree_allreduce,
    "double binary tree": double_binary_tree_allreduce,
}


# --8<-- [start:binomial]
def binomial_tree_allreduce(x: np.ndarray) -> Sim:
    """MPICH-style binomial tree: reduce to rank 0 (in step k, ranks r ≡ 2^k mod 2^(k+1) send to
    r − 2^k), then broadcast along the same tree in reverse. The seed's log₂N·S is its root's
    bytes in one direction."""
    n, count = x.shape
    b = count * x.dtype.itemsize
    data = x.copy()
    sim = Sim(data, np.zeros(n, np.int64), np.zeros(n, np.int64))
    r = np.arange(n)
    dists = [1 << k for k in range(int(ab.log2_ceil(n)))]
    for phase, order in (("reduce", dists), ("bcast", dists[::-1])):
        for d in order:
            child = r[r % (2 * d) == d]
            par = child - d
            src, dst = (child, par) if phase == "reduce" else (par, child)
            _single_port(src, dst)
            if phase == "reduce":
                data[dst] += data[src]
            else:
                data[dst] = data[src]
            sim.sent[src] += b
            sim.recv[dst] += b
            sim.steps += 1
            sim.step_bytes.append(b)
    return sim
# --8<-- [end:binomial]


# The α-β formula each simulator is checked against (snippets/common/alphabeta.py).
FORMULAS = {
    "naive (reduce+bcast)": ab.naive_allreduce_time,
    "recursive doubling": ab.recursive_doubling_time,
    "Rabenseifner": ab.rabenseifner_time,
    "ring": ab.ring_allreduce_time,
    "binary tree": ab.binary_tree_time,
    "double binary tree": ab.double_binary_tree_time,
}

# Theorems 1.2.4-1.2.8: bytes the busiest rank sends, as a multiple of S (N a power of 2, N ≥ 4).
SENT_MAX = {
    "naive (reduce+bcast)": lambda n: n - 1,
    "recursive doubling": lambda n: np.log2(n),
    "Rabenseifner": lambda n: 2 * (n - 1) / n,
    "ring": lambda n: 2 * (n - 1) / n,
    "binary tree": lambda n: 3.0,
    "double binary tree": lambda n: 2.0,
}

POW2_NS = tuple(2 ** k for k in range(1, 11))  # 2 … 1024
ALPHA_EXAMPLE, BETA_EXAMPLE = 5e-6, 1 / 12.5e9   # assumed, as in Ch1-03: 5 µs, 12.5 GB/s


def inputs(n: int, count: int, seed: int = 0) -> np.ndarray:
    """Random small integers stored as float32: every partial sum is exact, in any order."""
    return np.random.default_rng(seed + n).integers(-8, 8, size=(n, count)).astype(np.float32)


# --8<-- [start:check]
def check(name: str, n: int, count: int | None = None, segments: int = 4) -> dict:
    """Run one simulator on real data; return its counts beside the α-β formula's.

    The formula T = a·α + b·β is split by evaluating it at (α, β) = (1, 0) and (0, 1): a is its
    step count and b the bytes on its critical path, to compare with the simulator's steps and
    Σ step_bytes.
    """
    count = max(n, 2 * segments * 8) if count is None else count
    x = inputs(n, count)
    sim = SIMULATORS[name](x, segments) if name == "double binary tree" else SIMULATORS[name](x)
    s = count * x.dtype.itemsize
    fn = FORMULAS[name]
    return {"name": name, "N": n, "S": s, "correct": sim.correct(x),
            "steps": sim.steps, "f_steps": float(fn(n, s, 1.0, 0.0)),
            "path_bytes": int(np.sum(sim.step_bytes)), "f_bytes": float(fn(n, s, 0.0, 1.0)),
            "sent_max": int(sim.sent.max()), "recv_max": int(sim.recv.max()),
            "sent_mean": float(sim.sent.mean())}
# --8<-- [end:check]


def exact_sweep(ns=POW2_NS) -> list[dict]:
    """Experiment 2: the five algorithms whose formula is exact, N = 2 … 1024."""
    return [check(name, n) for n in ns for name in FORMULAS if name != "double binary tree"]


def dbt_sweep(ns=(4, 16, 64, 256, 1024), segments=(1, 2, 4, 8)) -> list[dict]:
    """Experiment 3: the pipelined double binary tree at several segment counts M."""
    rows = []
    for n in ns:
        for m in segments:
            if n >= 1024 and m > 4:
                continue  # N = 1024 with M = 8 takes ~0.3 s alone; the cell stays under 1 s
            r = check("double binary tree", n, count=max(n, 64), segments=m)
            r["M"] = m
            rows.append(r)
    return rows


def dbt_other_n(ns=(3, 5, 6, 7, 12, 100, 1000), segments: int = 1) -> list[dict]:
    """The double binary tree for N not a power of 2 (NCCL's shift for odd N, mirror for even N)."""
    rows = []
    for n in ns:
        x = inputs(n, 2 * segments * 2)
        sim = double_binary_tree_allreduce(x, segments)
        s = x.shape[1] * x.dtype.itemsize
        rows.append({"N": n, "correct": sim.correct(x), "sent_max": sim.sent.max() / s, "recv_max": sim.recv.max() / s,
                     "total": sim.sent.sum() / s})
    return rows


def fold_sweep(ns=(3, 5, 6, 7, 12, 100, 1000)) -> list[dict]:
    """Non-powers of two: the fold adds two steps and 2S on the critical path."""
    rows = []
    for n in ns:
        p = 1 << (n.bit_length() - 1)
        count = 4 * p
        for name in ("recursive doubling", "Rabenseifner"):
            x = inputs(n, count)
            sim = SIMULATORS[name](x)
            rows.append({"name": name, "N": n, "p": p, "S": count * 4, "correct": sim.correct(x),
                         "steps": sim.steps, "sent_max": int(sim.sent.max()), "recv_max": int(sim.recv.max()),
                         "path_bytes": int(np.sum(sim.step_bytes)),
                         "f_steps_ceil": float(FORMULAS[name](n, 1.0, 1.0, 0.0))})
    return rows


# --8<-- [start:seed]
def seed_metrics(n: int = 64, count: int = 256) -> dict[str, dict[str, float]]:
    """Per-rank bytes, in units of S, of each algorithm on the same real data, in four metrics."""
    x = inputs(n, count)
    s = count * x.dtype.itemsize
    sims = {"naive (reduce+bcast)": naive_allreduce(x), "binomial tree": binomial_tree_allreduce(x),
            "ring": ring(x), "binary tree": binary_tree_allreduce(x),
            "double binary tree": double_binary_tree_allreduce(x, 4)}
    out = {}
    for name, sim in sims.items():
        assert sim.correct(x)
        out[name] = {"sent_max": sim.sent.max() / s, "recv_max": sim.recv.max() / s,
                     "root_sent_plus_recv": (sim.sent[0] + sim.recv[0]) / s, "sent_mean": sim.sent.mean() / s}
    return out


def seed_claims(n: int, s: float) -> dict[str, float]:
    """The seed's three functions, verbatim in meaning (bytes): ring, tree, naive."""
    return {"ring": 2 * (n - 1) * s / n, "binomial tree": np.log2(n) * s, "naive (reduce+bcast)": 2 * (n - 1) * s}
# --8<-- [end:seed]


# --8<-- [start:tradeoff]
ALL_COSTS = {**ab.ALGORITHMS, "binary tree": ab.binary_tree_time}


def fastest(ns, sizes, alpha: float, beta: float) -> list[list[str]]:
    """Name of the α-β-cheapest algorithm for every (N, S)."""
    names = list(ALL_COSTS)
    table = []
    for n in ns:
        t = np.vstack([np.broadcast_to(ALL_COSTS[k](n, np.asarray(sizes, float), alpha, beta), (len(sizes),))
                       for k in names])
        table.append([names[i] for i in t.argmin(axis=0)])
    return table


def ring_or_tree(ns, sizes, alpha: float, beta: float) -> list[list[str]]:
    """Only NCCL's two: ring against the (idealised) double binary tree model."""
    sizes = np.asarray(sizes, float)
    return [["ring" if r < t else "tree" for r, t in zip(ab.ring_allreduce_time(n, sizes, alpha, beta),
                                                       ab.double_binary_tree_time(n, sizes, alpha, beta))]
            for n in ns]


def ring_tree_crossover(n: int, alpha: float, beta: float) -> float:
    """S* above which ring beats the tree model: N(N − 1 − ⌈log₂N⌉)·α/β."""
    return float(ab.crossover_bytes(n, alpha, beta, ab.double_binary_tree_time, ab.ring_allreduce_time))
# --8<-- [end:tradeoff]


def tradeoff_figure(ns=(8, 64, 1024), alpha: float = ALPHA_EXAMPLE, beta: float = BETA_EXAMPLE) -> str:
    from matplotlib.ticker import FuncFormatter

    from snippets.common import figures

    sizes = np.logspace(2, 10, 60)
    fig, axes = figures.new(11, 3.8, ncols=len(ns), sharey=True)
    styles = ["-", "--", "-.", ":", "-", "--"]
    for ax, n in zip(axes, ns):
        for (name, fn), ls in zip(ALL_COSTS.items(), styles):
            ax.loglog(sizes, np.broadcast_to(fn(n, sizes, alpha, beta), sizes.shape) * 1e6, ls, label=name, lw=1.4)
        ax.set_title(f"N = {n}")
        ax.set_xlabel("S (bytes)")
        ax.set_xticks([1e2, 1e4, 1e6, 1e8, 1e10], ["100 B", "10 KB", "1 MB", "100 MB", "10 GB"])
        ax.minorticks_off()  # log-axis minor ticks and mathtext labels dominate the drawing time
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0].set_ylabel("α-β 예측 시간 (µs)")
    axes[-1].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"가정: α = {alpha * 1e6:g} µs, 1/β = {1 / beta / 1e9:g} GB/s (측정값 아님)", fontsize=9)
    return figures.svg(fig)


def dbt_time_vs_segments(n: int, s_bytes: float, segments, alpha: float, beta: float) -> list[dict]:
    """α-β time of the simulated pipelined schedule for several M, beside the idealised model."""
    rows = []
    for m in segments:
        x = inputs(n, 2 * m)  # the step count does not depend on the data size
        sim = double_binary_tree_allreduce(x, m)
        seg = s_bytes / (2 * m)
        rows.append({"M": m, "steps": sim.steps, "time": sim.steps * (alpha + seg * beta),
                     "model": float(ab.double_binary_tree_time(n, s_bytes, alpha, beta)),
                     "floor": 4 * m * alpha + 2 * s_bytes * beta})
    return rows

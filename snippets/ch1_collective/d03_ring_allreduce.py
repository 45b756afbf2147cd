"""Ch1-03 Ring AllReduce 의 수학: the code the page runs and the tests import.

Ring convention (rank r sends to r+1 mod N, receives from r−1 mod N):
  reduce-scatter step t = 0..N−2: rank r sends chunk (r − t) mod N; the receiver adds it.
  all-gather     step t = 0..N−2: rank r sends chunk (r + 1 − t) mod N; the receiver keeps it.
After the reduce-scatter, rank r holds the complete sum of chunk (r + 1) mod N.
"""
from __future__ import annotations

import numpy as np

from snippets.common import alphabeta as ab


# --8<-- [start:ring]
def ring_allreduce(x: np.ndarray):
    """Ring AllReduce of x[r] (rank r's vector) moving real arrays, all ranks at once.

    Returns (out, sent_bytes, recv_bytes, steps): out[r] is rank r's result, the byte counts
    are per rank. Chunks follow np.array_split, so S need not be divisible by N.
    """
    n, count = x.shape
    sizes = np.array([len(c) for c in np.array_split(np.arange(count), n)])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    cmax = sizes.max()
    data = np.zeros((n, n, cmax), dtype=x.dtype)  # data[r, j] = rank r's copy of chunk j
    for j in range(n):
        data[:, j, :sizes[j]] = x[:, starts[j]:starts[j] + sizes[j]]
    ranks, nxt = np.arange(n), (np.arange(n) + 1) % n
    sent = np.zeros(n, dtype=np.int64)
    item = x.dtype.itemsize
    steps = 0
    for t in range(n - 1):  # reduce-scatter: receive and add
        idx = (ranks - t) % n
        data[nxt, idx] += data[ranks, idx]
        sent += sizes[idx] * item
        steps += 1
    for t in range(n - 1):  # all-gather: receive and overwrite
        idx = (ranks + 1 - t) % n
        data[nxt, idx] = data[ranks, idx]
        sent += sizes[idx] * item
        steps += 1
    out = np.concatenate([data[:, j, :sizes[j]] for j in range(n)], axis=1)
    recv = np.roll(sent, 1)  # rank r receives exactly what rank r−1 sends
    return out, sent, recv, steps
# --8<-- [end:ring]


# --8<-- [start:trace]
def ring_trace(n: int = 4):
    """Step-by-step state of a ring on n ranks with one element per chunk.

    Rank r's input is the vector with 10**r in every chunk, so a chunk's value spells out
    which ranks' inputs it already contains. Returns a list of (phase, step, state, sends)
    where state[r][j] is rank r's value of chunk j and sends[r] the chunk rank r sent.
    """
    x = np.array([[10 ** r] * n for r in range(n)], dtype=np.int64)
    data = x.copy()
    ranks, nxt = np.arange(n), (np.arange(n) + 1) % n
    trace = [("초기", 0, data.copy(), None)]
    for t in range(n - 1):
        idx = (ranks - t) % n
        data[nxt, idx] += data[ranks, idx]
        trace.append(("ReduceScatter", t + 1, data.copy(), idx.copy()))
    for t in range(n - 1):
        idx = (ranks + 1 - t) % n
        data[nxt, idx] = data[ranks, idx]
        trace.append(("AllGather", t + 1, data.copy(), idx.copy()))
    return trace


def contributors(value: int, n: int) -> str:
    """10**a + 10**b + … -> 'a+b+…' (which ranks' inputs a partial sum holds)."""
    digits = str(int(value)).zfill(n)[::-1]
    return "+".join(str(r) for r in range(n) if digits[r] == "1")
# --8<-- [end:trace]


def trace_markdown(n: int = 4) -> str:
    """The trace as one Markdown table: a row per (step, rank), the sent chunk in bold."""
    rows = ["| 단계 | rank | " + " | ".join(f"chunk {j}" for j in range(n)) + " | 보낸 chunk → 받는 rank |",
            "|---|---|" + "---|" * n + "---|"]
    for phase, step, state, sends in ring_trace(n):
        for r in range(n):
            cells = []
            for j in range(n):
                c = contributors(state[r, j], n)
                cells.append(f"**{c}**" if sends is not None and sends[(r - 1) % n] == j else c)
            send = "—" if sends is None else f"c{sends[r]} → r{(r + 1) % n}"
            label = f"{phase} {step}" if r == 0 else ""
            rows.append(f"| {label} | {r} | " + " | ".join(cells) + f" | {send} |")
    return "\n".join(rows)


# --8<-- [start:sweep]
def bytes_sweep(ns, elems_per_rank: int = 4, dtype=np.float32, seed: int = 0):
    """Run the ring on real random data for each N; return per-N simulated and formula bytes.

    S = N·elems_per_rank·itemsize bytes, so S is divisible by N and the formula is exact.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        count = n * elems_per_rank
        x = rng.integers(-8, 8, size=(n, count)).astype(dtype)  # integers: float sums are exact
        out, sent, recv, steps = ring_allreduce(x)
        s = count * np.dtype(dtype).itemsize
        rows.append({"N": n, "S": s, "steps": steps, "sent_max": int(sent.max()), "sent_min": int(sent.min()),
                     "recv_max": int(recv.max()), "formula": 2 * (n - 1) * s / n,
                     "sum_ok": bool(np.array_equal(out, np.broadcast_to(x.sum(0), out.shape)))})
    return rows
# --8<-- [end:sweep]


SWEEP_NS = (2, 3, 4, 5, 7, 8, 16, 31, 64, 100, 128, 256, 512, 1024)

# The comparison's stated constants (not measured): 5 µs per message, 12.5 GB/s per direction
# (a 100 Gb/s link). Experiment 4 fits the constants of the machine that built the page.
ALPHA_EXAMPLE = 5e-6
BETA_EXAMPLE = 1 / 12.5e9


# --8<-- [start:compare]
def compare_algorithms(n: int, sizes, alpha: float, beta: float) -> dict[str, np.ndarray]:
    """α-β time of every AllReduce algorithm in snippets.common.alphabeta at N ranks."""
    sizes = np.asarray(sizes, dtype=float)
    return {name: np.broadcast_to(fn(n, sizes, alpha, beta), sizes.shape) for name, fn in ab.ALGORITHMS.items()}


def best_algorithm(n: int, sizes, alpha: float, beta: float) -> list[str]:
    times = compare_algorithms(n, sizes, alpha, beta)
    names = list(times)
    stack = np.vstack([times[k] for k in names])
    return [names[i] for i in stack.argmin(axis=0)]


def ring_crossovers(n: int, alpha: float, beta: float) -> dict[str, float]:
    """Message size above which ring beats each latency-friendlier algorithm (bytes)."""
    return {name: float(ab.crossover_bytes(n, alpha, beta, fn, ab.ring_allreduce_time))
            for name, fn in ab.ALGORITHMS.items() if name != "ring"}


def crossover_label(v: float) -> str:
    """How the page prints a crossover: 0 and inf are different answers."""
    if v == float("inf"):
        return "없음 (ring 이 더 빠른 크기가 없음)"
    if v == 0:
        return "모든 S (ring 이 느린 크기가 없음)"
    return f"{v / 2**20:,.1f} MiB"
# --8<-- [end:compare]


def compare_figure(n: int, alpha: float, beta: float):
    from snippets.common import figures

    sizes = np.logspace(2, 10, 200)
    fig, ax = figures.new(7, 4)
    for name, t in compare_algorithms(n, sizes, alpha, beta).items():
        ax.loglog(sizes, t * 1e6, label=name)
    lb = np.maximum(ab.allreduce_bandwidth_lower_bound(n, sizes, beta), ab.allreduce_latency_lower_bound(n, alpha))
    ax.loglog(sizes, lb * 1e6, "k:", label="max(latency, bandwidth) 하한")
    ax.set_xlabel("메시지 크기 S (bytes)")
    ax.set_ylabel("α-β 예측 시간 (µs)")
    ax.set_title(f"N = {n}, α = {alpha * 1e6:g} µs, 1/β = {1 / beta / 1e9:g} GB/s")
    ax.legend(fontsize=8)
    return figures.svg(fig)


# --8<-- [start:fit]
def fit_ring_model(rows: list[dict], n: int):
    """Fit T = 2(N−1)α + 2(N−1)/N·S·β to measured all_reduce rows of one world size."""
    sizes = np.array([r["bytes"] for r in rows], dtype=float)
    secs = np.array([r["time_us_median"] for r in rows]) * 1e-6
    steps = np.full_like(sizes, 2 * (n - 1))
    per_rank_bytes = 2 * (n - 1) / n * sizes
    alpha, beta, rel = ab.fit_alpha_beta(steps, per_rank_bytes, secs)
    return {"alpha": alpha, "beta": beta, "bandwidth_GBps": 1 / beta / 1e9 if beta > 0 else float("inf"),
            "rel_residuals": rel, "sizes": sizes, "seconds": secs,
            "predicted": ab.ring_allreduce_time(n, sizes, alpha, beta)}
# --8<-- [end:fit]


def measured_allreduce(result) -> list[dict]:
    return [r for r in result.measurements if r["op"] == "all_reduce"]


def fit_figure(fits: list[tuple[str, dict]]):
    from snippets.common import figures

    fig, ax = figures.new(7, 4)
    for (label, f), color in zip(fits, ["C0", "C1", "C2"]):
        ax.loglog(f["sizes"], f["seconds"] * 1e6, "o", color=color, ms=4, label=f"측정: {label}")
        ax.loglog(f["sizes"], f["predicted"] * 1e6, "-", color=color, lw=1,
                  label=f"fit: α={f['alpha'] * 1e6:.0f} µs, 1/β={f['bandwidth_GBps']:.2f} GB/s")
    ax.set_xlabel("메시지 크기 S (bytes)")
    ax.set_ylabel("all_reduce 시간 (µs, median)")
    ax.legend(fontsize=8)
    return figures.svg(fig)


# --8<-- [start:figure]
def ring_step_layout(n: int = 4) -> list[dict]:
    """What the ring-step figure draws, panel by panel (the test checks it against Lemma 1.3.4):
    for each step, the chunk every rank sends to rank r+1 and how many inputs each (rank, chunk) holds."""
    panels = []
    for phase, step, state, sends in ring_trace(n)[1:]:
        counts = np.array([[len(contributors(v, n).split("+")) for v in row] for row in state])
        panels.append({"phase": phase, "step": step, "sends": [int(c) for c in sends], "counts": counts})
    return panels


def ring_step_figure(n: int = 4) -> str:
    """2 × (N−1) panels: ranks on a circle, each a row of N chunk cells shaded by how many inputs the
    chunk already sums; the arrow r → r+1 carries the chunk sent in that step."""
    import matplotlib.patches as mp

    from snippets.common import figures

    panels = ring_step_layout(n)
    fig, axes = figures.new(3.0 * (n - 1), 6.2, nrows=2, ncols=n - 1)
    cmap = __import__("matplotlib").colormaps["Blues"]
    ang = np.pi / 2 - 2 * np.pi * np.arange(n) / n
    pos = np.c_[np.cos(ang), np.sin(ang)] * 1.05
    w = 0.2
    for ax, p in zip(axes.ravel(), panels):
        ax.set_xlim(-1.75, 1.75), ax.set_ylim(-1.55, 1.6), ax.set_aspect("equal"), ax.axis("off")
        ax.set_title(f"{p['phase']} {p['step']}", fontsize=9)
        for r in range(n):
            x0, y0 = pos[r] - [n * w / 2, w / 2]
            for j in range(n):
                c = p["counts"][r, j]
                ax.add_patch(mp.Rectangle((x0 + j * w, y0), w, w, facecolor=cmap(0.15 + 0.85 * (c - 1) / (n - 1)),
                                          edgecolor="k", lw=0.5))
                ax.text(x0 + (j + 0.5) * w, y0 + w / 2, str(c), ha="center", va="center", fontsize=6,
                        color="white" if c == n else "black")
            ax.text(pos[r][0], pos[r][1] + 0.22, f"rank {r}", ha="center", va="bottom", fontsize=7)
            a, b = pos[r] * 0.72, pos[(r + 1) % n] * 0.72
            ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="->", color="C3", lw=1.2))
            mid = (a + b) / 2
            ax.text(*(mid * 0.62), f"c{p['sends'][r]}", fontsize=7, color="C3", ha="center", va="center")
    fig.suptitle(f"N = {n} ring: 칸 = chunk 0…{n - 1}, 숫자 = step 이 끝난 뒤 그 칸이 더한 입력 수, 화살표 = 그 step 에 보낸 chunk",
                 fontsize=9)
    return figures.svg(fig)
# --8<-- [end:figure]

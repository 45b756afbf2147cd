"""Ch2-06 Async Updates — Hogwild! 와 Parameter Server: the code the page runs and the tests import.

Distributed measurements (Hogwild! with shared-memory processes, torch's PostLocalSGDOptimizer,
DiLoCo-style outer steps) come from gpu_runs/async_sgd.py's committed results, one tab per hardware. The bounded-staleness
parameter server and elastic averaging are simulated here on a convex problem with a known optimum.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from snippets import results

PROGRAM = "async_sgd"


def _unit(plat) -> str:
    return "GPUs" if plat.is_gpu else "processes"


# --8<-- [start:delay]
def delay_threshold(tau):
    """Largest stable ηλ for w_{t+1} = w_t − ηλ·w_{t−κ} (Theorem 2.6.2): 2·sin(π / (2(2κ+1)))."""
    tau = np.asarray(tau, float)
    return 2 * np.sin(np.pi / (2 * (2 * tau + 1)))


def delayed_gd(h_lambda: float, tau: int, steps: int = 4000) -> float:
    """|w_T| of delayed gradient descent on f(w) = λw²/2 from w = 1 (history 1), with ηλ = h_lambda."""
    hist = [1.0] * (tau + 1)
    for _ in range(steps):
        hist.append(hist[-1] - h_lambda * hist[-1 - tau])
        if abs(hist[-1]) > 1e6:
            return math.inf
    return abs(hist[-1])


def measured_threshold(tau: int, lo: float = 0.0, hi: float = 2.0, iters: int = 30) -> float:
    """Bisect the largest ηλ for which delayed_gd does not blow up (|w_T| ≤ 1)."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delayed_gd(mid, tau) <= 1.0 else (lo, mid)
    return lo
# --8<-- [end:delay]


@functools.lru_cache(maxsize=None)
def least_squares(d: int = 16, n: int = 2048, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, d))
    y = a @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n)
    w_opt = np.linalg.lstsq(a, y, rcond=None)[0]
    lam_max = float(np.linalg.eigvalsh(a.T @ a / n).max())
    return a, y, w_opt, lam_max


# --8<-- [start:ps]
def parameter_server(tau: int, h_lambda: float, updates: int = 400, b: int = 128, seeds: int = 4,
                     worst: bool = False, target: float = 0.05) -> float:
    """Updates a bounded-staleness parameter server needs to bring ‖w − w_opt‖ below target·‖w_opt‖.

    SGD on least squares from w = 0 with η = h_lambda/λ_max. The server applies updates one at a
    time; the update that arrives was computed by a worker on a copy s ≤ κ updates stale (s uniform
    on 0..κ, or s = κ always when worst). Seeds are vectorised; the error is their mean. Returns inf
    if the target is not reached within `updates` (e.g. because the run diverges)."""
    a, y, w_opt, lam = least_squares()
    rng = np.random.default_rng(tau)
    hist = np.zeros((updates + 1, seeds, a.shape[1]))
    rows = np.arange(seeds)
    goal = target * np.linalg.norm(w_opt)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(updates):
            s = np.full(seeds, tau) if worst else rng.integers(0, tau + 1, seeds)
            w_read = hist[np.maximum(t - s, 0), rows]                      # (seeds, d), stale copies
            idx = rng.integers(0, len(y), (seeds, b))
            xb = a[idx]
            g = np.einsum("sbd,sb->sd", xb, np.einsum("sbd,sd->sb", xb, w_read) - y[idx]) / b
            hist[t + 1] = hist[t] - h_lambda / lam * g
            err = np.linalg.norm(hist[t + 1] - w_opt, axis=1).mean()
            if err <= goal:
                return float(t + 1)
            if not np.isfinite(err) or err > 1e6:
                return math.inf
    return math.inf
# --8<-- [end:ps]


def ps_rows(taus=(0, 1, 2, 4, 8, 16), fixed: float = 0.5) -> list[dict]:
    """For each κ: the threshold (formula and bisection), and the updates the parameter server needs
    with a fixed ηλ_max (worst-case delays) and with ηλ_max cut to half of Theorem 2.6.2's limit for
    that κ (worst-case and uniformly random delays)."""
    rows = []
    for tau in taus:
        thr = float(delay_threshold(tau))
        rows.append({"tau": tau, "threshold": thr, "measured": measured_threshold(tau),
                     "fixed": parameter_server(tau, fixed, worst=True),
                     "scaled": parameter_server(tau, 0.5 * thr, worst=True),
                     "scaled_random": parameter_server(tau, 0.5 * thr, worst=False)})
    return rows


# --8<-- [start:easgd]
def easgd(p: int, gamma: float, eta: float, steps: int = 1000, b: int = 8, seed: int = 0, track: bool = False):
    """Synchronous EASGD (Zhang et al. 2015, eqs. for the symmetric round): worker i and the centre x̃

        x_i ← x_i − η·g_i(x_i) − γ·(x_i − x̃),     x̃ ← x̃ + γ·Σ_i (x_i − x̃)     (Zhang's α = γ, β = p·γ)

    on least squares. Returns the centre's and the workers' final distances to w_opt, and (track) the
    largest drift of Σ_i x_i + x̃ from its value predicted by the gradient terms alone."""
    a, y, w_opt, _ = least_squares()
    rng = np.random.default_rng(seed)
    x = np.zeros((p, a.shape[1]))
    c = np.zeros(a.shape[1])
    conserved, drift = x.sum(0) + c, 0.0
    for _ in range(steps):
        idx = rng.integers(0, len(y), (p, b))
        g = np.einsum("pbd,pb->pd", a[idx], np.einsum("pbd,pd->pb", a[idx], x) - y[idx]) / b
        diff = x - c
        x = x - eta * g - gamma * diff
        c = c + gamma * diff.sum(0)
        if track:
            conserved = conserved - eta * g.sum(0)
            drift = max(drift, float(np.abs(x.sum(0) + c - conserved).max()))
    return {"centre": float(np.linalg.norm(c - w_opt)), "workers": float(np.linalg.norm(x - w_opt, axis=1).mean()),
            "spread": float(np.linalg.norm(x - x.mean(0), axis=1).mean()), "drift": drift}
# --8<-- [end:easgd]


def final(curve: list[dict], key: str = "dist") -> float:
    return curve[-1][key]


def method_rows(run) -> list[list]:
    m = run.measurements["methods"]
    steps = run.params["steps"]
    rows = [["sync (DDP, 매 step gradient all-reduce)", 1, m["sync"]["comm"]["all_reduce"]["calls"],
             f"{final(m['sync']['curve']):.4f}", "—"]]
    for h in run.params["Hs"]:
        loc, plain, dil = m[f"local_{h}"], m[f"outer_plain_{h}"], m[f"diloco_{h}"]
        rows.append([f"PostLocalSGDOptimizer, H={h}", h, loc["comm"].get("all_reduce", {}).get("calls", 0),
                     f"{final(loc['curve']):.4f}", f"{loc['spread_max']:.3f} / {loc['spread_after_averaging']:.1e}"])
        rows.append([f"outer SGD (lr 1, momentum 0), H={h}", h, plain["comm"]["all_reduce"]["calls"],
                     f"{final(plain['curve']):.4f}", f"= PostLocalSGD 와 최대 차이 {plain['max_diff_vs_local']:.1e}"])
        rows.append([f"DiLoCo 형 outer Nesterov, H={h}", h, dil["comm"]["all_reduce"]["calls"],
                     f"{final(dil['curve']):.4f}", "—"])
    assert all(r[2] == steps // r[1] for r in rows)
    return rows


def curves_figure(run):
    from snippets.common import figures

    m = run.measurements["methods"]
    fig, (ax1, ax2) = figures.new(9.0, 3.6, ncols=2)
    for key, style in [("sync", "k-")] + [(f"local_{h}", "-") for h in run.params["Hs"]]:
        c = m[key]["curve"]
        ax1.semilogy([p["step"] for p in c], [p["dist"] for p in c], style, label=key)
        calls = m[key]["comm"]["all_reduce"]["calls"]
        per = calls / run.params["steps"]
        ax2.semilogy([p["step"] * per for p in c], [p["dist"] for p in c], style, label=key)
    ax1.set_xlabel("step")
    ax2.set_xlabel("all-reduce 횟수")
    ax1.set_ylabel(r"$\|\theta - \theta_{opt}\|$")
    ax1.legend(fontsize=7)
    return figures.svg(fig)


# --------------------------------------------------------------------- one tab per hardware

# --8<-- [start:tabs]
def hogwild_tab(plat) -> str:
    """Experiment 1 on one hardware's smallest run. Hogwild! forks processes from rank 0 on the host CPU
    (shared memory), in a GPU run too: its wall time is always a host-CPU time."""
    r = plat.runs[0]
    rows = r.measurements["hogwild"]
    sync = r.measurements["methods"]["sync"]["curve"][-1]["dist"]
    host = r.hardware["cpu_count"]
    where = (f"GPU 결과 파일이지만 Hogwild! 는 rank 0 의 host CPU (core {host} 개) 에서 fork 한 process 들입니다"
             if plat.is_gpu else f"결과를 만든 machine 의 core 는 {host} 개입니다")
    over = [x["workers"] for x in rows if x["workers"] > host]
    return "\n\n".join([
        results.markdown_table(["worker process P", "총 update", "‖θ − θ_opt‖", "loss − loss_opt", "wall (s, host CPU)"],
                               [[x["workers"], x["updates_total"], f"{x['dist']:.4f}", f"{x['loss_gap']:.2e}", f"{x['wall_s']:.2f}"]
                                for x in rows]),
        f"출발점의 거리 ‖w_opt‖ = {r.measurements['w0_dist']:.3f}; 비교: 동기식 DDP ({r.hardware['world_size']} {_unit(plat)}) "
        f"{r.params['steps']} step 뒤 {sync:.4f}. {where}"
        + (f"; P = {', '.join(map(str, over))} 은 core 보다 process 가 많습니다." if over else ".")])


def methods_tab(plat) -> str:
    """Experiment 4 on one hardware: all-reduce counts and distances of every method, per world size."""
    out = []
    for r in plat.runs:
        m = r.measurements["methods"]
        out += [f"**N = {r.hardware['world_size']} {_unit(plat)}, {r.hardware['backend']}**, {r.params['steps']} step; "
                f"PostLocalSGD H=1 대 동기식 DDP 의 최대 parameter 차이 {m['local_1']['max_diff_vs_sync']:.1e}",
                results.markdown_table(["방법", "H", "all-reduce 횟수 (측정)", "마지막 ‖θ − θ_opt‖",
                                        "rank 사이 최대 퍼짐 / 평균 직후"], method_rows(r))]
    out.append(curves_figure(plat.runs[0]))
    return "\n\n".join(out)


def diloco_tab(plat) -> str:
    """Experiment 5 on one hardware's smallest run: the outer-momentum curves, read."""
    r = plat.runs[0]
    m = r.measurements["methods"]
    lines = []
    for h in r.params["Hs"]:
        d = [x["dist"] for x in m[f"diloco_{h}"]["curve"]]
        loc = [x["dist"] for x in m[f"local_{h}"]["curve"]]
        ups = sum(1 for a, b in zip(d, d[1:]) if b > a)
        lines.append(f"- H={h}: outer Nesterov 의 거리 {d[0]:.2f} → 최소 {min(d):.3f} → 마지막 {d[-1]:.3f} "
                     f"(기록 지점 사이에서 거리가 늘어난 횟수 {ups}); 평균만 하는 local SGD 는 마지막 {loc[-1]:.3f}")
    return f"N = {r.hardware['world_size']} {_unit(plat)}\n\n" + "\n".join(lines)
# --8<-- [end:tabs]

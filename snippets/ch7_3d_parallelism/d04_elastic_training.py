"""Ch7-04 Elastic Training: the code the page runs and the tests import.

Reads gpu_runs/results/elastic_resume (torchrun --max-restarts=1, a rank killed, resumed from DCP) and holds
the checkpoint-interval calculator (Young 1974, Daly 2006) with a vectorised failure simulation to check it.
"""
from __future__ import annotations

import math

import numpy as np

from snippets.common import figures


# --8<-- [start:interval]
def waste_fraction(tau, delta: float, mtbf: float, restart: float = 0.0):
    """Expected fraction of wall time not spent on new work, to first order in 1/T_MTBF.

    A cycle is T_ck of work plus Δ of checkpoint. Checkpointing costs Δ/(T_ck + Δ) of the time; a failure
    (rate 1/T_MTBF) loses on average half a cycle, (T_ck + Δ)/2, plus the restart R."""
    tau = np.asarray(tau, dtype=float)
    return delta / (tau + delta) + ((tau + delta) / 2 + restart) / mtbf


def young_interval(delta: float, mtbf: float) -> float:
    """T_ck* = √(2Δ·T_MTBF): the minimiser of Δ/T_ck + T_ck/(2T_MTBF) (Young 1974)."""
    return math.sqrt(2 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Leading term of Daly 2006's higher-order estimate, √(2Δ·T_MTBF) − Δ (for Δ < 2T_MTBF): the minimiser of Δ/(T_ck+Δ) + (T_ck+Δ)/(2T_MTBF)."""
    return math.sqrt(2 * delta * mtbf) - delta if delta < 2 * mtbf else mtbf
# --8<-- [end:interval]


# --8<-- [start:simulate]
def simulate_waste(tau: float, delta: float, mtbf: float, restart: float = 0.0, work: float | None = None,
                   runs: int = 400, seed: int = 0) -> float:
    """Monte-Carlo check, vectorised over runs: exponential failures; a failure during a cycle loses the
    cycle's elapsed time and costs R; the cycle then starts again. Returns 1 − work / wall time."""
    rng = np.random.default_rng(seed)
    work = work or 100 * mtbf
    cycles = int(math.ceil(work / tau))
    cycle = tau + delta
    # per run: the number of failed attempts before each cycle succeeds is geometric with p = exp(−cycle/T_MTBF)
    p_ok = math.exp(-cycle / mtbf)
    fails = rng.geometric(p_ok, size=(runs, cycles)) - 1
    n_fail = fails.sum(axis=1)
    # the lost time of a failed attempt is an exponential truncated to [0, cycle): its mean
    lost_mean = mtbf - cycle * p_ok / (1 - p_ok) if p_ok < 1 else 0.0
    wall = cycles * cycle + n_fail * (lost_mean + restart)
    return float(1 - (cycles * tau) / wall.mean())
# --8<-- [end:simulate]


def mtbf_from_interruptions(days: float, interruptions: int) -> float:
    """Mean time between interruptions of the job, seconds."""
    return days * 86400 / interruptions


def trajectory_rows(r) -> list[list]:
    m = r.measurements
    lost = set(m["lost_steps"])
    a0 = dict((s, v) for s, v in m["attempt0"])
    a1 = dict((s, v) for s, v in m["attempt1"])
    rows = []
    for s, ref in enumerate(m["uninterrupted"]):
        rows.append([s, f"{a0[s]:.9f}" if s in a0 else "—", f"{a1[s]:.9f}" if s in a1 else "—", f"{ref:.9f}",
                     "잃음 (다시 계산)" if s in lost else ("재개 후" if s in a1 else "checkpoint 전"),
                     "예" if m["resumed"][s] == ref else "아니오"])
    return rows


def trajectory_figure(r) -> str:
    m = r.measurements
    fig, ax = figures.new(7, 3.4)
    ax.plot(range(len(m["uninterrupted"])), m["uninterrupted"], "o-", color="0.6", lw=3, label="중단 없는 실행")
    s0, v0 = zip(*m["attempt0"])
    ax.plot(s0, v0, "x", color="C3", ms=9, label="attempt 0 (rank 1 이 죽음)")
    s1, v1 = zip(*m["attempt1"])
    ax.plot(s1, v1, ".", color="C0", ms=9, label=f"attempt 1 (step {m['resumed_from_step']} 의 checkpoint 에서)")
    ax.axvline(m["resumed_from_step"] - 0.5, color="C0", ls=":")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (dp 평균)")
    ax.legend(fontsize=8)
    return figures.svg(fig)

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
    """T_ck = √(2Δ·T_MTBF) (Young 1974): the minimiser of Δ/T_ck + T_ck/(2T_MTBF)."""
    return math.sqrt(2 * delta * mtbf)


def first_order_interval(delta: float, mtbf: float) -> float:
    """T_ck = √(2Δ·T_MTBF) − Δ: the minimiser of the first-order waste Δ/(T_ck+Δ) + (T_ck+Δ)/(2T_MTBF)
    (Theorem 7.4.4). It is the first term of Daly's estimate, not Daly's estimate."""
    return math.sqrt(2 * delta * mtbf) - delta


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly 2006's higher-order estimate: √(2ΔM)·[1 + ⅓√(Δ/2M) + ⅑(Δ/2M)] − Δ for Δ < 2M, else M."""
    if delta >= 2 * mtbf:
        return mtbf
    x = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def exact_waste(tau, delta: float, mtbf: float, restart: float = 0.0):
    """The exact expected waste of the model (exponential failures, none during restart): a cycle of
    T_ck + Δ takes (M + R)(e^{(T_ck+Δ)/M} − 1) of wall time on average, so the waste is
    1 − T_ck / ((M + R)(e^{(T_ck+Δ)/M} − 1))."""
    tau = np.asarray(tau, dtype=float)
    return 1 - tau / ((mtbf + restart) * np.expm1((tau + delta) / mtbf))


def exact_optimum(delta: float, mtbf: float) -> float:
    """The T_ck that minimises exact_waste (R only scales the wall time, so it does not move the optimum):
    d/dT_ck [T_ck / (e^{(T_ck+Δ)/M} − 1)] = 0  ⇔  1 − e^{−(T_ck+Δ)/M} = T_ck/M, solved by bisection."""
    lo, hi = 0.0, mtbf
    for _ in range(200):
        mid = (lo + hi) / 2
        if 1 - math.exp(-(mid + delta) / mtbf) - mid / mtbf > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
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


# --8<-- [start:scale]
def min_waste_vs_scale(nodes, mtbf_node: float, delta_at: tuple[int, float], shared_fabric: bool) -> list[dict]:
    """Minimum exact waste (R = 0) as the job grows: T_MTBF = T_MTBF,1 / n. Sharded checkpoints write
    Kψ/n per node; if the storage bandwidth grows with n (each node writes to its own disks), Δ ∝ 1/n;
    on a fixed shared fabric (aggregate bandwidth B) all nodes share B and Δ = Kψ/B does not shrink."""
    n0, d0 = delta_at
    out = []
    for n in nodes:
        M = mtbf_node / n
        delta = d0 if shared_fabric else d0 * n0 / n
        tau = exact_optimum(delta, M)
        out.append({"n": n, "mtbf": M, "delta": delta, "tau": tau, "waste": float(exact_waste(tau, delta, M))})
    return out
# --8<-- [end:scale]


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


# --8<-- [start:agent]
def membership_restarts(states, waiting, max_restarts: int = 1) -> dict:
    """Drive the installed torchrun agent loop (SimpleElasticAgent._invoke_run, torch/distributed/elastic/
    agent/server/api.py) with scripted worker states: HEALTHY while `waiting` new nodes wait is a membership
    change, FAILED a worker failure. Returns the final state, each restart with the restarts left after it
    happened, and what is left of --max-restarts."""
    from unittest import mock

    from torch.distributed.elastic.agent.server.api import (RunResult, SimpleElasticAgent, WorkerSpec,
                                                           WorkerState)

    class ScriptedAgent(SimpleElasticAgent):            # only the process handling is replaced
        def __init__(self, spec):
            super().__init__(spec)
            self.script, self.restarts = list(states), []

        def _initialize_workers(self, wg):
            wg.state = WorkerState.HEALTHY

        def _restart_workers(self, wg):
            self.restarts.append(self._remaining_restarts)
            wg.state = WorkerState.HEALTHY

        def _monitor_workers(self, wg):
            return RunResult(state=WorkerState[self.script.pop(0)])

        def _exit_barrier(self):
            pass

        def _start_workers(self, wg):
            return {}

        def _stop_workers(self, wg):
            pass

        def _shutdown(self, *args, **kwargs):
            pass

    rdzv = mock.Mock()
    rdzv.num_nodes_waiting.side_effect = list(waiting)
    agent = ScriptedAgent(WorkerSpec(role="trainer", local_world_size=1, rdzv_handler=rdzv, entrypoint="train.py",
                                     max_restarts=max_restarts, monitor_interval=1e-4))
    result = agent._invoke_run()
    return {"state": result.state.name, "restarts_left_after_each_restart": agent.restarts,
            "remaining_restarts": agent._remaining_restarts}
# --8<-- [end:agent]


def restart_timeline(r) -> str:
    """The kill-and-restart run as a timeline per process (from the results file): attempt 0's steps, the
    checkpoints published every c steps, the kill before step k, the survivor stuck in its collective until
    the error reaches it, the agent's restart, and attempt 1 reloading step c⌊k/c⌋ and recomputing."""
    m, p = r.measurements, r.params
    k, c, steps = p["kill_step"], p["every"], p["steps"]
    resumed = m["resumed_from_step"]
    fig, ax = figures.new(8.6, 2.8)
    lanes = {"rank 0": 2, f"rank {p['kill_rank']}": 1, "agent": 0}
    gap = 2.5                                             # drawn width of failure detection + restart
    for name, y in lanes.items():
        if name == "agent":
            ax.broken_barh([(k, gap)], (y - 0.3, 0.6), color="0.75")
            ax.text(k + gap / 2, y, "감지 → 정지 → rendezvous", ha="center", va="center", fontsize=7)
            continue
        ax.broken_barh([(s, 0.9) for s in range(k)], (y - 0.3, 0.6), color="C3", alpha=0.45)
        ax.broken_barh([(k + gap + (s - resumed), 0.9) for s in range(resumed, steps)], (y - 0.3, 0.6),
                       color="C0", alpha=0.6)
        if y == 2:
            ax.broken_barh([(k, gap * 0.6)], (y - 0.3, 0.6), facecolor="white", hatch="///", edgecolor="C3")
            ax.text(k + 0.1, y + 0.45, "collective 에서 대기", fontsize=7)
        else:
            ax.plot([k], [y], "x", color="k", ms=10)
    for s in range(c, k + 1, c):
        ax.axvline(s, color="C2", ls=":", lw=1)
    ax.text(resumed, 2.75, f"latest = step {resumed}", color="C2", fontsize=8, ha="center")
    ax.set_yticks(list(lanes.values()), list(lanes))
    ax.set_xlabel(f"시간 (step 단위; 빨강 attempt 0, 파랑 attempt 1 은 step {resumed} 부터)")
    ax.set_ylim(-0.6, 3.0)
    return figures.svg(fig)

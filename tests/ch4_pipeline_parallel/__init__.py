"""Helpers for Chapter 4's tests: the synthetic GPU fixtures (tests/gpu_fixtures/results) as one hardware's tab."""
from __future__ import annotations

import copy
from pathlib import Path

from snippets import results

FIXTURES = Path(__file__).resolve().parents[1] / "gpu_fixtures" / "results"


def gpu_fixture(program: str, world: int = 2) -> results.Result:
    """The GPU-shaped fixture of `program` at `world` GPUs (one node of NVIDIA H200, NCCL)."""
    return results.read(FIXTURES / program / f"gpu-nccl-1x{world}-nvidia-h200.json")


def platform(*runs) -> results.Platform:
    """The one Platform (hardware tab) these results form."""
    plats = results.platforms(list(runs))
    assert len(plats) == 1, [p.label for p in plats]
    return plats[0]


def without_world_2(run: results.Result, world: int = 8) -> results.Platform:
    """The same GPU file as if measured on `world` GPUs only (a real 8-GPU run): a tab with no world size 2."""
    d = copy.deepcopy(run.data)
    d["hardware"] = {**d["hardware"], "world_size": world, "gpu_count": world}
    return platform(results.Result(run.path, d))


def mutated(run: results.Result, change) -> results.Result:
    """A deep copy of `run` with change(data) applied (the committed fixture file is not touched)."""
    d = copy.deepcopy(run.data)
    change(d)
    return results.Result(run.path, d)


def relabelled(run: results.Result, gpu_name: str) -> results.Result:
    """The same GPU file as if measured on another GPU model: a third hardware tab (for the cell-time budget)."""
    d = copy.deepcopy(run.data)
    d["hardware"] = {**d["hardware"], "gpu_name": gpu_name}
    return results.Result(run.path.with_name(run.path.name.replace("h200", "other")), d)


def three_hardwares(program: str) -> list[results.Result]:
    """The committed CPU files of `program`, its GPU fixture and a relabelled copy of it: three tabs."""
    g = gpu_fixture(program)
    return [r for r in results.experiment(program) if not r.is_gpu] + [g, relabelled(g, "NVIDIA H100 80GB HBM3")]


def tabs_time(runs, render) -> float:
    """Thread CPU seconds of one hardware_tabs call (what the page's cell does), asserting it made every tab."""
    import time

    assert len(results.platforms(runs)) == 3
    t0 = time.thread_time()
    results.hardware_tabs(runs, render)
    return time.thread_time() - t0

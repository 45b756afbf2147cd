"""Helpers for Chapter 3's tests: the synthetic GPU fixtures (tests/gpu_fixtures/results) as one hardware's tab."""
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


def as_world(run: results.Result, world: int) -> results.Result:
    """The same file as if measured on `world` GPUs (e.g. a real 8-GPU run, which has no naive split)."""
    d = copy.deepcopy(run.data)
    d["hardware"] = {**d["hardware"], "world_size": world, "gpu_count": world}
    return results.Result(run.path, d)


def cpu_runs(runs):
    return [r for r in runs if not r.is_gpu]


def relabelled(run: results.Result, gpu_name: str) -> results.Result:
    """The same GPU file as if measured on another GPU model: a third hardware tab (for the cell-time budget)."""
    d = copy.deepcopy(run.data)
    d["hardware"] = {**d["hardware"], "gpu_name": gpu_name}
    return results.Result(run.path.with_name(run.path.name.replace("h200", "other")), d)

"""Shared fixtures: launching gpu_runs programs for real (torchrun, CPU, gloo)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
SMOKE_BUDGET_S = 30  # GUIDE: a distributed smoke run in tests takes under 30 s


def launch(script: str, nproc: int = 2, args=(), timeout: float = 60, check: bool = True):
    """Run `torchrun --standalone --nproc_per_node=nproc gpu_runs/<script> args` on CPU.

    Returns (CompletedProcess, seconds). CUDA is hidden so the program takes its gloo path.
    """
    # PYTHONPATH: this checkout's gpu_runs/snippets, not whichever checkout the venv was installed from
    # not HARNESS_CHECK_DEVICES: its wrappers are counted a second time by DeepSpeed's captured functions
    # (zero_bench's backward all_reduce bytes double); tests/distributed/test_strict_devices.py runs it
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", script, *map(str, args)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    took = time.perf_counter() - t0
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
                             f"\n--- stderr\n{proc.stderr[-3000:]}")
    return proc, took


@pytest.fixture
def run_tiny(tmp_path):
    """Launch a program's tiny preset into a temporary results folder; return (data, seconds)."""

    def _run(program: str, nproc: int = 2, extra=(), timeout: float = 60):
        out = tmp_path / program
        _, took = launch(f"gpu_runs/{program}.py", nproc, ["--preset", "tiny", "--out", out, *extra], timeout)
        files = sorted(out.glob("*.json"))
        assert len(files) == 1, f"expected one results file in {out}, found {files}"
        assert took / slowdown() < SMOKE_BUDGET_S, (
            f"{program} tiny preset took {took:.1f} s at slowdown {slowdown():.2f} (GUIDE: < {SMOKE_BUDGET_S} s)")
        return json.loads(files[0].read_text()), took

    return _run


# Seconds that `machine_speed_probe` takes on this project's 2-core machine in its usual state
# (measured 0.227–0.248 s on 2026-11-29). The VM's speed drifts by ±30 % over hours; the build
# budget is scaled by how much slower the probe runs right now, never loosened below 1×.
PROBE_REFERENCE_S = 0.24


def run_lab_script(lab: Path, budget_s: float) -> str:
    """Run a chapter lab (jupytext percent script) as a plain Python program, as a reader could; it must
    exit 0 within `budget_s` on the usual machine. Returns what it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(lab)], cwd=lab.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    took = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert took / slowdown() < budget_s, (f"{lab.parent.name} lab took {took:.1f} s (slowdown {slowdown():.2f}); "
                                          f"budget {budget_s:.0f} s")
    return proc.stdout


def machine_speed_probe() -> float:
    """A fixed pure-Python workload; best of three, in seconds (measured once per session)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = _probe()
    return _PROBE


_PROBE = None


def slowdown() -> float:
    """How much slower this machine runs now than usual (>= 1)."""
    return max(1.0, machine_speed_probe() / PROBE_REFERENCE_S)


def _probe() -> float:
    import timeit

    def work():
        s = 0
        for i in range(5_000_000):
            s += i * i % 7
        return s

    return min(timeit.repeat(work, number=1, repeat=3))


@pytest.fixture(scope="session")
def built_site():
    """Build the whole site once per session (strict, every cell executed).

    Returns (site, seconds, log): seconds is the build's wall time divided by the machine's current
    slowdown against its usual speed (machine_speed_probe), i.e. the build time on the usual machine."""
    if os.environ.get("BOOK_SITE"):  # reuse a site built beforehand (development only)
        return Path(os.environ["BOOK_SITE"]), 0.0, ""
    site = ROOT / "build" / "site"
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-d", str(site)]
    import resource

    probe = machine_speed_probe()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed ({wall:.0f} s):\n{proc.stderr[-6000:]}")
    factor = slowdown()
    write_build_time(ROOT / "build" / "build-time.txt", "suite", f"wall {wall:.2f} s\ncpu {cpu:.2f} s\n"
                     f"probe {probe:.3f} s (reference {PROBE_REFERENCE_S} s, slowdown {factor:.2f})\n")
    # the budget (GUIDE: at most 2 s per page on average) is wall time: what a reader or CI waits for.
    # The labs' kernels run beside the page cells (scripts/hooks.py), so CPU seconds exceed wall time.
    return site, wall / factor, proc.stderr


BENCH_MARK = "# scripts/bench_build.py"  # the benchmark's section of build/build-time.txt starts here


def write_build_time(path: Path, part: str, text: str) -> None:
    """build/build-time.txt holds two parts: the test suite's build (wall, cpu, probe) first, then the
    benchmark's section (scripts/bench_build.py, from BENCH_MARK on). Replace one part, keep the other."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    suite, mark, bench = old.partition(BENCH_MARK)
    if part == "suite":
        suite = text
    else:
        assert part == "bench" and text.startswith(BENCH_MARK), part
        mark, bench = "", text
    path.parent.mkdir(parents=True, exist_ok=True)
    suite = suite.rstrip("\n") + "\n" if suite.strip() else ""
    path.write_text(suite + mark + bench, encoding="utf-8")


CELL_BUDGET_S = 1.0  # GUIDE: one build-time cell runs in under 1 s


def cell_budget() -> float:
    """The 1 s cell budget on the usual machine, expressed for this machine right now."""
    return CELL_BUDGET_S * slowdown()


@pytest.fixture(scope="session", autouse=True)
def _warm_matplotlib():
    """Load matplotlib's fonts once, as the build does, so no test's timing pays for it."""
    from snippets.common import figures

    fig, ax = figures.new(2, 2)
    ax.loglog([1, 10], [1, 10], label="한글")
    ax.legend()
    figures.svg(fig)


# Every test file this session's collection reached (before -m / -k deselection), and whether the session
# collected the whole suite: tests/test_structure.py then checks the files on disk against it instead of
# collecting the suite a second time in a subprocess (about 10 s).
COLLECTED_FILES: set[str] = set()
WHOLE_SUITE: list[bool] = [False]


def pytest_itemcollected(item):
    COLLECTED_FILES.add(item.nodeid.split("::", 1)[0])


def pytest_collection_finish(session):
    args = [Path(a.split("::", 1)[0]).resolve() for a in session.config.args]
    WHOLE_SUITE[0] = args == [ROOT / "tests"] and not session.config.option.keyword

"""scripts/runs.py: the GPU refresh plan (dry run on this CPU machine), the CPU rerun's summary and
failure report, and superseding another CPU's results."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from snippets import book

ROOT = book.ROOT
sys.path.insert(0, str(ROOT / "scripts"))
import runs  # noqa: E402


def _dry(gpus: int | None, *extra: str):
    cmd = [sys.executable, "scripts/runs.py", "--gpu", "--dry-run", *extra]
    if gpus is not None:
        cmd += ["--gpus", str(gpus)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _lines(out: str):
    return [l for l in out.splitlines() if re.match(r"\s+(RUN|SKIP) ", l)]


def test_every_program_in_the_plans_exists():
    for program, nproc, extra, launcher in runs.RUNS:
        assert (ROOT / "gpu_runs" / f"{program}.py").exists(), program
    for r in runs.GPU_RUNS:
        assert (ROOT / "gpu_runs" / f"{r.program}.py").exists(), r.program
        assert r.gpus == "all" or int(r.gpus) >= r.min_gpus, r


def test_dry_run_on_this_cpu_machine_skips_everything_and_says_why():
    out = _dry(None)  # GPU detection: none visible here
    assert out.startswith("GPU refresh plan: 0 GPU(s) visible")
    lines = _lines(out)
    assert len(lines) == len(runs.GPU_RUNS)
    assert all(l.lstrip().startswith("SKIP") and "no GPU visible" in l for l in lines)


def test_dry_run_for_one_h200_fits_ten_minutes_and_explains_each_skip():
    out = _dry(1)
    lines = _lines(out)
    assert len(lines) == len(runs.GPU_RUNS)
    planned = runs.plan(1)
    for p, line in zip(planned, lines):
        assert p.run.program in line
        if p.skip:
            assert line.lstrip().startswith("SKIP") and p.skip in line
            assert p.skip  # a reason, never an empty skip
        else:
            assert line.lstrip().startswith("RUN") and "1 GPU(s)" in line and f"est {p.est_s} s" in line
    # programs that need two ranks are skipped on one GPU, with the program's own minimum
    facts = {p.run.program: runs.program_facts(p.run.program) for p in planned}
    for p in planned:
        need = max(facts[p.run.program]["min_world_size"], p.run.min_gpus)
        if need >= 2:
            assert p.skip.startswith(f"needs {need} GPU(s), 1 visible"), (p.run.program, p.skip)
    ran = [p for p in planned if not p.skip]
    assert sum(p.est_s for p in ran) <= runs.GPU_BUDGET_S == 600
    m = re.search(r"estimated (\d+) s", out)
    assert m and int(m.group(1)) == sum(p.est_s for p in ran)
    if importlib.util.find_spec("deepspeed"):
        assert any(p.run.program == "offload_bench" for p in ran), "the 1-GPU offload run is planned"


def test_plan_respects_the_budget_and_missing_packages(monkeypatch):
    tight = runs.plan(8, budget_s=100)
    ran = [p for p in tight if not p.skip]
    assert sum(p.est_s for p in ran) <= 100
    assert any("budget" in p.skip for p in tight)
    real = importlib.util.find_spec
    monkeypatch.setattr(runs.importlib.util, "find_spec", lambda m, *a: None if m == "deepspeed" else real(m, *a))
    for p in runs.plan(8):
        if "deepspeed" in runs.program_facts(p.run.program)["imports"]:
            assert p.skip == "deepspeed not installed", p


def test_a_failed_cpu_run_is_reported_and_fails_the_command(monkeypatch, capsys):
    # collectives_bench refuses one process (exit 2 inside torchrun): the summary must say FAILED
    monkeypatch.setattr(runs, "RUNS", [("collectives_bench", 1, ["--preset", "tiny", "--no-save"], "torchrun")])
    rc = runs.run_cpu([], timeout=120, allow_dirty=True)
    out = capsys.readouterr().out
    assert rc == 1
    assert re.search(r"FAILED \(exit 1\)\s+[\d.]+ s\s+collectives_bench ×1", out), out
    assert "0 ok, 1 failed" in out


def test_a_dirty_tree_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(runs, "dirty_inputs", lambda: ["gpu_runs/harness.py"])
    assert runs.run_cpu([], timeout=1, allow_dirty=False) == 2
    assert "gpu_runs/harness.py" in capsys.readouterr().err


def test_this_machines_cpu_result_supersedes_another_cpus(tmp_path):
    def write(name, kind, world):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"hardware": {"kind": kind, "world_size": world}}))
        return p
    new = write("cpu-gloo-2proc-this", "cpu", 2)
    old = write("cpu-gloo-2proc-other", "cpu", 2)
    other_world = write("cpu-gloo-4proc-other", "cpu", 4)
    gpu = write("gpu-nccl-1x2-h200", "gpu", 2)
    assert runs.supersede([new]) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (new, other_world, gpu))

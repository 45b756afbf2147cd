"""scripts/runs.py and the Makefile's set-up: the GPU refresh plan (dry run on this CPU machine for 0, 1
and 8 GPUs), the CPU rerun's summary and failure report (stale CPU files fail it, stale GPU files do not),
the real dirty-tree check in a throwaway git repository, the message for a CPU build of torch on a
machine with NVIDIA GPUs, superseding another CPU's results, the TORCH_SPEC-dependent set-up stamp and a
DeepSpeed op build failure that is shown and does not stop the set-up."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

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
        # the one-GPU plan, in the order of its value, all of it within the 600 s
        assert [p.run.program for p in ran] == ONE_GPU_PLAN
    assert "budget 600 s" in out.splitlines()[0]
    nccl = next(p for p in planned if p.run.program == "nccl_debug_capture")
    assert nccl.skip.startswith("needs 2 GPU(s), 1 visible")  # the program needs world size >= 2
    for p in ran:
        assert p.est_s and p.run.what, p  # a time and what it measures, for every entry that runs


ONE_GPU_PLAN = ["gemm_bench", "checkpoint_bench", "sp_activation_bench", "mem_bandwidth", "offload_bench",
                "step_anatomy", "zero_bench"]


def test_dry_run_for_an_8_gpu_node_runs_everything_without_a_budget():
    out = _dry(8)
    assert out.startswith("GPU refresh plan: 8 GPU(s) visible, budget none")
    planned = runs.plan(8)
    lines = _lines(out)
    assert [p.run.program for p in planned] == [r.program for r in runs.GPU_RUNS]
    for p, line in zip(planned, lines):
        assert p.run.program in line
        if p.skip:  # only a missing package may skip an entry on a node: never time, never GPU count
            assert p.skip.endswith("not installed"), p.skip
        else:
            want = 8 if p.run.gpus == "all" else int(p.run.gpus)
            assert line.lstrip().startswith("RUN") and f"{want} GPU(s)" in line
            assert f"--nproc_per_node={want}" in p.cmd or p.run.launcher == "python"
            assert " ".join(runs._rel(c) for c in p.cmd) in out
    if importlib.util.find_spec("deepspeed"):
        assert not any(p.skip for p in planned)
    total = sum(p.est_s for p in planned if not p.skip)
    assert total > runs.GPU_BUDGET_S and f"estimated {total} s" in out
    # the one-GPU entries come first, then the multi-GPU ones
    first_multi = next(i for i, r in enumerate(runs.GPU_RUNS) if r.min_gpus >= 2)
    assert all(r.min_gpus == 1 for r in runs.GPU_RUNS[:first_multi])
    assert all(r.min_gpus >= 2 for r in runs.GPU_RUNS[first_multi:])
    # --budget-s still caps a node's plan
    capped = _dry(8, "--budget-s", "600")
    assert "budget 600 s" in capped.splitlines()[0] and "would exceed the 600 s budget" in capped


def test_plan_respects_the_budget_and_missing_packages(monkeypatch):
    assert runs.budget_for(0) == runs.budget_for(1) == 600 and runs.budget_for(2) == runs.NO_BUDGET
    assert runs.budget_for(8, 100) == 100
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


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"})


def test_a_dirty_tree_is_refused_by_the_real_check(tmp_path, monkeypatch):
    """The real dirty_inputs() and both refusals (CPU and GPU path) in a throwaway git repository: a
    copy of runs.py, the gpu_runs programs and snippets/, committed, then a snippets/ file edited."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "runs.py", repo / "scripts" / "runs.py")
    shutil.copytree(ROOT / "gpu_runs", repo / "gpu_runs", ignore=shutil.ignore_patterns("results", "__pycache__"))
    (repo / "gpu_runs" / "results" / "zero_bench").mkdir(parents=True)
    shutil.copy2(ROOT / "gpu_runs" / "results" / "zero_bench" / "cpu-gloo-1proc-amd-epyc.json",
                 repo / "gpu_runs" / "results" / "zero_bench" / "cpu-gloo-1proc-amd-epyc.json")
    (repo / "snippets" / "common").mkdir(parents=True)
    for rel in ("snippets/__init__.py", "snippets/results.py", "snippets/common/__init__.py"):
        if (ROOT / rel).exists():
            shutil.copy2(ROOT / rel, repo / rel)
    formula = repo / "snippets" / "common" / "formula.py"
    formula.write_text("K = 16\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "throwaway")
    monkeypatch.setattr(runs, "ROOT", repo)
    assert runs.dirty_inputs() == []
    # a results file written by a run is not an input
    (repo / "gpu_runs" / "results" / "zero_bench" / "cpu-gloo-1proc-amd-epyc.json").write_text("{}\n")
    assert runs.dirty_inputs() == []
    formula.write_text("K = 12  # edited\n")
    assert runs.dirty_inputs() == ["snippets/common/formula.py"]
    (repo / "snippets" / "common" / "new_module.py").write_text("X = 1\n")  # untracked counts too
    assert sorted(runs.dirty_inputs()) == ["snippets/common/formula.py", "snippets/common/new_module.py"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo), "CUDA_VISIBLE_DEVICES": "", "HOME": str(tmp_path)}
    for argv in (["zero_bench"], ["--gpu", "--gpus", "1"]):
        proc = subprocess.run([sys.executable, "scripts/runs.py", *argv], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "differ from HEAD" in proc.stderr and "snippets/common/formula.py" in proc.stderr, proc.stderr
        assert not re.search(r"^\+ ", proc.stdout, re.M)  # nothing was launched (_launch prints "+ cmd")


def _results_copy(tmp_path, src, stale: bool):
    """A copy of a results file in tmp_path/<program>/<id>.json, one input hash broken if `stale`."""
    d = json.loads(src.read_text())
    if stale:
        d["inputs"]["gpu_runs/harness.py"] = "0" * 64
    out = tmp_path / d["program"] / f"{d['hardware']['id']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(d))
    return out


def test_make_runs_fails_on_stale_cpu_results_but_not_on_stale_gpu_results(tmp_path, monkeypatch, capsys):
    from snippets import results

    gpu_src = ROOT / "tests" / "gpu_fixtures" / "results" / "zero_bench" / "gpu-nccl-1x1-nvidia-h200.json"
    cpu_src = ROOT / "gpu_runs" / "results" / "zero_bench" / "cpu-gloo-1proc-amd-epyc.json"
    gpu = _results_copy(tmp_path / "r", gpu_src, stale=True)
    cpu = _results_copy(tmp_path / "r", cpu_src, stale=True)
    assert results.read(gpu).stale and not results.read(gpu).strict_stale and results.read(cpu).strict_stale
    monkeypatch.setattr(runs, "RUNS", [("zero_bench", 1, [], "torchrun")])
    monkeypatch.setattr(runs, "_launch", lambda cmd, timeout, env=None: (0, 0.0))  # the run itself succeeds

    monkeypatch.setattr(results, "all_paths", lambda: [gpu])
    assert runs.run_cpu([], timeout=1, allow_dirty=True) == 0
    out = capsys.readouterr().out
    assert "stale GPU result" in out and gpu.name in out and "gpu_runs/harness.py changed" in out
    assert "0 results files stale (CPU) or invalid, 1 GPU results files stale (not a failure)" in out

    monkeypatch.setattr(results, "all_paths", lambda: [gpu, cpu])
    assert runs.run_cpu([], timeout=1, allow_dirty=True) == 1
    out = capsys.readouterr().out
    assert re.search(rf"stale   \S*{cpu.name}: gpu_runs/harness.py changed", out), out
    assert "1 results files stale (CPU) or invalid, 1 GPU results files stale" in out

    bad = tmp_path / "r" / "zero_bench" / "gpu-nccl-1x9-broken.json"  # invalid: fails whatever its kind
    bad.write_text("{not json")
    monkeypatch.setattr(results, "all_paths", lambda: [gpu, bad])
    assert runs.run_cpu([], timeout=1, allow_dirty=True) == 1
    assert "INVALID" in capsys.readouterr().out


FAKE_SMI = "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_cpu_torch_on_a_machine_with_an_nvidia_gpu_names_the_fix(tmp_path):
    """nvidia-smi lists a GPU, torch is this machine's CPU build: the error says so and names
    TORCH_SPEC with a CUDA wheel index, not "no GPU visible"."""
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    for extra, rc in (([], 2), (["--dry-run"], 0)):
        proc = subprocess.run([sys.executable, "scripts/runs.py", "--gpu", *extra], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == rc, proc.stderr[-2000:]
        assert "CPU build of torch" in proc.stderr and "NVIDIA H200" in proc.stderr
        assert 'make setup TORCH_SPEC="torch==' in proc.stderr and "--index-url" in proc.stderr
        assert "no GPU visible" not in proc.stdout + proc.stderr
        assert all("torch sees no GPU" in l for l in _lines(proc.stdout))


def test_a_cuda_torch_that_sees_no_gpu_says_why(monkeypatch):
    import torch

    monkeypatch.setattr(runs, "nvidia_gpus", lambda: ["GPU 0: NVIDIA H200 (UUID: GPU-0)"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    msg = runs.gpu_problem()
    assert "built for CUDA 12.8" in msg and "CUDA_VISIBLE_DEVICES=''" in msg
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "driver may be older" in runs.gpu_problem()
    monkeypatch.setattr(runs, "nvidia_gpus", lambda: [])
    assert runs.gpu_problem() is None  # no NVIDIA GPU: nothing to diagnose ("no GPU visible")
    monkeypatch.setattr(runs, "nvidia_gpus", lambda: ["GPU 0: NVIDIA H200"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runs.gpu_problem() is None


def _make_n(repo, *args) -> str:
    proc = subprocess.run(["make", "-n", "setup", *args], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_setup_stamp_depends_on_torch_spec(tmp_path):
    """`make -n setup` in a scratch copy of the Makefile: nothing to do when set up with this TORCH_SPEC;
    another TORCH_SPEC uninstalls torch, installs the new spec and redoes the set-up after it."""
    repo = tmp_path
    shutil.copy2(ROOT / "Makefile", repo / "Makefile")
    for f in ("requirements.lock", "pyproject.toml", "package.json", "package-lock.json"):
        (repo / f).write_text("")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").write_text("#!/bin/sh\n")
    (repo / ".venv" / "bin" / "python").chmod(0o755)
    first = _make_n(repo)
    m = re.search(r"> (\.venv/\.torch-[0-9a-f]+)$", first, re.M)
    assert m and "pip install -q torch==2.13.0\n" in first, first
    stamp = repo / m.group(1)
    stamp.write_text("torch==2.13.0\n")
    (repo / ".venv" / ".installed").write_text("")
    old = stamp.stat().st_mtime - 10
    os.utime(stamp, (old, old))
    assert "pip" not in _make_n(repo)  # set up with this spec: nothing to do
    cuda = "torch==2.13.0 --index-url https://example.invalid/whl/cu128"
    again = _make_n(repo, f"TORCH_SPEC={cuda}")
    assert "pip uninstall -y -q torch deepspeed" in again  # pip would keep 2.13.0+cpu for torch==2.13.0
    assert f"pip install -q {cuda}\n" in again
    assert again.index(f"pip install -q {cuda}") < again.index("pip install -q -r requirements.lock")
    assert "touch .venv/.installed" in again
    assert re.search(r"> \.venv/\.torch-[0-9a-f]+$", again, re.M).group(0) != m.group(0)


DS_FAIL = textwrap.dedent("""
    import sys, types
    import deepspeed.accelerator as a

    class Good:
        def load(self):
            return object()

    class Bad:
        def load(self):
            raise RuntimeError("c++: error: planted compiler failure")

    class Acc:
        def device_name(self):
            return "cpu"

        def create_op_builder(self, name):
            return Bad() if name == "PinMemoryBuilder" else Good()

    a.get_accelerator = lambda: Acc()
""")


@pytest.mark.skipif(shutil.which("make") is None or importlib.util.find_spec("deepspeed") is None,
                    reason="needs make and deepspeed")
def test_a_failing_deepspeed_op_build_is_shown_and_does_not_stop_the_setup(tmp_path):
    """The Makefile's op-build step (DS_OPS_PY) with a builder that fails: the error and which programs
    need the op are printed, and the step exits 0 so that the set-up goes on."""
    (tmp_path / "show.mk").write_text("show-ds-ops:\n\t@printf '%s' \"$$DS_OPS_PY\"\n")
    code = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-f", str(tmp_path / "show.mk"), "show-ds-ops"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "builder.load()" in code
    # and the STAMP recipe runs it as it is, without a pipe that would hide its output or exit status
    recipe = (ROOT / "Makefile").read_text()
    assert '$(BIN)/python -c "$$DS_OPS_PY"\n' in recipe and "| tail" not in recipe
    proc = subprocess.run([sys.executable, "-c", DS_FAIL + code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "DeepSpeed op ShareMemCommBuilder: built" in proc.stdout
    assert "planted compiler failure" in proc.stderr  # the build's own error, in full
    assert "WARNING: DeepSpeed op PinMemoryBuilder failed to build" in proc.stderr
    assert "DS_PIN_MEMORY_BACKEND=native" in proc.stderr  # who needs it


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


def test_readme_gpu_section_matches_the_plan():
    """README's one-GPU table (order, estimates, total) and the 8-GPU total are the plan's."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## GPU 에서 실행하기"):text.index("## 새 결과 파일이 페이지에 들어가는 과정")]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (\d+) s \|", section, re.M)
    one = [p for p in runs.plan(1) if not p.skip]
    if importlib.util.find_spec("deepspeed"):
        assert [(int(i), prog, int(est)) for i, prog, est in rows] == \
            [(i + 1, p.run.program, p.est_s) for i, p in enumerate(one)]
        total = re.search(r"^\| \| 합계 \| (\d+) s \|", section, re.M)
        assert total and int(total.group(1)) == sum(p.est_s for p in one) <= runs.GPU_BUDGET_S
        eight = sum(p.est_s for p in runs.plan(8) if not p.skip)
        assert f"추정 합계는 {eight} s" in section and f"{len(runs.GPU_RUNS)} 항목" in section
    for cmd in ("make gpu-runs", "--nnodes=2", "--rdzv-endpoint=", "srun ", "TORCH_SPEC="):
        assert cmd in section, cmd

"""Regenerate committed results with torchrun: CPU results (`make runs`) or GPU results (`make gpu-runs`).

CPU (`RUNS`): each entry is one launch: program, processes, extra arguments. A results file is named
after the hardware it ran on; a CPU results file of the same program and world size from another
CPU is superseded (removed) once this machine's run succeeds, so a page never sees two. GPU files
are left as they are. It refuses a tree whose gpu_runs/ or snippets/ differ from HEAD (the results
would record `dirty: true`): commit first, or pass --allow-dirty.

    python scripts/runs.py                      # every CPU entry, then a summary; exit 1 if any failed
    python scripts/runs.py collectives_bench    # only this program's entries
    python scripts/runs.py --list

The summary lists every results file that is stale or invalid. A stale CPU file or an invalid file
fails the command (exit 1): this machine can refresh it. A stale GPU file does not: it is a fact about
the commit it was measured at, shown on its page under a badge (snippets/results.py, `strict_stale`).

GPU (`GPU_RUNS`, `make gpu-runs`): every entry whose GPU needs fit the visible GPUs, in the order of
GPU_RUNS (by value), each with its own timeout, then a summary of what ran, failed and was skipped and
why. On one GPU the entries run within a total budget of 600 s (one H200); with more than one GPU there
is no budget unless `--budget-s` sets one (a reader with a node runs everything). `--dry-run` prints the
plan on any machine (no GPU needed, nothing launched); `--gpus N` plans as if N GPUs were visible. A CPU
build of torch on a machine whose NVIDIA driver sees GPUs is named as such, with the fix (TORCH_SPEC).

    python scripts/runs.py --gpu --dry-run [--gpus 8]
    python scripts/runs.py --gpu [--budget-s 600] [program ...]
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (program, nproc, extra args, launcher). Timing runs use at most as many processes as cores
# (GUIDE: more processes than cores measures the scheduler); counting runs may use more.
RUNS: list[tuple[str, int, list[str], str]] = [
    ("collectives_bench", 2, [], "torchrun"),
    ("collectives_bench", 4, [], "torchrun"),
    ("collectives_semantics", 4, [], "torchrun"),  # counting (no timing): 4 processes
    ("fsdp_bench", 2, [], "torchrun"),                 # Ch5-05: counts + CPU step times
    ("fsdp_bench", 4, ["--no-timing"], "torchrun"),    # Ch5-05: counts only (4 processes > 2 cores)
    ("offload_bench", 2, [], "torchrun"),              # Ch5-06: state placement + CPU step times
    ("zero_bench", 1, [], "torchrun"),                 # Ch5-02..04: ZeRO 0-3 bytes, N = 1
    ("zero_bench", 2, [], "torchrun"),                 # Ch5-02..04: bytes, collectives, CPU step times
    ("zero_bench", 4, ["--no-timing"], "torchrun"),    # Ch5-02..04: bytes and collectives only
    ("cpu_allreduce_gap", 2, [], "torchrun"),          # Ch1-05: gloo vs DeepSpeed shm vs memcpy, same box
    ("ddp_bench", 2, [], "torchrun"),                  # Ch2-01..03: equivalence, buckets, CPU step times
    ("ddp_bench", 4, ["--no-timing"], "torchrun"),     # Ch2-01..03: equivalence and bucket layouts only
    ("pipeline_bench", 2, [], "torchrun"),             # Ch4: torch.distributed.pipelining timelines (sleep + real)
    ("deepspeed_pipe", 2, [], "torchrun"),             # Ch4-03: DeepSpeed PipelineModule, TrainSchedule stream + loss
    ("checkpoint_bench", 1, [], "torchrun"),           # Ch6-02/03: kept/peak bytes, recompute, FLOPs, CPU times
    ("sp_activation_bench", 2, [], "torchrun"),        # Ch6-04: TP vs TP+SP saved bytes, collectives, CPU times
    ("sp_activation_bench", 4, ["--no-timing"], "torchrun"),  # Ch6-04: bytes and collectives only
    ("tp_bench", 2, [], "torchrun"),                   # Ch3: DTensor TP counts at t=2 + naive-split timeline
    ("tp_bench", 4, ["--no-timing"], "torchrun"),      # Ch3: DTensor TP counts at t=4 (counts only)
    ("ddp_accumulation", 2, [], "torchrun"),           # Ch2-04: no_sync counts, gradients, CPU step times
    ("ddp_accumulation", 4, ["--no-timing"], "torchrun"),  # Ch2-04: counts and gradients only
    ("async_sgd", 2, [], "torchrun"),                  # Ch2-06: Hogwild!, PostLocalSGDOptimizer, outer steps
    ("async_sgd", 4, [], "torchrun"),                  # Ch2-06: the same with 4 ranks (counts, distances)
    ("mesh_3d", 4, [], "torchrun"),                    # Ch7-01: 2x2 dp x tp mesh, FSDP2 over TP: counts, loss
    ("mesh_pp", 4, [], "torchrun"),                    # Ch7-01: (pp, tp) = (2, 2), pipelining + DTensor TP: counts, bytes, loss
    ("mesh_pp", 8, [], "torchrun"),                    # Ch7-01: (dp, pp, tp) = (2, 2, 2) + FSDP2: counts only, no timing
    ("moe_ep", 2, [], "torchrun"),                     # Ch7-02: expert parallelism on 2 ranks: agreement, bytes, CF sweep
    ("moe_ep", 4, [], "torchrun"),                     # Ch7-02: the same on 4 ranks (counts only, no timing)
    ("dcp_bench", 2, [], "torchrun"),                  # Ch7-03: DCP FSDP2 -> 1 process / TP, async_save, exact resume
    ("elastic_resume", 2, [], "python"),               # Ch7-04: torchrun --max-restarts=1, a rank killed, DCP resume
    ("gemm_bench", 1, [], "torchrun"),                 # Ch3-05, Ch7-01: float32 GEMM GFLOP/s vs h and h/t (about 30 s)
    ("mem_bandwidth", 1, [], "torchrun"),              # Ch1, Ch5-06: DRAM memcpy GB/s (H2D/D2H: not applicable) (about 6 s)
    ("step_anatomy", 1, [], "torchrun"),               # Ch2-03, Ch4, Ch5: gradient-ready timeline, F/B/W, Adam (about 25 s)
]


# The GPU refresh plan (`make gpu-runs` / `python scripts/runs.py --gpu`): one entry per launch of a
# program's `--preset gpu`. `gpus`: how many GPUs the launch uses ("all" = every visible GPU);
# `min_gpus`: below this many visible GPUs the entry is skipped, with the reason printed.
# Every chapter appends its programs here; `--gpu --dry-run` prints the plan on any machine.
@dataclass(frozen=True)
class GpuRun:
    program: str
    min_gpus: int
    gpus: int | str = "all"
    args: tuple[str, ...] = ("--preset", "gpu")
    launcher: str = "torchrun"
    what: str = ""
    est_s: int | None = None        # expected wall time on one H200 node; None: EST_S[program] or 120 s
    requires: tuple[str, ...] = ()  # Python packages it needs beyond torch (deepspeed is detected)


GPU_RUNS: list[GpuRun] = [
    # --- one GPU, by value (all within GPU_BUDGET_S on one H200; est_s: estimates from the FLOPs and bytes
    #     each preset moves plus ~15 s of process start and CUDA/NCCL set-up, not yet measured on an H200)
    GpuRun("gemm_bench", 1, gpus=1, est_s=60,
           what="Ch3-05, Ch7-01: bf16 GEMM TFLOP/s vs h and the TP shard shapes h/t (measured efficiency, not an assumed MFU)"),
    GpuRun("checkpoint_bench", 1, gpus=1, est_s=90,
           what="Ch6-02/03: activation bytes on CUDA (1-byte masks), recompute time overhead, FLOPs for MFU"),
    GpuRun("sp_activation_bench", 1, gpus=1, est_s=60,
           what="Ch6-01/04: the GPT layer's activation bytes on CUDA (bool masks, m = 1), t = 1"),
    GpuRun("mem_bandwidth", 1, gpus=1, est_s=45,
           what="Ch1, Ch5-06: HBM device-to-device and pinned/pageable host<->device GB/s (the physical limits)"),
    GpuRun("offload_bench", 1, gpus=1, est_s=150,
           what="Ch5-06: ZeRO-Offload pinned vs pageable: PCIe bytes and step time"),
    GpuRun("step_anatomy", 1, gpus=1, est_s=45,
           what="Ch2-03, Ch4, Ch5: gradient-ready timeline (DDP's overlap window), per-stage F/B/W, Adam step"),
    GpuRun("zero_bench", 1, gpus=1, est_s=90, what="Ch5-02..04: ZeRO 0-3 single-rank memory (N = 1) on CUDA"),
    # --- two or more GPUs, by value (no budget by default with more than one GPU)
    GpuRun("collectives_bench", 2, what="Ch1: nccl-tests-style algbw/busbw sweep over all visible GPUs"),
    GpuRun("nccl_debug_capture", 2, what="Ch1-04: NCCL_DEBUG=INFO topology/graph/tuning capture (world size >= 2)"),
    GpuRun("ddp_bench", 2, what="Ch2-01..03: DDP equivalence, buckets, overlap timeline, bucket_cap_mb sweep on NCCL"),
    GpuRun("tp_bench", 2, gpus=2, what="Ch3: DTensor TP collectives per pass, agreement, naive split on NCCL (t=2)"),
    GpuRun("collectives_bench", 2, gpus=2, est_s=60,
           what="Ch3-05: the alpha-beta fit at N = t = 2 on the same GPUs as tp_bench (the node-wide sweep is N = all)"),
    GpuRun("pipeline_bench", 2, gpus=2, what="Ch4: pipelining schedules' per-rank timelines on 2 GPUs (sleep + real)"),
    GpuRun("zero_bench", 2, what="Ch5-02..04: ZeRO 0-3 bytes and collectives on CUDA"),
    GpuRun("fsdp_bench", 2, what="Ch5-05: FSDP2 per-rank bytes and step time on CUDA"),
    GpuRun("sp_activation_bench", 2, what="Ch6-04: TP vs TP+SP per-rank bytes and NCCL collectives"),
    GpuRun("collectives_semantics", 2, what="Ch1-01: per-rank inputs/outputs of the 8 collectives on NCCL"),
    GpuRun("ddp_accumulation", 2, what="Ch2-04: no_sync all-reduce counts, gradient equality, step time on CUDA"),
    GpuRun("moe_ep", 2, est_s=60, what="Ch7-02: expert-parallel MoE on NCCL: all-to-all splits, bytes, agreement, CF sweep"),
    GpuRun("mesh_3d", 4, est_s=60, what="Ch7-01: (dp, tp) DeviceMesh, FSDP2 over DTensor TP on NCCL: counts, loss vs 1 GPU"),
    GpuRun("mesh_pp", 4, gpus=4, est_s=60,
           what="Ch7-01: (pp, tp) = (2, 2), Schedule1F1B stages with DTensor TP on NCCL: counts, bytes, loss vs 1 GPU"),
    GpuRun("mesh_pp", 8, gpus=8, est_s=60,
           what="Ch7-01: (dp, pp, tp) = (2, 2, 2), pipelining + DTensor TP + FSDP2 on NCCL: counts, bytes, loss vs 1 GPU"),
    GpuRun("deepspeed_pipe", 2, gpus=2, what="Ch4-03: DeepSpeed PipelineModule instruction stream and loss on 2 GPUs"),
    GpuRun("dcp_bench", 2, gpus=2, est_s=60, what="Ch7-03: DCP save from FSDP2, reload 1 process / TP, async_save timing on GPU"),
    GpuRun("elastic_resume", 2, gpus=2, launcher="python", est_s=90,
           what="Ch7-04: torchrun --max-restarts=1 on 2 GPUs, a rank killed, resumed from DCP, bitwise trajectory"),
    GpuRun("async_sgd", 2, what="Ch2-06: local SGD / outer steps on NCCL (Hogwild! part stays on CPU)"),
]

def command(program: str, nproc: int, extra: list[str], launcher: str = "torchrun") -> list[str]:
    script = f"gpu_runs/{program}.py"
    if launcher == "python":  # a program that starts torchrun itself (e.g. with a restart policy)
        return [sys.executable, script, *extra]
    if launcher == "deepspeed":
        return [str(Path(sys.executable).with_name("deepspeed")), f"--num_gpus={nproc}", script, *extra]
    torchrun = Path(sys.executable).with_name("torchrun")
    launcher_cmd = [str(torchrun)] if torchrun.exists() else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher_cmd, "--standalone", f"--nproc_per_node={nproc}", script, *extra]


# ------------------------------------------------------------------ shared

RESULTS = ROOT / "gpu_runs" / "results"


def _child_env() -> dict:
    return {**os.environ, "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def dirty_inputs() -> list[str]:
    """Files under gpu_runs/ and snippets/ (results files excepted) that differ from HEAD."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--", "gpu_runs", "snippets",
                              ":(exclude)gpu_runs/results"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        return [f"(git status failed: {exc})"]
    return [line[3:] for line in out.splitlines() if line.strip()]


def _snapshot(program: str) -> dict[Path, float]:
    return {p: p.stat().st_mtime_ns for p in (RESULTS / program).glob("*.json")}


def _launch(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int | str, float]:
    print("+", " ".join(_rel(c) for c in cmd), flush=True)
    t0 = time.time()
    # own process group: a timeout stops torchrun and every worker it started
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or _child_env(), start_new_session=True)
    try:
        rc: int | str = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        rc = f"timeout after {timeout:.0f} s"
    took = time.time() - t0
    print(f"  {'exit ' + str(rc) if isinstance(rc, int) else rc} after {took:.1f} s", flush=True)
    return rc, took


def _rel(word: str) -> str:
    return word.replace(str(ROOT) + "/", "")


def _written(program: str, before: dict[Path, float]) -> list[Path]:
    return sorted(p for p, t in _snapshot(program).items() if before.get(p) != t)


def supersede(written: list[Path]) -> list[Path]:
    """Remove CPU results of the same program and world size from another CPU (one per page table)."""
    removed = []
    for w in written:
        new = json.loads(w.read_text(encoding="utf-8"))
        if new["hardware"]["kind"] != "cpu":
            continue
        for other in sorted(w.parent.glob("*.json")):
            if other == w or other in written:
                continue
            try:
                old = json.loads(other.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if old.get("hardware", {}).get("kind") == "cpu" and \
                    old["hardware"].get("world_size") == new["hardware"]["world_size"]:
                other.unlink()
                removed.append(other)
    return removed


def stale_report(paths: list[Path] | None = None) -> tuple[list[str], int]:
    """Every results file that is invalid or stale, one line each, and how many of them fail `make runs`:
    invalid files and stale CPU files (this machine can rerun them); a stale GPU file is listed but
    does not fail (`Result.strict_stale`, the policy in snippets/results.py's docstring)."""
    sys.path.insert(0, str(ROOT))
    from snippets import results

    out, failing = [], 0
    for p in (results.all_paths() if paths is None else paths):
        rel = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
        try:
            r = results.read(p)
        except results.ResultsError as exc:
            out.append(f"INVALID {exc}")
            failing += 1
            continue
        reasons = r.stale_reasons()
        if not reasons:
            continue
        if r.strict_stale:
            out.append(f"stale   {rel}: {', '.join(reasons)}")
            failing += 1
        else:
            out.append(f"stale GPU result (kept, shown under a badge; refresh on {r.hardware['gpu_name']}: "
                       f"make gpu-runs) {rel}: {', '.join(reasons)}")
    return out, failing


# ------------------------------------------------------------------ CPU

def run_cpu(wanted: list[str], timeout: float, allow_dirty: bool) -> int:
    dirty = dirty_inputs()
    if dirty and not allow_dirty:
        print("error: gpu_runs/ or snippets/ differ from HEAD; results would say dirty: true. Commit first, "
              "or pass --allow-dirty:\n  " + "\n  ".join(dirty), file=sys.stderr)
        return 2
    rows = []
    for program, nproc, extra, launcher in RUNS:
        if wanted and program not in wanted:
            continue
        before = _snapshot(program)
        rc, took = _launch(command(program, nproc, extra, launcher), timeout)
        written = _written(program, before)
        removed = supersede(written) if rc == 0 else []
        for p in removed:
            print(f"  removed superseded {p.relative_to(ROOT)}", flush=True)
        rows.append((f"{program} ×{nproc} {' '.join(extra)}".strip(), rc, took, written, removed))
    if not rows:
        print(f"error: no RUNS entry for {wanted}", file=sys.stderr)
        return 2
    print("\nsummary (CPU runs):")
    for name, rc, took, written, removed in rows:
        state = "ok" if rc == 0 else f"FAILED ({'exit ' + str(rc) if isinstance(rc, int) else rc})"
        files = ", ".join(p.relative_to(RESULTS).as_posix() for p in written) or "no results file written"
        print(f"  {state:<28} {took:7.1f} s  {name}: {files}" + (f"; removed {len(removed)} superseded" if removed else ""))
    failed = [r for r in rows if r[1] != 0]
    stale, failing = stale_report()
    if stale:
        print("\nresults still stale or invalid (CPU: rerun their programs, or remove files no entry produces; "
              "GPU: kept with a badge until someone reruns them on that GPU):")
        print("  " + "\n  ".join(stale))
    print(f"\n{len(rows) - len(failed)} ok, {len(failed)} failed; {failing} results files stale (CPU) or invalid"
          + (f", {len(stale) - failing} GPU results files stale (not a failure)" if len(stale) > failing else ""))
    return 1 if failed or failing else 0


# ------------------------------------------------------------------ GPU

# Expected wall time of each program's GPU launch on one H200 node, process start, NCCL set-up and
# (DeepSpeed) op builds included. Estimates for planning, not measurements: a run that overruns its
# timeout (EST x TIMEOUT_FACTOR) is stopped and reported.
EST_S = {"collectives_bench": 90, "collectives_semantics": 30, "nccl_debug_capture": 45,
         "zero_bench": 120, "fsdp_bench": 60, "offload_bench": 150}
DEFAULT_EST_S = 120
TIMEOUT_FACTOR = 2.0
GPU_BUDGET_S = 600  # the limit: the one-GPU plan in <= 10 minutes on one H200
NO_BUDGET = float("inf")


def budget_for(gpus: int, budget_s: float | None = None) -> float:
    """The total budget: what --budget-s says; else 600 s on one GPU (or none visible), none with more
    (a reader with a node runs every entry)."""
    if budget_s is not None:
        return budget_s
    return GPU_BUDGET_S if gpus <= 1 else NO_BUDGET


def _budget_text(budget_s: float) -> str:
    return "none" if budget_s == NO_BUDGET else f"{budget_s:.0f} s"


@dataclass
class Planned:
    run: GpuRun
    nproc: int
    cmd: list[str]
    est_s: int
    skip: str = ""  # why it does not run ("" = it runs)
    note: str = ""


def _script(program: str) -> Path:
    return ROOT / "gpu_runs" / f"{program}.py"


def program_facts(program: str) -> dict:
    """What a program's source says about itself: its presets, minimum world size, GPU-only, imports."""
    src = _script(program).read_text(encoding="utf-8")
    presets: list[str] = []
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PRESETS" for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            presets = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    m = re.search(r"harness\.(?:init|main)\([^)]*min_world_size=(\d+)", src, re.S)
    return {"presets": presets, "min_world_size": int(m.group(1)) if m else 1,
            "imports": sorted({mod for mod in ("deepspeed",) if re.search(rf"^\s*(import|from) {mod}\b", src, re.M)})}


def visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable torch: no GPUs
        return 0


def nvidia_gpus() -> list[str]:
    """The GPUs the NVIDIA driver sees (`nvidia-smi -L` lines), whatever torch can use."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.startswith("GPU ")]


CUDA_TORCH_FIX = ('make setup TORCH_SPEC="torch=={version} --index-url https://download.pytorch.org/whl/cu128"'
                  "  (cu128 = CUDA 12.8: pick a CUDA version no newer than the one nvidia-smi prints)")


def gpu_problem() -> str | None:
    """Why torch sees no GPU on a machine whose NVIDIA driver sees some; None when there is no such conflict."""
    gpus = nvidia_gpus()
    if not gpus:
        return None
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return f"torch cannot be imported ({exc}); the driver sees {len(gpus)} NVIDIA GPU(s). Run make setup"
    if torch.cuda.is_available():
        return None
    version = torch.__version__.split("+")[0]
    if torch.version.cuda is None:
        return (f"CPU build of torch ({torch.__version__}) on a machine with {len(gpus)} NVIDIA GPU(s) "
                f"({gpus[0]}): torch cannot use them. Install a CUDA build of torch, then rerun:\n  "
                + CUDA_TORCH_FIX.format(version=version))
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"torch {torch.__version__} is built for CUDA {torch.version.cuda} but cannot use the {len(gpus)} "
            f"NVIDIA GPU(s) the driver sees ({gpus[0]})"
            + (f"; CUDA_VISIBLE_DEVICES={hidden!r} hides them" if hidden is not None else
               "; the driver may be older than that CUDA (nvidia-smi prints the newest CUDA it supports): "
               "update the driver, or install a torch built for an older CUDA:\n  "
               + CUDA_TORCH_FIX.format(version=version)))


def plan(gpus: int, wanted: list[str] = (), budget_s: float | None = None,
         no_gpu_reason: str = "no GPU visible") -> list[Planned]:
    """The entries of GPU_RUNS for `gpus` GPUs, in order, each with its command or why it is skipped."""
    budget_s = budget_for(gpus, budget_s)
    out, total = [], 0.0
    for r in GPU_RUNS:
        if wanted and r.program not in wanted:
            continue
        est = r.est_s or EST_S.get(r.program, DEFAULT_EST_S)
        nproc = gpus if r.gpus == "all" else int(r.gpus)
        p = Planned(r, nproc, [], est)
        if not _script(r.program).exists():
            p.skip = f"gpu_runs/{r.program}.py does not exist"
            out.append(p)
            continue
        facts = program_facts(r.program)
        args = list(r.args)
        if "--preset" in args and args[args.index("--preset") + 1] not in facts["presets"]:
            p.note = f"no '{args[args.index('--preset') + 1]}' preset: runs --preset full"
            args[args.index("--preset") + 1] = "full"  # a program without a gpu preset runs its full one
        p.cmd = command(r.program, nproc, args, r.launcher)
        need = max(r.min_gpus, facts["min_world_size"], nproc if r.gpus != "all" else 1)
        missing = [m for m in (*r.requires, *facts["imports"]) if importlib.util.find_spec(m) is None]
        if gpus == 0:
            p.skip = no_gpu_reason
        elif gpus < need:
            why = (f"the program needs world size >= {facts['min_world_size']}"
                   if facts["min_world_size"] == need and facts["min_world_size"] > r.min_gpus else "this entry")
            p.skip = f"needs {need} GPU(s), {gpus} visible ({why})"
        elif missing:
            p.skip = f"{', '.join(missing)} not installed"
        elif total + est > budget_s:
            p.skip = f"would exceed the {budget_s:.0f} s budget ({total:.0f} s planned before it, {est} s estimated)"
        else:
            total += est
        out.append(p)
    return out


def print_plan(plan_: list[Planned], gpus: int, budget_s: float) -> None:
    runs = [p for p in plan_ if not p.skip]
    print(f"GPU refresh plan: {gpus} GPU(s) visible, budget {_budget_text(budget_s)}, "
          f"{len(runs)} of {len(plan_)} entries run, estimated {sum(p.est_s for p in runs)} s")
    for p in plan_:
        head = f"{p.run.program} (gpus={p.run.gpus}, min {p.run.min_gpus})"
        if p.skip:
            print(f"  SKIP {head:<34} {p.skip}  -- {p.run.what}")
        else:
            print(f"  RUN  {head:<34} {p.nproc} GPU(s), est {p.est_s} s, timeout "
                  f"{p.est_s * TIMEOUT_FACTOR:.0f} s  -- {p.run.what}\n       {' '.join(_rel(c) for c in p.cmd)}"
                  + (f"  ({p.note})" if p.note else ""))


def run_gpu(wanted: list[str], gpus: int | None, dry_run: bool, budget_s: float | None, allow_dirty: bool) -> int:
    n = visible_gpus() if gpus is None else gpus
    problem = gpu_problem() if gpus is None and n == 0 else None
    budget_s = budget_for(n, budget_s)
    plan_ = plan(n, wanted, budget_s,
                 no_gpu_reason="torch sees no GPU (see the error below)" if problem else "no GPU visible")
    if wanted and not plan_:
        print(f"error: no GPU_RUNS entry for {wanted}", file=sys.stderr)
        return 2
    print_plan(plan_, n, budget_s)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 0 if dry_run else 2
    if dry_run:
        return 0
    if n == 0:
        print("error: no GPU visible; nothing to run (use --dry-run to see the plan)", file=sys.stderr)
        return 2
    dirty = dirty_inputs()
    if dirty and not allow_dirty:
        print("error: gpu_runs/ or snippets/ differ from HEAD (commit first, or --allow-dirty):\n  "
              + "\n  ".join(dirty), file=sys.stderr)
        return 2
    t_start = time.time()
    done = []
    for p in plan_:
        if p.skip:
            continue
        left = budget_s - (time.time() - t_start)
        if left < 10:
            p.skip = f"budget spent ({_budget_text(budget_s)})"
            continue
        before = _snapshot(p.run.program)
        rc, took = _launch(p.cmd, min(p.est_s * TIMEOUT_FACTOR, left))
        done.append((p, rc, took, _written(p.run.program, before)))
    print(f"\nsummary (GPU runs, {n} GPU(s), {time.time() - t_start:.0f} s, budget {_budget_text(budget_s)}):")
    for p, rc, took, written in done:
        state = "ok" if rc == 0 else f"FAILED ({'exit ' + str(rc) if isinstance(rc, int) else rc})"
        files = ", ".join(w.relative_to(RESULTS).as_posix() for w in written) or "no results file written"
        print(f"  {state:<28} {took:6.1f} s  {p.run.program} ×{p.nproc}: {files}")
    for p in plan_:
        if p.skip:
            print(f"  {'skipped':<28} {'':>8}  {p.run.program}: {p.skip}")
    failed = [d for d in done if d[1] != 0]
    print(f"{len(done) - len(failed)} ran, {len(failed)} failed, {sum(1 for p in plan_ if p.skip)} skipped")
    return 1 if failed else 0


# ------------------------------------------------------------------ main

def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="*", help="only these programs' entries")
    ap.add_argument("--list", action="store_true", help="print the CPU launch commands")
    ap.add_argument("--gpu", action="store_true", help="the GPU refresh (GPU_RUNS) instead of the CPU one")
    ap.add_argument("--dry-run", action="store_true", help="with --gpu: print the plan, launch nothing")
    ap.add_argument("--gpus", type=int, default=None, help="with --gpu: plan for this many GPUs (default: visible)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help=f"with --gpu: total wall-time budget (default {GPU_BUDGET_S} s on one GPU, none with more)")
    ap.add_argument("--timeout-s", type=float, default=1800, help="per CPU run")
    ap.add_argument("--allow-dirty", action="store_true", help="run although gpu_runs/ or snippets/ differ from HEAD")
    a = ap.parse_args(argv)
    if a.list:
        for r in RUNS:
            print(" ".join(_rel(c) for c in command(*r)))
        return 0
    if a.gpu:
        return run_gpu(a.programs, a.gpus, a.dry_run, a.budget_s, a.allow_dirty)
    return run_cpu(a.programs, a.timeout_s, a.allow_dirty)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

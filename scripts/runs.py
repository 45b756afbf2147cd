"""Regenerate every committed CPU result with torchrun on this machine (`make runs`).

Each entry is one launch: program, processes, extra arguments. A results file is named after
the hardware it ran on, so rerunning here replaces only this machine's files; GPU files are
left as they are. Usage:
    python scripts/runs.py                 # all entries
    python scripts/runs.py collectives_bench
    python scripts/runs.py --list
"""
from __future__ import annotations

import os
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
    ("ddp_accumulation", 2, [], "torchrun"),           # Ch2-04: no_sync counts, gradients, CPU step times
    ("ddp_accumulation", 4, ["--no-timing"], "torchrun"),  # Ch2-04: counts and gradients only
    ("async_sgd", 2, [], "torchrun"),                  # Ch2-06: Hogwild!, PostLocalSGDOptimizer, outer steps
    ("async_sgd", 4, [], "torchrun"),                  # Ch2-06: the same with 4 ranks (counts, distances)
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


GPU_RUNS: list[GpuRun] = [
    GpuRun("collectives_bench", 2, what="Ch1: nccl-tests-style algbw/busbw sweep over all visible GPUs"),
    GpuRun("collectives_semantics", 2, what="Ch1-01: per-rank inputs/outputs of the 8 collectives on NCCL"),
    GpuRun("nccl_debug_capture", 1, what="Ch1-04: NCCL_DEBUG=INFO topology/graph/tuning capture"),
    GpuRun("zero_bench", 2, what="Ch5-02..04: ZeRO 0-3 bytes and collectives on CUDA"),
    GpuRun("fsdp_bench", 2, what="Ch5-05: FSDP2 per-rank bytes and step time on CUDA"),
    GpuRun("offload_bench", 1, gpus=1, what="Ch5-06: ZeRO-Offload PCIe bytes and step time"),
    GpuRun("ddp_accumulation", 2, what="Ch2-04: no_sync all-reduce counts, gradient equality, step time on CUDA"),
    GpuRun("async_sgd", 2, what="Ch2-06: local SGD / outer steps on NCCL (Hogwild! part stays on CPU)"),
]

def command(program: str, nproc: int, extra: list[str], launcher: str = "torchrun") -> list[str]:
    script = f"gpu_runs/{program}.py"
    if launcher == "deepspeed":
        return [str(Path(sys.executable).with_name("deepspeed")), f"--num_gpus={nproc}", script, *extra]
    return [str(Path(sys.executable).with_name("torchrun")), "--standalone",
            f"--nproc_per_node={nproc}", script, *extra]


def main(argv: list[str]) -> int:
    if "--list" in argv:
        for r in RUNS:
            print(" ".join(command(*r)))
        return 0
    wanted = [a for a in argv if not a.startswith("-")]
    status = 0
    for program, nproc, extra, launcher in RUNS:
        if wanted and program not in wanted:
            continue
        cmd = command(program, nproc, extra, launcher)
        print("+", " ".join(cmd), flush=True)
        t0 = time.time()
        rc = subprocess.call(cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                                   "PYTHONPATH": str(ROOT)})
        print(f"  exit {rc} after {time.time() - t0:.1f} s", flush=True)
        status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

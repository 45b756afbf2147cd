"""Capture NCCL's own INFO log (INIT, GRAPH, TUNING) around a few all_reduce sizes. GPUs + NCCL only.

NCCL prints what it detected and decided: the topology, the ring and tree channels it searched
(Pattern / Channel / Ring / Trees lines) and, per call, the algorithm and protocol it picked
("AllReduce: <bytes> Bytes -> Algo RING proto LL128 ..."). This program sets NCCL_DEBUG=INFO,
NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING and NCCL_DEBUG_FILE before NCCL starts, runs the sizes of
the preset, collects every rank's log lines on rank 0 and stores them, with provenance, in
gpu_runs/results/nccl_debug_capture/<hardware>.json (the page Ch1-04 renders that file).

    torchrun --nproc_per_node=8 gpu_runs/nccl_debug_capture.py --preset gpu     # one 8-GPU node
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \
        --rdzv-id=capture gpu_runs/nccl_debug_capture.py --preset gpu           # two nodes (same line on each)
    torchrun --nproc_per_node=2 gpu_runs/nccl_debug_capture.py --preset tiny --no-save

It needs a world size of at least 2 (one GPU has no ring or tree to log). On several nodes every rank
uses cuda:LOCAL_RANK of its node; the hostname in each line becomes node<GROUP_RANK>, and the results
file records nodes × GPUs per node.

On CPU it refuses (exit 2): gloo writes no NCCL log, and a CPU run must not pass for a GPU one.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu_runs import harness  # noqa: E402

PROGRAM = "nccl_debug_capture"
SUBSYS = "INIT,GRAPH,TUNING"
PRESETS = {
    "tiny": {"sizes": [1 << 10, 1 << 20], "iters": 2, "max_lines_per_rank": 2000},
    "full": {"sizes": [1 << 10, 1 << 13, 1 << 16, 1 << 19, 1 << 22, 1 << 25, 1 << 28], "iters": 3,
             "max_lines_per_rank": 6000},
    # what `make gpu-runs` launches: one size per factor of 8 from 1 KiB to 1 GiB (where NCCL's
    # algorithm / protocol choices change), a few calls each; seconds, not minutes
    "gpu": {"sizes": [1 << k for k in range(10, 31, 3)], "iters": 3, "max_lines_per_rank": 8000},
}
PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) ")


def require_nccl(args=None, cfg=None) -> None:
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        raise harness.UsageError(
            "needs CUDA GPUs and NCCL (torch.cuda.is_available() = "
            f"{torch.cuda.is_available()}, NCCL in this torch = {dist.is_nccl_available()}); "
            "on CPU there is no NCCL log to capture, so this program does not run")


def nccl_logging(args, cfg) -> None:
    """NCCL reads these when it first initialises, i.e. inside harness.init: set them before it."""
    args.logdir = Path(tempfile.mkdtemp(prefix="nccl-debug-"))
    os.environ["NCCL_DEBUG"] = "INFO"
    os.environ["NCCL_DEBUG_SUBSYS"] = SUBSYS
    os.environ["NCCL_DEBUG_FILE"] = str(args.logdir / "nccl.%h.%p.log")


def anonymise(lines: list[str], node: int) -> list[str]:
    """Replace the hostname at the start of each NCCL line by 'node<k>' (pid and tid are kept)."""
    return [PREFIX.sub(lambda m: f"node{node}:{m['pid']}:{m['tid']} ", ln, count=1) for ln in lines]


def measure(env, cfg, args):
    n = env.world_size
    rows = []
    for size in cfg["sizes"]:
        count = max(size // 4, 1)
        x = torch.ones(count, device=env.device, dtype=torch.float32)
        for _ in range(cfg["iters"]):
            x.fill_(1.0)
            dist.all_reduce(x)
        harness.sync(env)
        ok = bool(torch.all(x == n).item())
        rows.append({"bytes": count * 4, "iters": cfg["iters"], "correct": ok})
    dist.barrier()
    harness.sync(env)
    node = int(os.environ.get("GROUP_RANK", "0"))
    lines = []
    for f in sorted(args.logdir.glob("nccl.*.log")):  # NCCL line-buffers the file: complete up to here
        lines += f.read_text(errors="replace").splitlines()
    lines = anonymise(lines, node)[: cfg["max_lines_per_rank"]]
    gathered = harness.gather({"rank": env.rank, "node": node, "lines": lines})
    params = {**cfg, "dtype": "float32", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": SUBSYS,
              "note": "hostnames replaced by node<k>; lines per rank capped at max_lines_per_rank"}
    measurements = {"calls": rows, "logs": sorted(gathered, key=lambda g: g["rank"])}
    return params, measurements, "" if all(r["correct"] for r in rows) else "an all_reduce returned a wrong sum"


if __name__ == "__main__":
    sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2,
                          check=require_nccl, before_init=nccl_logging))

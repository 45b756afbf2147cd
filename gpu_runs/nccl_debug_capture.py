"""Capture NCCL's own INFO log (INIT, GRAPH, TUNING) around a few all_reduce sizes. GPUs + NCCL only.

NCCL prints what it detected and decided: the topology, the ring and tree channels it searched
(Pattern / Channel / Ring / Trees lines) and, per call, the algorithm and protocol it picked
("AllReduce: <bytes> Bytes -> Algo RING proto LL128 ..."). This program sets NCCL_DEBUG=INFO,
NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING and NCCL_DEBUG_FILE before NCCL starts, runs the sizes of
the preset, collects every rank's log lines on rank 0 and stores them, with provenance, in
gpu_runs/results/nccl_debug_capture/<hardware>.json (the page Ch1-04 renders that file).

    torchrun --nproc_per_node=8 gpu_runs/nccl_debug_capture.py                 # one 8-GPU node
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \
        gpu_runs/nccl_debug_capture.py                                          # two nodes
    torchrun --nproc_per_node=2 gpu_runs/nccl_debug_capture.py --preset tiny --no-save

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
}
PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) ")


def require_nccl() -> None:
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        raise harness.UsageError(
            "needs CUDA GPUs and NCCL (torch.cuda.is_available() = "
            f"{torch.cuda.is_available()}, NCCL in this torch = {dist.is_nccl_available()}); "
            "on CPU there is no NCCL log to capture, so this program does not run")


def anonymise(lines: list[str], node: int) -> list[str]:
    """Replace the hostname at the start of each NCCL line by 'node<k>' (pid and tid are kept)."""
    return [PREFIX.sub(lambda m: f"node{node}:{m['pid']}:{m['tid']} ", ln, count=1) for ln in lines]


def main(argv=None) -> int:
    parser = harness.base_parser(__doc__.splitlines()[0], PRESETS)
    args = parser.parse_args(argv)
    require_nccl()
    cfg = PRESETS[args.preset]
    logdir = Path(tempfile.mkdtemp(prefix="nccl-debug-"))
    # NCCL reads these when it first initialises, i.e. inside harness.init below.
    os.environ["NCCL_DEBUG"] = "INFO"
    os.environ["NCCL_DEBUG_SUBSYS"] = SUBSYS
    os.environ["NCCL_DEBUG_FILE"] = str(logdir / "nccl.%h.%p.log")
    env = harness.init(min_world_size=2)
    n = env.world_size
    rows = []
    for size in cfg["sizes"]:
        count = max(size // 4, 1)
        x = torch.ones(count, device=env.device, dtype=torch.float32)
        for _ in range(cfg["iters"]):
            x.fill_(1.0)
            dist.all_reduce(x)
        torch.cuda.synchronize(env.device)
        ok = bool(torch.all(x == n).item())
        rows.append({"bytes": count * 4, "iters": cfg["iters"], "correct": ok})
    dist.barrier()
    torch.cuda.synchronize(env.device)
    node = int(os.environ.get("GROUP_RANK", "0"))
    lines = []
    for f in sorted(logdir.glob("nccl.*.log")):  # NCCL line-buffers the file: complete up to here
        lines += f.read_text(errors="replace").splitlines()
    lines = anonymise(lines, node)[: cfg["max_lines_per_rank"]]
    gathered = [None] * n
    dist.all_gather_object(gathered, {"rank": env.rank, "node": node, "lines": lines})
    params = {"preset": args.preset, **cfg, "dtype": "float32", "NCCL_DEBUG": "INFO",
              "NCCL_DEBUG_SUBSYS": SUBSYS,
              "note": "hostnames replaced by node<k>; lines per rank capped at max_lines_per_rank"}
    measurements = {"calls": rows, "logs": sorted(gathered, key=lambda g: g["rank"])}
    harness.write_results(env, PROGRAM, __file__, params, measurements, args.out, save=not args.no_save)
    harness.finish()
    if not all(r["correct"] for r in rows):
        print("error: an all_reduce returned a wrong sum", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

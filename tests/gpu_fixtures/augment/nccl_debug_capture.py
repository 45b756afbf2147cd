"""The whole synthetic fixture of gpu_runs/nccl_debug_capture.py, which has no CPU result to mirror (it
refuses to run without CUDA and NCCL).

`augment(data)` receives {"program": "nccl_debug_capture"} and fills every field the results schema
requires, as harness.write_results would on one 8-GPU node: hardware and versions from harness.hardware()
and harness.provenance() on mocked CUDA (tests.gpu_fixtures.make), inputs = the current sha256 of the
modules the program imports from this repository, the commit: the last one that changed those inputs.

The measurements have exactly the shape the program writes ({"calls": [...], "logs": [{"rank", "node",
"lines"}]}), but the log lines are SYNTHETIC: written here from the INFO format strings that Ch1-04 quotes
(snippets/ch1_collective/d04_nccl_topology.py LOG_FORMATS) behind NCCL's line prefix
"<host>:<pid>:<tid> [<cudaDev>] NCCL INFO " (what gpu_runs/nccl_debug_capture.py's PREFIX and the page's
parser expect). The ring orders, graph numbers and algorithm choices below are made up to exercise the
page's parser and renderer; they are not what NCCL prints on an H200 node, and the `command` field says so.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import subprocess

from tests.gpu_fixtures.make import CUDA_VERSION, ROOT, hardware_on_cuda, versions_on_cuda

WORLD = 8
INPUTS = ("gpu_runs/__init__.py", "gpu_runs/harness.py", "gpu_runs/nccl_debug_capture.py")
SCRIPT = "gpu_runs/nccl_debug_capture.py"
# two distinct rank orders, each used by two of the four ring channels (made up; any permutation is a ring)
RING_ORDERS = [list(range(WORLD)), list(range(WORLD)), [0, *range(WORLD - 1, 0, -1)], [0, *range(WORLD - 1, 0, -1)]]
# made-up algorithm/protocol per message size, so that the renderer meets more than one pair
CHOICES = [(1 << 16, "RING", "LL", 0), (1 << 20, "RING", "LL128", 1), (1 << 22, "TREE", "LL128", 3),
           (1 << 62, "RING", "Simple", 3)]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _sha(rel: str) -> str:
    return hashlib.sha256((ROOT / rel).read_bytes()).hexdigest()


def _prefix(rank: int) -> str:
    pid = 4100 + rank
    return f"node0:{pid}:{pid} [{rank}] NCCL INFO "


def rank_lines(rank: int, sizes: list[int], iters: int) -> list[str]:
    """One rank's INFO lines, each body built from a LOG_FORMATS format string."""
    p = _prefix(rank)
    k = len(RING_ORDERS)
    out = [p + "comm 0x7f3a%04x0000 rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"
           % (rank, rank, WORLD, 1, WORLD, rank, 0)]
    out.append(p + "Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d"
               % (4, 0, k, 40.0, 40.0, "NVL", "PIX", 0))
    for c, order in enumerate(RING_ORDERS):
        out.append(p + "%2d :" % c + "".join(f" GPU/{g}" for g in order))
    out.append(p + "Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d"
               % (1, 0, k, 40.0, 40.0, "NVL", "PIX", 0))
    if rank == 0:  # rings.cc prints the channels' rank orders on rank 0 only
        for c, order in enumerate(RING_ORDERS):
            out.append(p + "Channel %02d/%02d :" % (c, k) + "".join(f" {r}" for r in order))
    for c, order in enumerate(RING_ORDERS):
        i = order.index(rank)
        out.append(p + "Ring %02d : %d -> %d -> %d" % (c, order[i - 1], rank, order[(i + 1) % WORLD]))
    for c in range(k):  # a chain inside one node: child rank + 1, parent rank − 1
        child = rank + 1 if rank + 1 < WORLD else -1
        out.append(p + "Trees [%d] %d/%d/%d->%d->%d" % (c, child, -1, -1, rank, rank - 1 if rank else -1))
    for c, order in enumerate(RING_ORDERS):
        nxt = order[(order.index(rank) + 1) % WORLD]
        out.append(p + "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s" % (c, 0, rank, rank, nxt, nxt, "CUMEM"))
    if rank == 0:  # enqueue.cc: one line per call, rank 0
        for s in sizes:
            _, algo, proto, hi = next(ch for ch in CHOICES if s <= ch[0])
            for _ in range(iters):
                out.append(p + "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"
                           % ("AllReduce", s, algo, proto, 0, hi))
    return out


def augment(data: dict) -> None:
    from gpu_runs.nccl_debug_capture import PRESETS, SUBSYS

    cfg = PRESETS["full"]
    sizes = [max(s // 4, 1) * 4 for s in cfg["sizes"]]
    # the last commit that changed an input (not HEAD), so that the fixture changes only when they do and
    # `make --check` does not drift with every unrelated commit; the input hashes keep it current
    commit = _git("log", "-1", "--format=%H", "--", *INPUTS) or _git("rev-parse", "HEAD")
    when = _dt.datetime.fromisoformat(_git("show", "-s", "--format=%cI", commit))
    dirty = bool(_git("status", "--porcelain", "--", *INPUTS))
    versions = versions_on_cuda()
    versions["torch"] = versions["torch"].split("+")[0] + "+cu" + CUDA_VERSION.replace(".", "")
    data.update({
        "schema_version": 2,
        "script": {"path": SCRIPT, "sha256": _sha(SCRIPT)},
        "inputs": {rel: _sha(rel) for rel in INPUTS},
        "command": ("synthetic test fixture (tests/gpu_fixtures/augment/nccl_debug_capture.py): not a GPU run; "
                    "its NCCL log lines are written from the format strings Ch1-04 quotes, not captured from NCCL; "
                    f"a real run is torchrun --nproc_per_node={WORLD} {SCRIPT}"),
        "git": {"commit": commit, "dirty": dirty},
        "created_utc": when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "hardware": hardware_on_cuda(WORLD),
        "versions": versions,
        "params": {"preset": "full", **cfg, "dtype": "float32", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": SUBSYS,
                   "note": "hostnames replaced by node<k>; lines per rank capped at max_lines_per_rank"},
        "measurements": {
            "calls": [{"bytes": s, "iters": cfg["iters"], "correct": True} for s in sizes],
            "logs": [{"rank": r, "node": 0, "lines": rank_lines(r, sizes, cfg["iters"])[: cfg["max_lines_per_rank"]]}
                     for r in range(WORLD)],
        },
    })

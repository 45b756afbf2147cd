"""Several nodes under torchrun's c10d rendezvous, emulated on this machine: two torchrun agents (two
"nodes") of one process each, meeting at one rendezvous endpoint, as a reader runs
`torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT ...` on each node.

Each agent gives its worker LOCAL_RANK 0 (the device index on its node: cuda:LOCAL_RANK on a GPU node),
GROUP_WORLD_SIZE 2 and LOCAL_WORLD_SIZE 1; the results file records 2 nodes × 1 process, under its own
hardware id (it must not overwrite the one-node file of the same world size)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from snippets import results
from tests.conftest import ROOT, TORCHRUN

pytestmark = pytest.mark.dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(script: str, args: list[str], tmp: Path, timeout: float = 120):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    port = _free_port()
    cmd = [TORCHRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=multinode-test", script, *args]
    logs = [open(tmp / f"node{i}.log", "w+") for i in range(2)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
             for f in logs]
    try:
        rcs = [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    out = []
    for f in logs:
        f.seek(0)
        out.append(f.read())
        f.close()
    return rcs, out


PROBE = '''
import json, os, sys
sys.path.insert(0, {root!r})
from gpu_runs import harness
env = harness.init(min_world_size=2)
print("PROBE " + json.dumps({{"rank": env.rank, "local_rank": env.local_rank, "device": str(env.device),
                             "group_rank": os.environ["GROUP_RANK"], "hardware": harness.hardware(env)}}), flush=True)
harness.finish()
'''


def test_two_nodes_rendezvous_local_ranks_and_hardware(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE.format(root=str(ROOT)))
    rcs, out = _two_nodes(str(script), [], tmp_path)
    assert rcs == [0, 0], out
    seen = [json.loads(line[6:]) for o in out for line in o.splitlines() if line.startswith("PROBE ")]
    assert sorted(s["rank"] for s in seen) == [0, 1]
    assert {s["group_rank"] for s in seen} == {"0", "1"}           # one node each
    assert all(s["local_rank"] == 0 and s["device"] == "cpu" for s in seen)
    for s in seen:
        hw = s["hardware"]
        assert (hw["world_size"], hw["nnodes"], hw["gpu_count"]) == (2, 2, 0)
        assert re.fullmatch(r"cpu-gloo-2x1proc-[a-z0-9-]+", hw["id"]), hw["id"]


def test_collectives_bench_on_two_nodes(tmp_path):
    out_dir = tmp_path / "out"
    rcs, out = _two_nodes("gpu_runs/collectives_bench.py",
                          ["--preset", "tiny", "--ops", "all_reduce,all_gather", "--out", str(out_dir)], tmp_path)
    assert rcs == [0, 0], out
    [f] = out_dir.glob("*.json")
    data = json.loads(f.read_text())
    results.validate(data, f"collectives_bench/{f.name}")
    hw = data["hardware"]
    assert (hw["world_size"], hw["nnodes"]) == (2, 2) and f.stem.startswith("cpu-gloo-2x1proc-")
    assert all(r["wrong"] == 0 for r in data["measurements"])
    assert "--nnodes=2" in data["command"] and "--rdzv-backend=c10d" in data["command"]

"""Elastic restart: torchrun --max-restarts=1, one rank killed at step k, the group restarted, resumed from DCP.

Run it with plain Python; it launches torchrun itself (so the restart policy and the environment are part
of the program) and cleans up every process it started, even when something fails:

    python gpu_runs/elastic_resume.py                  # CPU: 2 gloo processes
    python gpu_runs/elastic_resume.py --preset gpu     # 2 GPUs, NCCL

The workers (launched as `torchrun --standalone --nproc_per_node=2 --max-restarts=1 ... --worker`) train the
FSDP2 run of gpu_runs/dcp_bench.py (dropout, Adam, LR schedule, shuffled data) and save a DCP checkpoint
(model, optimizer, scheduler, RNG, data position) every `every` steps. In attempt 0 rank `kill_rank` sends
itself SIGKILL before step `kill_step`. torchrun's agent sees the dead worker, stops the other, and starts
attempt 1 (TORCHELASTIC_RESTART_COUNT = 1), which loads the latest checkpoint and finishes. Attempt 1 then
trains the same run uninterrupted from scratch and compares the two loss trajectories bit for bit.

TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 is set for the workers: with the default (the rendezvous TCPStore shared
with init_process_group, torch >= 2.5), restarted workers can read keys of the previous attempt
(pytorch/pytorch#135712); --share-store keeps the default, to observe it.

The driver and the workers share one parser (harness.base_parser + this program's options); the workers
run through harness.main (init, results file, teardown). What does not fit the skeleton stays here: the
driver launches torchrun itself with a restart policy, and only attempt 1 has a result (attempt 0 is killed
by design; if it finishes, that is a failure without a results file: harness.RunFailed).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpu_runs import harness  # noqa: E402
PROGRAM = "elastic_resume"
PRESETS = {
    # steps in all, checkpoint every `every` steps, rank `kill_rank` dies before step `kill_step` in attempt 0
    "tiny": {"L": 2, "h": 16, "rows": 8, "steps": 6, "every": 2, "kill_step": 3, "kill_rank": 1},
    "full": {"L": 2, "h": 64, "rows": 16, "steps": 16, "every": 4, "kill_step": 10, "kill_rank": 1},
    "gpu": {"L": 4, "h": 1024, "rows": 64, "steps": 16, "every": 4, "kill_step": 10, "kill_rank": 1},
}


# --------------------------------------------------------------------------- the driver (plain Python)

# --8<-- [start:driver]
def launch(preset: str, out: Path | None, share_store: bool, timeout: float, nproc: int = 2,
           save: bool = True) -> int:
    """torchrun with one restart allowed, in its own session; on timeout or error every process is killed."""
    ckpt = Path(tempfile.mkdtemp(prefix="elastic_"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    if not share_store:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--standalone", f"--nproc_per_node={nproc}", "--max-restarts=1", "--monitor-interval=0.5",
           __file__, "--worker", "--ckpt", str(ckpt), "--preset", preset, *(["--out", str(out)] if out else []),
           *([] if save else ["--no-save"])]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)   # its own process group
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"error: no result after {timeout} s", file=sys.stderr)
        return 124
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)        # torchrun, its workers, anything they started
        except ProcessLookupError:
            pass
        proc.wait()
        subprocess.run(["rm", "-rf", str(ckpt)], check=False)
# --8<-- [end:driver]


# --------------------------------------------------------------------------- the workers (under torchrun)

def worker(env, cfg, args):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh

    from gpu_runs.dcp_bench import Run

    torch.set_num_threads(1) if env.device.type == "cpu" else None
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    ckpt = Path(args.ckpt)
    log_path = ckpt / f"attempt{attempt}.json"
    # --8<-- [start:loop]
    run = Run(cfg, mesh, env.device)
    latest = ckpt / "latest"
    resumed_from = int(latest.read_text()) if latest.exists() else 0
    if resumed_from:
        run.load(ckpt / f"step{resumed_from}")             # model, optimizer, scheduler, RNG, data position
    log = []
    while run.pos < cfg["steps"]:
        if attempt == 0 and env.rank == cfg["kill_rank"] and run.pos == cfg["kill_step"]:
            os.kill(os.getpid(), signal.SIGKILL)           # a failure: no cleanup, no exception
        step = run.pos
        log.append([step, run.step()])
        if env.is_main:                                    # what attempt 0 computed survives its death
            log_path.write_text(json.dumps({"resumed_from": resumed_from, "log": log}))
        if run.pos % cfg["every"] == 0:
            dcp.save(run.state(), checkpoint_id=ckpt / f"step{run.pos}")
            dist.barrier()
            if env.is_main:                                # publish only a complete checkpoint
                tmp = ckpt / "latest.tmp"
                tmp.write_text(str(run.pos))
                os.replace(tmp, latest)
    # --8<-- [end:loop]
    if attempt == 0:
        raise harness.RunFailed("attempt 0 finished: the kill did not happen")
    ref = Run(cfg, mesh, env.device)                       # the same run, never interrupted
    uninterrupted = [ref.step() for _ in range(cfg["steps"])]
    dist.barrier()
    measurements, ok = None, True
    if env.is_main:
        first = json.loads((ckpt / "attempt0.json").read_text())
        resumed = [loss for s, loss in first["log"] if s < resumed_from] + [loss for _, loss in log]
        measurements = {"attempts": attempt + 1, "restart_count": attempt, "resumed_from_step": resumed_from,
                        "attempt0": first["log"], "attempt1": log, "resumed": resumed,
                        "uninterrupted": uninterrupted, "bitwise_equal": resumed == uninterrupted,
                        "lost_steps": [s for s, _ in first["log"] if s >= resumed_from],
                        "share_store_disabled": os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") == "1"}
        print(json.dumps({k: v for k, v in measurements.items() if k not in ("attempt0", "attempt1")}), flush=True)
        ok = measurements["bitwise_equal"]
    params = {**cfg, "nproc": env.world_size, "max_restarts": 1,
              "launcher": "torchrun --standalone --max-restarts=1 (started by the program's driver)"}
    return params, measurements, ok


def options(p) -> None:
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ckpt", default=None, help=argparse.SUPPRESS)
    p.add_argument("--share-store", action="store_true",
                   help="keep torch's default shared rendezvous TCPStore (restarts may hang or fail)")
    p.add_argument("--timeout", type=float, default=300)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:   # under torchrun
        return harness.main(PROGRAM, __doc__, PRESETS, worker, script=__file__, options=options, argv=argv,
                            allowed_world_sizes={2})
    p = harness.base_parser(__doc__.splitlines()[0], PRESETS)
    options(p)
    args = p.parse_args(argv)
    if "RANK" in os.environ:
        print("error: run `python gpu_runs/elastic_resume.py`; it starts torchrun itself", file=sys.stderr)
        return 2
    clock = harness.Clock("cpu")   # the driver's wall time, on the host
    clock.start()
    rc = launch(args.preset, args.out, args.share_store, args.timeout, save=not args.no_save)
    print(f"torchrun exited {rc} after {clock.since_start(clock.mark()):.1f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

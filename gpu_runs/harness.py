"""Common harness for gpu_runs programs.

Every program here is one script that runs unchanged under
    torchrun --nproc_per_node=4 gpu_runs/<program>.py ...            (CPU processes, gloo)
    torchrun --nproc_per_node=8 gpu_runs/<program>.py ...            (one node, 8 GPUs, NCCL)
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d ...   (several nodes)
It picks its device and backend itself (CUDA + NCCL when GPUs are visible, else CPU + gloo),
collects provenance, and writes one results file per hardware, atomically, on rank 0.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "gpu_runs" / "results"
SCHEMA_VERSION = 2  # 2: `inputs` (every repository module the run imported, with its sha256)


class UsageError(SystemExit):
    """Bad arguments for this program (e.g. a world size it cannot use): exit code 2."""

    def __init__(self, message: str):
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"error: {message}", file=sys.stderr, flush=True)
        super().__init__(2)


@dataclass
class Env:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init(allowed_world_sizes=None, min_world_size: int = 1, backend: str | None = None) -> Env:
    """Initialise torch.distributed from torchrun's environment.

    Raises UsageError (exit 2, message on rank 0) when not launched by torchrun or when the
    world size is one this program cannot use.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise UsageError("launch with torchrun, e.g. `torchrun --nproc_per_node=4 "
                         f"{Path(sys.argv[0]).as_posix()}`")
    world = int(os.environ["WORLD_SIZE"])
    if world < min_world_size:
        raise UsageError(f"this program needs a world size of at least {min_world_size}, got {world}")
    if allowed_world_sizes is not None and world not in allowed_world_sizes:
        raise UsageError(f"this program runs with world size in {sorted(allowed_world_sizes)}, got {world}")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise UsageError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = backend or "nccl"
    else:
        device = torch.device("cpu")
        backend = backend or "gloo"
    dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    return Env(dist.get_rank(), world, local_rank, device, backend)


def finish() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main(program: str, doc: str, presets: dict[str, dict], body, *, script: str | Path,
         options=None, check=None, timing_flag: bool = False, argv=None, **world) -> int:
    """The skeleton every gpu_runs program shares: arguments, checks, init, the measurement, the results
    file, teardown.

        def measure(env, cfg, args):            # cfg: a copy of PRESETS[args.preset]
            ...
            return params, measurements         # or (params, measurements, ok)
        if __name__ == "__main__":
            sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2))

    `options(parser)` adds the program's own flags, `check(args, cfg)` refuses bad ones (raise UsageError)
    before any process group exists, `timing_flag` adds --no-timing (count bytes and calls only, for
    more processes than cores), `world` goes to init (min_world_size, allowed_world_sizes). `params`
    is recorded with the preset's name in front. `ok=False` writes the results, then exits 1 (a wrong
    sum, a mismatch): the file shows what went wrong."""
    parser = base_parser(doc.strip().splitlines()[0], presets)
    if timing_flag:
        parser.add_argument("--no-timing", action="store_true",
                            help="count bytes and calls only (use when processes outnumber cores)")
    if options:
        options(parser)
    args = parser.parse_args(argv)
    cfg = dict(presets[args.preset])
    if check:
        check(args, cfg)
    env = init(**world)
    out = body(env, cfg, args)
    params, measurements, ok = (*out, True) if len(out) == 2 else out
    write_results(env, program, script, {"preset": args.preset, **params}, measurements, args.out,
                  save=not args.no_save)
    finish()
    return 0 if ok else 1


def base_parser(description: str, presets: dict[str, dict]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", choices=sorted(presets), default="full",
                   help="named parameter set; 'tiny' is what the tests launch")
    p.add_argument("--out", type=Path, default=None,
                   help="results folder (default gpu_runs/results/<program>/)")
    p.add_argument("--no-save", action="store_true", help="print, do not write a results file")
    return p


# ---------------------------------------------------------------- provenance

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return re.sub(r"\s+", " ", line.split(":", 1)[1]).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _launcher_command() -> str:
    """The command that started this run: torchrun's own command line when we can read it."""
    try:
        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
        words = [w.decode() for w in parent if w]
        if any("torchrun" in w or "torch.distributed.run" in w or "deepspeed" in w for w in words):
            if words and Path(words[0]).name.startswith("python"):
                words = words[1:]
            words[0] = Path(words[0]).name
            return " ".join(_rel(w) for w in words)
    except OSError:
        pass
    return " ".join([Path(sys.executable).name, *(_rel(a) for a in sys.argv)])


def _rel(word: str) -> str:
    p = Path(word)
    if p.is_absolute() and p.exists():
        try:
            return p.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            return word
    return word


def _git(paths: list[str] | None = None) -> dict:
    """HEAD, and whether any of `paths` (the run's inputs) differ from it (modified or untracked).

    Only the inputs count: results files written by earlier runs of the same `make runs` do not
    make a later run 'dirty'."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--", *(paths or ["gpu_runs", "snippets"])],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return {"commit": commit, "dirty": bool(status.strip())}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": True}


# folders under the repository root that hold installed packages, not the repository's own code
_NOT_REPO = {".venv", "venv", "node_modules", "site-packages", "dist-packages", "build", "site"}


def repo_inputs(script: str | Path | None = None) -> dict[str, str]:
    """sha256 of every repository module this process has imported, plus the entry script.

    A result depends on more than its entry script: gpu_runs/harness.py and gpu_runs/comm_counter.py
    define what is measured and counted, snippets/common/ the formulas. Changing any of them makes
    the result stale (snippets/results.py)."""
    files = set()
    if script is not None:
        files.add(Path(script).resolve())
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not f or not f.endswith(".py"):
            continue
        p = Path(f).resolve()
        try:
            rel = p.relative_to(ROOT)
        except ValueError:
            continue
        if _NOT_REPO.isdisjoint(rel.parts) and p.is_file():
            files.add(p)
    return {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(files)}


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def hardware(env: Env) -> dict:
    nnodes = int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("NNODES", "1")) or 1)
    gpu = env.device.type == "cuda"
    gpu_name = torch.cuda.get_device_name(env.device) if gpu else None
    cpu = _cpu_model()
    if gpu:
        hid = f"gpu-{env.backend}-{nnodes}x{env.world_size // max(nnodes, 1)}-{_slug(gpu_name)}"
    else:
        hid = f"cpu-{env.backend}-{env.world_size}proc-{_slug(cpu)}"
    return {
        "kind": "gpu" if gpu else "cpu",
        "backend": env.backend,
        "world_size": env.world_size,
        "nnodes": nnodes,
        "cpu_model": cpu,
        "cpu_count": os.cpu_count() or 1,
        "gpu_name": gpu_name,
        "gpu_count": env.world_size if gpu else 0,
        "id": hid,
    }


def provenance(env: Env, script: str | Path) -> dict:
    script = Path(script).resolve()
    nccl = None
    if env.device.type == "cuda":
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # pragma: no cover - depends on the CUDA build
            nccl = None
    inputs = repo_inputs(script)
    return {
        "schema_version": SCHEMA_VERSION,
        "script": {"path": script.relative_to(ROOT).as_posix(),
                   "sha256": hashlib.sha256(script.read_bytes()).hexdigest()},
        "inputs": inputs,
        "command": _launcher_command(),
        "git": _git(list(inputs)),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "hardware": hardware(env),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "deepspeed": _version("deepspeed"),
            "cuda": torch.version.cuda if env.device.type == "cuda" else None,
            "nccl": nccl,
        },
    }


def write_results(env: Env, program: str, script: str | Path, params: dict, measurements,
                  out: Path | None = None, save: bool = True) -> Path | None:
    """On rank 0: assemble, validate and atomically write the results file. Returns its path."""
    if not env.is_main:
        return None
    data = {"program": program, **provenance(env, script), "params": params,
            "measurements": measurements}
    sys.path.insert(0, str(ROOT))
    from snippets.results import validate  # the same validator the build uses

    validate(data)
    if not save:
        print(json.dumps(data, indent=1)[:4000])
        return None
    folder = Path(out) if out else RESULTS / program
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{data['hardware']['id']}.json"
    # atomic: write a temporary file beside the target, then rename it over the target. A run that
    # dies halfway leaves the previous results file as it was and no partial file behind.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    print(f"wrote {target}", flush=True)
    return target

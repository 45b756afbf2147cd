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
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "gpu_runs" / "results"
SCHEMA_VERSION = 2  # 2: `inputs` (every repository module the run imported, with its sha256)


class UsageError(SystemExit):
    """Bad arguments for this program (e.g. a world size it cannot use): exit code 2."""

    def __init__(self, message: str):
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"error: {message}", file=sys.stderr, flush=True)
        super().__init__(2)


class RunFailed(Exception):
    """The run cannot produce a result (raised by a program's body): main() prints it, tears the group down
    and exits 1 without writing a results file."""


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
    env = Env(dist.get_rank(), world, local_rank, device, backend)
    if os.environ.get(CHECK_DEVICES_VAR) == "1":
        check_devices(env)
    return env


def finish() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main(program: str, doc: str, presets: dict[str, dict], body, *, script: str | Path,
         options=None, check=None, before_init=None, timing_flag: bool = False, argv=None, **world) -> int:
    """The skeleton every gpu_runs program shares: arguments, checks, init, the measurement, the results
    file, teardown.

        def measure(env, cfg, args):            # cfg: a copy of PRESETS[args.preset]
            ...
            return params, measurements         # or (params, measurements, ok | error)
        if __name__ == "__main__":
            sys.exit(harness.main(PROGRAM, __doc__, PRESETS, measure, script=__file__, min_world_size=2))

    `options(parser)` adds the program's own flags, `check(args, cfg)` refuses bad ones (raise UsageError)
    before any process group exists, `before_init(args, cfg)` runs after the checks and before init (set
    environment variables a library reads when it starts, e.g. NCCL_DEBUG; work a rank does alone before
    joining the group), `timing_flag` adds --no-timing (count bytes and calls only, for more processes
    than cores), `world` goes to init (min_world_size, allowed_world_sizes). `params` is recorded with
    the preset's name in front. `ok=False`, or a non-empty error string (printed as "error: …" on
    stderr), writes the results, then exits 1 (a wrong sum, a mismatch): the file shows what went
    wrong. A body that cannot produce a result raises RunFailed: nothing is written, exit 1."""
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
    if before_init:
        before_init(args, cfg)
    env = init(**world)
    try:
        out = body(env, cfg, args)
    except RunFailed as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        finish()
        return _leave(1)
    params, measurements, ok = (*out, True) if len(out) == 2 else out
    if isinstance(ok, str):
        if ok:
            print(f"error: {ok}", file=sys.stderr, flush=True)
        ok = not ok
    write_results(env, program, script, {"preset": args.preset, **params}, measurements, args.out,
                  save=not args.no_save)
    finish()
    return _leave(0 if ok else 1)


def _leave(code: int) -> int:
    """In a torchrun worker, exit now, without the interpreter's teardown: there gloo's threads can abort
    the process after everything is done ("terminate called without an active exception", SIGABRT; seen
    in about 1 of 12 tiny runs of fsdp_bench, before this harness too), and torchrun would report the run
    as failed. The results file is already written and fsync'ed. Elsewhere (a test calling main()) return."""
    if os.environ.get("TORCHELASTIC_RUN_ID") is None:
        return code
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def base_parser(description: str, presets: dict[str, dict]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", choices=sorted(presets), default="full",
                   help="named parameter set; 'tiny' is what the tests launch")
    p.add_argument("--out", type=Path, default=None,
                   help="results folder (default gpu_runs/results/<program>/)")
    p.add_argument("--no-save", action="store_true", help="print, do not write a results file")
    return p


# ---------------------------------------------------------------- timing, memory, reductions
#
# One implementation of what every program times and measures, so that the CUDA path is written (and
# tested, tests/test_harness_cuda.py with torch.cuda faked) once:
#   * a timestamp taken inside a timed region never waits for the device: on CUDA it is an Event recorded
#     on the current stream (inside an autograd hook: the stream the node runs on; inside a Future.then
#     callback: the stream synchronised with the collective, torch/futures/__init__.py `then`), read only
#     after the region, when the device has passed it;
#   * a region starts after a fence (optional barrier, then a device synchronize), so nothing queued
#     before it is counted, and nothing synchronises inside it;
#   * a memory peak is reset at the start of what it measures;
#   * every tensor handed to a collective lives on env.device (NCCL has no CPU backend).

def _device(x) -> torch.device:
    return torch.device(getattr(x, "device", x))


def on_cuda(x) -> bool:
    """Whether `x` (an Env or a device) is a CUDA device: which branch every helper below takes."""
    return _device(x).type == "cuda"


def sync(x) -> None:
    """Wait for the device (a no-op on CPU, where an op has finished when it returns). Between phases of
    a program, never inside a timed region or a hook."""
    if on_cuda(x):
        torch.cuda.synchronize(_device(x))


class Clock:
    """Timestamps of one process's work on one timeline, cheap enough to take anywhere.

    mark(): on CUDA an Event(enable_timing=True) recorded on the current stream, on CPU
    time.perf_counter(); it never synchronises, so it may be taken inside autograd hooks, DDP comm
    hooks, Future.then callbacks and wrapped library calls. start() fences (optional barrier, device
    synchronize) and anchors the timeline: host(m) is m's time on the host's perf_counter clock (the
    same CLOCK_MONOTONIC for every process of one host), so the timelines of several ranks line up.
    Reading a mark (seconds, ms, host) waits for its event first; resolve() waits for everything at
    once (one synchronize after the region)."""

    def __init__(self, env_or_device):
        self.device = _device(env_or_device)
        self.cuda = on_cuda(self.device)
        self._ref = None          # CUDA: the event recorded at start()
        self.t0 = None            # host perf_counter at start()

    def start(self, barrier: bool = False) -> None:
        if barrier:
            dist.barrier()
        sync(self.device)
        self.t0 = time.perf_counter()
        if self.cuda:
            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def resolve(self) -> None:
        sync(self.device)

    def seconds(self, a, b) -> float:
        """Seconds from mark a to mark b."""
        if not self.cuda:
            return b - a
        a.synchronize()
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    def ms(self, a, b) -> float:
        return self.seconds(a, b) * 1e3

    def host(self, m) -> float:
        """Mark m on the host's perf_counter timeline (needs start())."""
        if self.t0 is None:
            raise RuntimeError("Clock.host() needs Clock.start() first")
        return m if not self.cuda else self.t0 + self.seconds(self._ref, m)

    def since_start(self, m) -> float:
        return self.host(m) - self.t0


def time_call(env, fn, *, barrier: bool = True) -> float:
    """Seconds of one call of fn(): fence (barrier, synchronize), then CUDA events around it (perf_counter
    on CPU), read after it returned."""
    clock = Clock(env)
    clock.start(barrier=barrier)
    fn()
    return clock.since_start(clock.mark())


def span_times_ms(fn, clock: Clock, warmup: int, spans: int, span_ms: float, max_iters: int,
                  wall: bool = False) -> tuple[list[float], int, list[float]]:
    """Per-call times (ms) of `spans` spans of back-to-back calls, the calls per span, and (wall=True)
    each span's host wall-clock time per call. The calls per span are chosen from one probe call so
    that a span lasts about `span_ms`. The calls of a span are enqueued back to back and read after one
    resolve() at the end; with wall=True every span is fenced (resolve before and after), since the
    host's clock can only time a finished span."""
    for _ in range(warmup):
        fn()
    a = clock.mark()
    fn()
    b = clock.mark()
    clock.resolve()
    iters = max(1, min(max_iters, math.ceil(span_ms / max(clock.ms(a, b), 1e-6))))
    marks, walls = [], []
    for _ in range(spans):
        if wall:
            clock.resolve()
            t0 = time.perf_counter()
        a = clock.mark()
        for _ in range(iters):
            fn()
        marks.append((a, clock.mark()))
        if wall:
            clock.resolve()
            walls.append((time.perf_counter() - t0) * 1e3 / iters)
    clock.resolve()  # one synchronize, after every span was enqueued
    return [clock.ms(a, b) / iters for a, b in marks], iters, walls


def time_loop(env, fn, calls: int, *, barrier: bool = True) -> float:
    """Seconds per call of `calls` back-to-back calls timed as one span (nccl-tests' method: no fence
    between calls, so a short call's time is not the fence's)."""
    clock = Clock(env)
    clock.start(barrier=barrier)
    for _ in range(calls):
        fn()
    return clock.since_start(clock.mark()) / calls


def timing_note(env, what: str) -> str:
    """How a program timed `what`, for its params: the fence and the clock time_call uses here."""
    clock = "CUDA events" if on_cuda(env) else "time.perf_counter calls"
    return f"barrier, synchronize, then {what} between {clock}"


def reduce_values(env, values, op: str = "max", dtype=torch.float64) -> list:
    """Element-wise max / min / sum of a list of numbers over all ranks (a tensor on env.device)."""
    t = torch.tensor(list(values), dtype=dtype, device=env.device)
    dist.all_reduce(t, op={"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}[op])
    return t.cpu().tolist()


def max_over_ranks(env, values) -> list[float]:
    """The slowest rank's value, per element (a collective lasts as long as its slowest rank)."""
    return reduce_values(env, values, "max")


def gather(obj) -> list:
    """Every rank's `obj` (any picklable object), in rank order, on every rank."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def geometric(lo: int, hi: int, factor: int) -> list[int]:
    """lo, lo·factor, lo·factor², … up to hi (message-size sweeps)."""
    out = []
    while lo <= hi:
        out.append(lo)
        lo *= factor
    return out


class PeakMemory:
    """The caching allocator's peak over a block, reset at its start (CUDA only; None elsewhere).

        with harness.PeakMemory(env) as mem:
            ...
        mem.peak, mem.base   # max_memory_allocated during the block, memory_allocated at its start

    A peak read without a reset at the start of what it measures is the running maximum of everything
    before it (another configuration, a warm-up)."""

    def __init__(self, env_or_device):
        self.device = _device(env_or_device)
        self.cuda = on_cuda(self.device)
        self.base = self.peak = self.end = None

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = int(torch.cuda.memory_allocated(self.device))
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.peak = int(torch.cuda.max_memory_allocated(self.device))
            self.end = int(torch.cuda.memory_allocated(self.device))
        return False

    @property
    def peak_above_base(self):
        return None if self.peak is None else self.peak - self.base


def tolerance(dtype, reduction_length: int) -> dict:
    """How far two correct computations in `dtype` may differ when they sum the same K = reduction_length
    products in different orders (a sharded and an unsharded layer): each is within γ_K = K·u/(1 − K·u)
    of the exact sum relative to Σ|terms| (u = eps/2, Higham, Accuracy and Stability of Numerical
    Algorithms, 2nd ed., §3.1), so they differ by at most 2γ_K ≈ K·eps. `rel` is that bound; a
    comparison multiplies it by the largest |value| of the reference."""
    eps = float(torch.finfo(dtype).eps)
    k = int(reduction_length)
    u = eps / 2
    return {"dtype": str(dtype).replace("torch.", ""), "eps": eps, "reduction_length": k,
            "rel": 2 * k * u / (1 - k * u) if k * u < 1 else float("inf"),
            "rule": "2·γ_K, γ_K = K·u/(1 − K·u), u = eps/2 (two summation orders of K terms), × max|reference|"}


# ---------------------------------------------------------------- strict device check (HARNESS_CHECK_DEVICES=1)
#
# Under NCCL every tensor handed to a torch.distributed collective must be on env.device: a CPU tensor
# fails ("No backend type associated with device type cpu"). On CPU + gloo every tensor is on the CPU, so
# that bug cannot show. The strict mode makes it show on CPU: a TorchFunctionMode marks every tensor
# created where a CUDA run would create it on the host (a factory call without device=, .cpu(), and what
# is computed from such tensors alone), and the collectives of torch.distributed refuse a marked tensor,
# or any tensor whose device is not env.device. The tests run the programs' tiny presets under it.

CHECK_DEVICES_VAR = "HARNESS_CHECK_DEVICES"
# isend / irecv are checked through batch_isend_irecv (its P2POp compares `op` with the original functions,
# so they cannot be wrapped in place)
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
               "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all",
               "all_to_all_single", "scatter", "gather", "send", "recv", "batch_isend_irecv")
_HOST = "_harness_host_storage"  # attribute on a marked tensor: the data_ptr of its storage when marked


class DeviceError(RuntimeError):
    """A tensor handed to a collective does not live on env.device (HARNESS_CHECK_DEVICES=1)."""


def _storage_ptr(t: torch.Tensor):
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # e.g. a tensor subclass without storage
        return None


def host_marked(t) -> bool:
    """Whether a CUDA run would hold this tensor on the host (created without device=, or by .cpu()).
    A tensor whose data was replaced since (param.data = …, Module.to) is not marked any more."""
    ptr = getattr(t, _HOST, None)
    return ptr is not None and ptr == _storage_ptr(t)


def _mark(t: torch.Tensor, host: bool) -> None:
    try:
        if host:
            setattr(t, _HOST, _storage_ptr(t))
        elif getattr(t, _HOST, None) is not None:
            delattr(t, _HOST)
    except (AttributeError, TypeError, RuntimeError):
        pass


_EXPLICIT_HOST = {"cpu", "pin_memory", "numpy"}
_MOVE = {"to", "cuda", "type"}


class HostOrigin(TorchFunctionMode):
    """Marks the tensors a CUDA run would create on the host (see host_marked)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self._propagate(func, args, kwargs, out)
        except Exception:  # noqa: BLE001 - marking is best effort, never changes what runs
            pass
        return out

    @staticmethod
    def _propagate(func, args, kwargs, out) -> None:
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if not outs:
            return
        ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        name = getattr(func, "__name__", "")
        if name in _EXPLICIT_HOST:
            host = True
        elif kwargs.get("device") is not None or name == "cuda" or (
                name in _MOVE and any(isinstance(a, (str, torch.device, int)) and not isinstance(a, bool)
                                      for a in args[1:])):
            host = False     # placed explicitly (device=…, .to(device), .cuda()): the program chose
        elif ins:
            host = all(host_marked(t) for t in ins)   # computed from host tensors alone stays on the host
        else:
            host = True      # a factory without device=: on a CUDA run this is a CPU tensor
        for t in outs:
            if any(t is i for i in ins) and not (name in _MOVE or name in _EXPLICIT_HOST):
                continue     # in place: the tensor keeps what it was
            if t.device.type != "cpu":
                host = False
            _mark(t, host)


def _check_tensors(env: Env, op: str, args, kwargs) -> None:
    if op == "batch_isend_irecv":
        args, kwargs = [getattr(p, "tensor", None) for p in (args[0] if args else kwargs.get("p2p_op_list", []))], {}
    for t in tree_leaves((args, kwargs)):
        if not isinstance(t, torch.Tensor):
            continue
        if t.device != env.device and not (t.device.type == env.device.type == "cpu"):
            raise DeviceError(f"{op}: a tensor on {t.device}, but this rank's device is {env.device}")
        if host_marked(t):
            raise DeviceError(
                f"{op}: a tensor of shape {tuple(t.shape)} created without device=env.device (a factory call "
                f"without device=, or .cpu()): under NCCL it would be a CPU tensor, which NCCL cannot "
                f"reduce. Create it with device=env.device (e.g. harness.max_over_ranks).")


_checking = threading.local()


def check_devices(env: Env) -> None:
    """HARNESS_CHECK_DEVICES=1: wrap torch.distributed's collectives with the device check and mark host
    tensors for the rest of the process (called by init)."""
    if getattr(_checking, "on", False):
        return
    _checking.on = True
    HostOrigin().__enter__()  # for the rest of this process (the main thread: where programs run)

    for name in COLLECTIVES:
        orig = getattr(dist, name, None)
        if orig is None:
            continue

        def wrapper(*args, __name=name, __orig=orig, **kwargs):
            _check_tensors(env, __name, args, kwargs)
            return __orig(*args, **kwargs)

        wrapper.__wrapped__ = orig
        wrapper.__name__ = name
        setattr(dist, name, wrapper)


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
    """What ran: nodes × processes (GPUs) per node, the CPU, the GPU. torchrun sets GROUP_WORLD_SIZE (the
    number of nodes, i.e. of its agents) and LOCAL_WORLD_SIZE (processes on this node) for every rank."""
    nnodes = int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("NNODES", "1")) or 1)
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) or env.world_size // max(nnodes, 1)
    gpu = env.device.type == "cuda"
    gpu_name = torch.cuda.get_device_name(env.device) if gpu else None
    cpu = _cpu_model()
    if gpu:
        hid = f"gpu-{env.backend}-{nnodes}x{per_node}-{_slug(gpu_name)}"
    elif nnodes > 1:
        hid = f"cpu-{env.backend}-{nnodes}x{per_node}proc-{_slug(cpu)}"
    else:
        hid = f"cpu-{env.backend}-{env.world_size}proc-{_slug(cpu)}"
    return {
        "kind": "gpu" if gpu else "cpu",
        "backend": env.backend,
        "world_size": env.world_size,
        "nnodes": nnodes,
        "gpus_per_node": per_node if gpu else None,
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

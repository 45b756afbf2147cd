"""Static checks of the CUDA path of every gpu_runs program (read from the source, nothing runs).

The CPU tests cannot see these defects, because on CPU + gloo they do not happen:
  1. a tensor handed to a torch.distributed collective must live on env.device: NCCL has no CPU backend
     ("No backend type associated with device type cpu"). A collective's tensor argument must not come
     from a factory call without device= (torch.tensor([...]) …), from .cpu() or from a "cpu" literal,
     nor be computed from such tensors alone;
  2. a hook (autograd, DDP comm hook, forward hook) or a Future.then callback must not synchronise or
     read a host clock: it would serialise backward with NCCL, or time the enqueue instead of the work;
  3. the programs time and measure memory only through gpu_runs/harness.py (Clock, time_call,
     time_loop, PeakMemory), whose CUDA path tests/test_harness_cuda.py checks with torch.cuda faked;
  4. the profiler runs as a `with` block and never around a timed region.
Each check is first shown to flag the code it was written for (the defects of the review
shared/reviews/gpu-path.md §2, quoted from the programs before the fix).
tests/test_harness_cuda.py runs the same kind of bug under HARNESS_CHECK_DEVICES=1 (strict mode).
"""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_RUNS = ROOT / "gpu_runs"
PROGRAMS = sorted(p for p in GPU_RUNS.glob("*.py") if p.stem not in ("__init__", "harness"))

COLLECTIVES = {"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
               "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all",
               "all_to_all_single", "scatter", "gather", "send", "recv", "isend", "irecv",
               "all_to_all_single_autograd", "inference_all_reduce"}
COMM_MODULES = {"dist", "fc", "dscomm", "c10d"}
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace",
             "eye", "rand", "randn", "randint", "randperm", "from_numpy", "ByteTensor", "FloatTensor", "LongTensor"}
LIKE = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
COMBINE = {"cat", "stack", "concat", "concatenate", "where"}
# a program whose every tensor is a host tensor by design, and why
HOST_PROGRAMS = {"cpu_allreduce_gap": "hides the GPUs (CUDA_VISIBLE_DEVICES=''): a host-memory measurement, gloo only"}

# owned by the harness: only gpu_runs/harness.py calls these
HARNESS_ONLY = {("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "time"), ("time", "monotonic"),
                ("cuda", "synchronize"), ("cuda", "Event"), ("cuda", "max_memory_allocated"),
                ("cuda", "reset_peak_memory_stats"), ("cuda", "memory_allocated")}
# programs that another helper is writing (they carry their own Clock for now): rule 3 does not cover them yet
NOT_YET_ON_HARNESS_TIMING: set[str] = set()

BAD, OK, UNKNOWN = "bad", "ok", "unknown"


# ------------------------------------------------------------------ the checker

def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_cpu_literal(node) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0] == "cpu"
    if isinstance(node, ast.Call) and _dotted(node.func) in ("torch.device", "device") and node.args:
        return _is_cpu_literal(node.args[0])
    return False


class Module:
    """One program's functions, with a parent map, so a name can be traced to its assignments."""

    def __init__(self, path: Path, source: str | None = None):
        self.path = path
        self.tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
        self.parent = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    def lookup(self, name: str, node):
        """The function `name` as seen from `node`: defined in its enclosing scopes, innermost first."""
        scope = self.scope(node)
        while True:
            for n in ast.walk(scope):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name \
                        and (scope is self.tree or self.scope(n) is scope):
                    return n
            if scope is self.tree:
                return None
            scope = self.scope(scope)

    def scope(self, node):
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return node
        return self.tree

    def assignments(self, name: str, scope) -> list:
        """Every value assigned to `name` in `scope` (tuple targets: (value, index)), flow-insensitively."""
        out = []
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for t in targets:
                if isinstance(t, ast.Name) and t.id == name:
                    out.append((value, None))
                elif isinstance(t, ast.Tuple):
                    for i, el in enumerate(t.elts):
                        if isinstance(el, ast.Name) and el.id == name:
                            out.append((value, i))
        return out

    # ---- the origin of a tensor expression: BAD (a host tensor on a CUDA run), OK, or UNKNOWN

    def origin(self, node, scope, depth: int = 0) -> tuple[str, str]:
        if depth > 8:
            return UNKNOWN, ""
        nxt = lambda n, s=scope: self.origin(n, s, depth + 1)  # noqa: E731
        if isinstance(node, ast.Call):
            fn = node.func
            dotted = _dotted(fn)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if "device" in kw:
                return (BAD, f"device={ast.unparse(kw['device'])}") if _is_cpu_literal(kw["device"]) else (OK, "")
            if isinstance(fn, ast.Attribute) and name == "cpu":
                return BAD, ".cpu()"
            if isinstance(fn, ast.Attribute) and name in ("to", "cuda"):
                dev = [a for a in node.args if not (isinstance(a, ast.Attribute) and _dotted(a).startswith("torch."))]
                if name == "cuda" or dev:
                    return (BAD, f".to({ast.unparse(dev[0])})") if dev and _is_cpu_literal(dev[0]) else (OK, "")
                return nxt(fn.value)                       # .to(dtype): where the receiver is
            if dotted.startswith("torch.") and name in FACTORIES:
                return BAD, f"{dotted}(...) without device="
            if dotted.startswith("torch.") and name in LIKE and node.args:
                return nxt(node.args[0])
            if dotted.startswith("torch.") and name in COMBINE and node.args:
                return self.combine([nxt(e) for e in getattr(node.args[0], "elts", [node.args[0]])])
            if isinstance(fn, ast.Attribute):               # a method of a tensor: clone, view, float, …
                return nxt(fn.value)
            f = self.lookup(fn.id, node) if isinstance(fn, ast.Name) else None
            if f is not None:                               # a function of this program
                rets = [r.value for r in ast.walk(f) if isinstance(r, ast.Return) and r.value is not None]
                return self.combine([self.origin(r, f, depth + 1) for r in rets]) if rets else (UNKNOWN, "")
            return UNKNOWN, ""
        if isinstance(node, ast.BinOp):
            return self.combine([nxt(node.left), nxt(node.right)], mixed_ok=True)
        if isinstance(node, ast.UnaryOp):
            return nxt(node.operand)
        if isinstance(node, ast.Subscript):
            return nxt(node.value)
        if isinstance(node, ast.IfExp):
            return self.combine([nxt(node.body), nxt(node.orelse)])
        if isinstance(node, (ast.List, ast.Tuple)):
            return self.combine([nxt(e) for e in node.elts])
        if isinstance(node, ast.Constant):
            return OK, ""                                   # a Python number: not a tensor
        if isinstance(node, ast.Name):
            s = scope
            while True:
                found = self.assignments(node.id, s) if s is not self.tree else \
                    [(v, i) for v, i in self.assignments(node.id, s) if self.scope(v) is self.tree]
                if found:
                    outs = []
                    for value, index in found:
                        if index is not None and isinstance(value, (ast.Tuple, ast.List)):
                            value = value.elts[index]
                        elif index is not None and isinstance(value, ast.Call):
                            outs.append(self._tuple_return(value, index, depth))
                            continue
                        outs.append(self.origin(value, self.scope(value), depth + 1))
                    return self.combine(outs)
                if s is self.tree:
                    return UNKNOWN, ""
                s = self.scope(s)
        return UNKNOWN, ""

    def _tuple_return(self, call, index, depth):
        f = self.lookup(call.func.id, call) if isinstance(call.func, ast.Name) else None
        if f is None:
            return UNKNOWN, ""
        outs = [self.origin(r.value.elts[index], f, depth + 1) for r in ast.walk(f)
                if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple) and len(r.value.elts) > index]
        return self.combine(outs) if outs else (UNKNOWN, "")

    @staticmethod
    def combine(parts, mixed_ok: bool = False):
        """Conservative: any host origin makes the whole host (one assignment of a name is enough to crash);
        for arithmetic, one device operand puts the result on the device (a 0-dim CPU operand is allowed)."""
        parts = [p for p in parts if p[0] != UNKNOWN] or [(UNKNOWN, "")]
        bad = [p for p in parts if p[0] == BAD]
        if mixed_ok:
            return bad[0] if len(bad) == len(parts) else (OK if any(p[0] == OK for p in parts) else UNKNOWN, "")
        return bad[0] if bad else parts[0]

    # ---- rule 1

    def collective_calls(self):
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in COLLECTIVES and _dotted(node.func.value) in COMM_MODULES:
                yield node

    def host_tensors_in_collectives(self) -> list[str]:
        problems = []
        for call in self.collective_calls():
            scope = self.scope(call)
            for arg in [*call.args, *(k.value for k in call.keywords if k.arg not in ("op", "src", "dst", "group",
                                                                                       "async_op", "group_src"))]:
                verdict, why = self.origin(arg, scope)
                if verdict == BAD:
                    problems.append(f"{self.path.name}:{call.lineno}: {ast.unparse(call)[:80]} — "
                                    f"`{ast.unparse(arg)[:40]}` comes from {why}")
        return problems

    # ---- rule 2

    HOOK_REGISTRARS = {"register_post_accumulate_grad_hook", "register_hook", "register_comm_hook",
                       "register_forward_pre_hook", "register_forward_hook", "register_full_backward_hook",
                       "register_full_backward_pre_hook", "then", "add_done_callback"}
    FORBIDDEN_IN_HOOKS = {"synchronize", "perf_counter", "perf_counter_ns", "item", "time_call", "time_loop",
                          "resolve", "seconds", "ms", "host", "since_start", "barrier"}

    def _callable_bodies(self, node, seen):
        """The code a callable argument runs: a lambda, a function of this program, transitively."""
        if isinstance(node, ast.Lambda):
            yield node
        elif isinstance(node, ast.Name):
            f = self.lookup(node.id, node)
            if f is not None and f not in seen:
                seen.add(f)
                yield f

    def synchronising_hooks(self) -> list[str]:
        problems = []
        for call in ast.walk(self.tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr in self.HOOK_REGISTRARS):
                continue
            seen: set = set()
            todo = [b for a in call.args for b in self._callable_bodies(a, seen)]
            while todo:
                body = todo.pop()
                for n in ast.walk(body):
                    if not isinstance(n, ast.Call):
                        continue
                    name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                    if name in self.FORBIDDEN_IN_HOOKS or name in ("sync", "now"):
                        problems.append(f"{self.path.name}:{n.lineno}: `{ast.unparse(n)[:60]}` inside a hook "
                                        f"registered at line {call.lineno} ({call.func.attr})")
                    todo += list(self._callable_bodies(n.func, seen))
        return problems

    # ---- rule 3

    def timing_outside_harness(self) -> list[str]:
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute):
                owner = _dotted(node.value).split(".")[-1]
                if (owner, node.attr) in HARNESS_ONLY:
                    out.append(f"{self.path.name}:{node.lineno}: {_dotted(node)} (use harness.Clock / time_call / "
                               "time_loop / PeakMemory / sync)")
        return out

    # ---- rule 4

    def profiler_around_timing(self) -> list[str]:
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__enter__" \
                    and "prof" in ast.unparse(node.func.value):
                out.append(f"{self.path.name}:{node.lineno}: the profiler entered by hand (use `with profile(...)`, "
                           "outside every timed region)")
            if isinstance(node, ast.With) and any("profile(" in ast.unparse(i.context_expr) for i in node.items):
                for n in ast.walk(node):
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                            n.func.attr in ("time_call", "time_loop", "mark", "start", "perf_counter"):
                        out.append(f"{self.path.name}:{n.lineno}: timing inside a profiled block")
        return out


# ------------------------------------------------------------------ the checks flag what they are for

OLD_ZERO_BENCH = '''
def run_stage(stage, cfg, env, timed=True):
    if timed:
        times = []
        for _ in range(cfg["timed_steps"]):
            dist.barrier()
            t0 = time.perf_counter()
            train_step()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times.append(float(t.item()))
'''
OLD_SP = '''
def timing(cfg, env, mesh, variant):
    for it in range(cfg["iters"] + 1):
        dist.barrier()
        t0 = time.perf_counter()
        y = blk(inp)
        dt = torch.tensor([time.perf_counter() - t0])
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
'''
OLD_COLLECTIVES = '''
def main(env):
    t = torch.tensor(times, dtype=torch.float64)
    w = torch.tensor([wrong], dtype=torch.int64)
    if env.backend == "nccl":
        t, w = t.to(env.device), w.to(env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
'''
OLD_DDP = '''
def overlap(cfg, env, cap, steps=4):
    def now():
        if env.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - clock["t0"]

    for k, p in net.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, k=k: ready.update({k: now()}) and None)

    def hook(state, bucket):
        fut = allreduce_hook(state, bucket)

        def done(f):
            rec["done"] = time.perf_counter() - clock["t0"]
            return f.value()

        return fut.then(done)
'''
OLD_OFFLOAD = '''
def run_config(name, cfg, env, nvme_path):
    for i in range(cfg["warmup"] + cfg["steps"]):
        if measured and prof is None and env.device.type == "cuda":
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
        t0 = time.perf_counter()
    row["gpu_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(env.device))
'''
GOOD = '''
def fine(env, n, parts):
    x = torch.zeros(n, device=env.device)
    dist.all_reduce(x)
    y = torch.randn(n, generator=g).to(env.device)
    dist.broadcast(y.float(), src=0)
    z = torch.stack([torch.ones(2, device=env.device) for _ in parts]) * 2
    dist.all_reduce(z)
    idx = torch.arange(n, device=env.device) % 97
    dist.all_reduce(idx + env.rank)
'''


def _mod(src: str) -> Module:
    return Module(Path("example.py"), textwrap.dedent(src))


def test_checker_flags_the_reviewed_collective_defects():
    zero = _mod(OLD_ZERO_BENCH).host_tensors_in_collectives()
    sp = _mod(OLD_SP).host_tensors_in_collectives()
    coll = _mod(OLD_COLLECTIVES).host_tensors_in_collectives()
    assert len(zero) == 1 and "torch.tensor(...) without device=" in zero[0], zero
    assert len(sp) == 1 and "dt" in sp[0], sp
    assert len(coll) == 1, coll  # one reaching assignment without device= is enough (a gloo run on GPUs crashes)
    assert _mod(GOOD).host_tensors_in_collectives() == []
    assert _mod("def f(env):\n    t = torch.ones(3, device='cpu')\n    dist.all_reduce(t)\n") \
        .host_tensors_in_collectives()


def test_checker_flags_the_reviewed_timing_defects():
    ddp = _mod(OLD_DDP)
    hooks = ddp.synchronising_hooks()
    assert any("now()" in h for h in hooks) and any("perf_counter" in h and "then" in h for h in hooks), hooks
    offload = _mod(OLD_OFFLOAD)
    assert offload.profiler_around_timing(), "the profiler entered by hand around timed steps"
    assert any("max_memory_allocated" in p for p in offload.timing_outside_harness())
    assert any("perf_counter" in p for p in _mod(OLD_ZERO_BENCH).timing_outside_harness())


# ------------------------------------------------------------------ the programs pass

@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_every_collective_gets_a_tensor_on_env_device(path):
    if path.stem in HOST_PROGRAMS:
        pytest.skip(HOST_PROGRAMS[path.stem])
    assert Module(path).host_tensors_in_collectives() == []


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_no_hook_synchronises_or_reads_a_clock(path):
    assert Module(path).synchronising_hooks() == []


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_timing_and_memory_only_through_the_harness(path):
    if path.stem in NOT_YET_ON_HARNESS_TIMING:
        pytest.skip("another helper's new program, with its own Clock (harness.Clock has the same API)")
    m = Module(path)
    assert m.timing_outside_harness() == []
    assert m.profiler_around_timing() == []


def test_the_checker_reads_every_collective_of_the_programs():
    """The checks above see the calls they are about (a checker that finds nothing passes anything)."""
    calls = {p.stem: sum(1 for _ in Module(p).collective_calls()) for p in PROGRAMS}
    for program in ("collectives_bench", "ddp_bench", "moe_ep", "mesh_3d", "tp_bench", "nccl_debug_capture"):
        assert calls[program] >= 1, (program, calls)
    hooks = sum(1 for p in PROGRAMS for n in ast.walk(Module(p).tree) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute) and n.func.attr in Module.HOOK_REGISTRARS)
    assert hooks >= 8

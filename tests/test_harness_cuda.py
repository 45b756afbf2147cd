"""The CUDA path of gpu_runs/harness.py and of the programs' timing, run here with torch.cuda faked.

No GPU is needed. `FakeCuda` stands in for torch.cuda's events, synchronize and allocator counters and
enforces what the real ones require or what the programs must not do:
  * Event.elapsed_time raises unless both events have completed (event.synchronize(), or a device
    synchronize after they were recorded): a timed region read before synchronisation fails, as
    cudaEventElapsedTime does (cudaErrorNotReady);
  * a synchronize inside backward (an autograd hook, a DDP comm hook) or on another thread (a
    Future.then callback) is recorded as a violation: it would serialise backward with NCCL;
  * the allocator counters come from a MemTracker (every tensor's storage), so a peak that is not
    reset, or that includes gradients, shows.
Each detector is first shown to fire on a small example of the defect it is for.
"""
from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.distributed as dist

from gpu_runs import harness

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the fake

class FakeCuda:
    def __init__(self):
        self.events: list = []
        self.syncs = 0
        self.violations: list[str] = []
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "an Event without enable_timing cannot be timed"
                self.t = None
                self.done = False

            def record(self, stream=None):
                self.t = time.perf_counter()
                self.done = False
                fake.events.append(self)

            def synchronize(self):
                assert self.t is not None, "synchronize() on an event never recorded"
                self.done = True

            def query(self):
                return self.done

            def elapsed_time(self, end):
                if not (self.done and end.done):
                    raise AssertionError("elapsed_time read before synchronisation (cudaErrorNotReady)")
                return (end.t - self.t) * 1e3

        self.Event = Event

    def synchronize(self, device=None):
        if torch._C._current_autograd_node() is not None:
            self.violations.append("synchronize inside backward (an autograd or DDP hook)")
        if threading.current_thread() is not threading.main_thread():
            self.violations.append("synchronize on another thread (a Future.then callback)")
        self.syncs += 1
        for e in self.events:
            if e.t is not None:
                e.done = True

    def patch(self, monkeypatch):
        import sys

        # the harness the programs import now: another test may have dropped and re-imported the
        # repository's modules (scripts/hooks.py does on import), so it can differ from this file's
        import importlib

        # book_cache.forget_repo_modules (run by cache tests) may have dropped gpu_runs from sys.modules: load
        # the harness now, so that the programs a test imports next get this, patched, module
        seen = [harness, importlib.import_module("gpu_runs.harness")] + [
            getattr(m, "harness", None) for name, m in list(sys.modules.items()) if name.startswith("gpu_runs.")]
        for h in {id(m): m for m in seen if m is not None and hasattr(m, "on_cuda")}.values():
            monkeypatch.setattr(h, "on_cuda", lambda x: True)
        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "synchronize", self.synchronize)
        return self


@pytest.fixture
def fake_cuda(monkeypatch):
    return FakeCuda().patch(monkeypatch)


@pytest.fixture(scope="module")
def world1():
    """A one-process gloo group in this test process (DDP, barriers and collectives run for real)."""
    assert not dist.is_initialized(), "another test left a process group behind"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield harness.Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    dist.destroy_process_group()


# ------------------------------------------------------------------ the detectors fire

def test_fake_refuses_a_region_read_before_synchronisation(fake_cuda):
    a, b = fake_cuda.Event(enable_timing=True), fake_cuda.Event(enable_timing=True)
    a.record()
    b.record()
    with pytest.raises(AssertionError, match="before synchronisation"):
        a.elapsed_time(b)
    torch.cuda.synchronize()
    assert a.elapsed_time(b) >= 0


def test_fake_sees_a_hook_that_synchronises(fake_cuda):
    w = torch.nn.Parameter(torch.ones(3))
    w.register_post_accumulate_grad_hook(lambda p: torch.cuda.synchronize())
    (w * 2).sum().backward()
    assert fake_cuda.violations and "inside backward" in fake_cuda.violations[0]


# ------------------------------------------------------------------ harness.Clock and the timers

def test_clock_marks_never_synchronise_and_reads_are_safe(fake_cuda):
    clock = harness.Clock(torch.device("cuda", 0))
    clock.start()
    assert fake_cuda.syncs == 1  # the fence before the region
    marks = [clock.mark() for _ in range(5)]
    assert fake_cuda.syncs == 1, "mark() must not synchronise"
    assert all(isinstance(m, fake_cuda.Event) for m in marks)
    # read without resolve(): Clock waits for each event itself (the fake would raise otherwise)
    ts = [clock.since_start(m) for m in marks]
    assert ts == sorted(ts) and ts[0] >= 0
    assert clock.seconds(marks[0], marks[-1]) == pytest.approx(ts[-1] - ts[0], abs=1e-9)


def test_time_call_fences_before_and_times_with_events(fake_cuda, world1):
    calls = []

    def fn():
        calls.append(fake_cuda.syncs)
        time.sleep(0.01)

    t = harness.time_call(world1, fn)
    assert calls == [1]                     # one synchronize before the call, none inside
    assert len(fake_cuda.events) == 2       # the reference event and the end event
    assert 0.009 < t < 1.0


def test_time_loop_is_back_to_back(fake_cuda, world1):
    seen = []
    per_call = harness.time_loop(world1, lambda: seen.append(fake_cuda.syncs), 7)
    assert seen == [1] * 7, "no synchronize between back-to-back calls"
    assert len(fake_cuda.events) == 2 and per_call >= 0


def test_collectives_bench_spans_are_back_to_back(fake_cuda, world1):
    import importlib

    # re-executed, so that its `harness` is the module the fake patched (another test may have dropped and
    # re-imported the repository's modules: scripts/hooks.py does on import)
    cb = importlib.reload(importlib.import_module("gpu_runs.collectives_bench"))

    cfg = {**cb.PRESETS["tiny"], "warmup": 1, "spans": 3}
    inp, out, exp, _ = cb.buffers("all_reduce", 256, 1, 0, world1.device)
    launched = []
    real = cb.launch
    with mock.patch.object(cb, "launch", lambda *a: (launched.append(fake_cuda.syncs), real(*a))[1]):
        t = cb.span_times(world1, "all_reduce", inp, out, cfg, calls=4)
    assert len(t) == 3
    # warm-up call, then per span: one fence (synchronize), then 4 calls with none between them
    assert launched == [0] + [1] * 4 + [2] * 4 + [3] * 4
    assert len(fake_cuda.events) == 6       # reference + end event per span


# ------------------------------------------------------------------ DDP hooks (ddp_bench)

def test_ddp_overlap_hooks_only_take_marks(fake_cuda, world1):
    from gpu_runs import ddp_bench

    cfg = ddp_bench.PRESETS["tiny"]
    rec = ddp_bench.overlap(cfg, world1, cfg["overlap_cap"], steps=2)
    assert fake_cuda.violations == []
    names = {k for k, _ in ddp_bench.BucketNet(cfg["d"], cfg["layers"]).named_parameters()}
    assert set(rec["param_ready"]) == names
    assert rec["clock"] == "CUDA events"
    for b in rec["buckets"]:  # every bucket launched after the backward began, completed after its launch
        assert 0 <= b["launch"] <= b["done"] <= rec["backward_end"] + 1e-3
    # a gradient is ready before the bucket that holds it is launched
    for b in rec["buckets"]:
        assert max(rec["param_ready"][p] for p in b["params"]) <= b["launch"] + 1e-6


def test_ddp_local_profile_reads_marks_after_the_step(fake_cuda, world1):
    from gpu_runs import ddp_bench

    cfg = {**ddp_bench.PRESETS["tiny"], "warmup": 1, "iters": 2}
    out = ddp_bench.local_profile(cfg, world1)
    assert fake_cuda.violations == []
    assert fake_cuda.syncs >= 2 * (cfg["warmup"] + cfg["iters"])  # fence and resolve per step, none inside
    assert all(v >= 0 for v in out["param_ready_s"].values())
    assert max(out["param_ready_s"].values()) <= out["backward_s"] + 1e-3


def test_pipeline_recorder_does_not_synchronise_around_a_chunk(fake_cuda):
    from gpu_runs import pipeline_bench as pb

    class Stage:  # the three methods the Recorder wraps
        stage_index = 0

        def forward_one_chunk(self, chunk_id, *a, **k):
            assert fake_cuda.syncs == 1, "a synchronize before a chunk waits for pending send/recv"
            time.sleep(0.002)

        backward_one_chunk = backward_weight_one_chunk = forward_one_chunk

    rec = pb.Recorder([], harness.Clock(torch.device("cuda", 0)))
    st = Stage()
    rec.wrap(st)
    rec.clock.start()
    for mb in range(3):
        st.forward_one_chunk(mb)
    assert fake_cuda.syncs == 1
    events = rec.read()
    assert [e["mb"] for e in events] == [0, 1, 2]
    assert all(e["end"] - e["start"] >= 0.0015 for e in events)
    assert all(a["end"] <= b["start"] for a, b in zip(events, events[1:]))


# ------------------------------------------------------------------ memory peaks

class FakeAllocator:
    """torch.cuda's allocated-bytes counters over a MemTracker: every live tensor storage, all categories."""

    def __init__(self, modules_and_tensors=()):
        from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker

        fake = self

        class _Tracker(MemTracker):
            def _update_peak_stats(self, state):
                super()._update_peak_stats(state)
                fake.peak = max(fake.peak, fake.total())

        self._key = _TOTAL_KEY
        self.tracker = _Tracker()
        if modules_and_tensors:
            self.tracker.track_external(*modules_and_tensors)
        self.peak = 0
        self.resets = 0

    def total(self) -> int:
        return sum(s.get(self._key, 0) for s in self.tracker._curr_mem_snap.values())

    def reset(self, device=None):
        self.resets += 1
        self.peak = self.total()

    def patch(self, monkeypatch):
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", self.reset)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: self.total())
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: max(self.peak, self.total()))
        return self


def test_peak_memory_is_reset_for_each_configuration(fake_cuda, monkeypatch):
    alloc = FakeAllocator().patch(monkeypatch)
    with alloc.tracker:
        with harness.PeakMemory(torch.device("cuda", 0)) as big:
            a = torch.ones(1 << 16)
            b = a * 2
            del a, b
        with harness.PeakMemory(torch.device("cuda", 0)) as small:
            c = torch.ones(1 << 10) * 2
            del c
    assert alloc.resets == 2
    assert big.peak_above_base >= 2 * (1 << 16) * 4
    # the second configuration's peak is its own, not the running maximum of the first one
    assert small.peak_above_base < (1 << 16) * 4


def test_checkpoint_cuda_peak_excludes_parameter_gradients(fake_cuda, monkeypatch):
    """checkpoint_bench's CUDA measurement (allocator counters) equals its CPU measurement (MemTracker's
    ACT + TEMP, which leaves gradients out) mode by mode, within one parameter's transient gradient.
    Without preallocated gradients the CUDA peak includes the gradients backward creates (here up to
    70 KB of 104 KB) and this fails for segments=4, segments=2 and selective."""
    from gpu_runs import checkpoint_bench as cb
    from snippets.common.gpt_block import causal_bias, forward_stack, make_stack
    from snippets.common.saved_tensors import activation_peak_tracker

    cfg, dev = cb.PRESETS["tiny"], torch.device("cpu")

    def setup():
        blocks = make_stack(cfg["layers"], cfg["h"], cfg["a"], device=dev)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(cfg["s"], cfg["b"], cfg["h"], generator=g).to(dev, torch.bfloat16).requires_grad_()
        causal_bias(cfg["s"], torch.bfloat16, dev)
        torch.manual_seed(123)
        return blocks, x

    for name, k, rec in cb.modes(cfg["layers"]):
        blocks, x = setup()
        mt = activation_peak_tracker()
        mt.track_external(blocks, x)
        with mt:
            y = forward_stack(blocks, x, k, rec)
            cpu_after = mt.activation_now()
            y.float().sum().backward()
        blocks, x = setup()
        alloc = FakeAllocator((blocks, x)).patch(monkeypatch)
        with alloc.tracker:
            after, peak = cb.cuda_memory(blocks, x, k, rec, dev)
        one_grad = max(p.numel() * p.element_size() for p in blocks.parameters())
        assert after == cpu_after, name
        assert abs(peak - mt.act_peak) <= one_grad, (name, peak, mt.act_peak)


# ------------------------------------------------------------------ tolerances by dtype

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [16, 256, 4096])
def test_tolerance_bounds_two_summation_orders(dtype, k):
    """Two orders of the same K products (one sum, and t partial sums added: a row-parallel layer)
    differ by less than harness.tolerance's bound × max|value|; a sharding bug (one rank's partial sum
    missing) is far outside it."""
    g = torch.Generator().manual_seed(k)
    a = torch.randn(64, k, generator=g, dtype=torch.float64)
    b = torch.randn(k, 32, generator=g, dtype=torch.float64)
    whole = (a.to(dtype) @ b.to(dtype))
    parts = sum(a[:, i::4].to(dtype) @ b[i::4].to(dtype) for i in range(4))
    tol = harness.tolerance(dtype, k)
    assert tol["eps"] == torch.finfo(dtype).eps and tol["reduction_length"] == k
    scale = float(whole.abs().max())
    assert float((whole - parts).abs().max()) <= tol["rel"] * scale
    assert tol["rel"] == pytest.approx(k * torch.finfo(dtype).eps, rel=1e-3)
    missing = sum(a[:, i::4].to(dtype) @ b[i::4].to(dtype) for i in range(3))
    assert float((whole - missing).abs().max()) > 100 * tol["rel"] * scale


# ------------------------------------------------------------------ strict device check

def test_strict_mode_refuses_host_tensors_in_collectives(world1, monkeypatch):
    """HARNESS_CHECK_DEVICES=1: the collective that would crash under NCCL is refused on gloo too."""
    monkeypatch.setattr(harness, "_checking", threading.local())
    saved = {n: getattr(dist, n) for n in harness.COLLECTIVES if hasattr(dist, n)}
    mode_depth = torch._C._len_torch_function_stack()
    try:
        harness.check_devices(world1)
        ok = torch.zeros(4, device=world1.device) + 1
        dist.all_reduce(ok)
        assert harness.max_over_ranks(world1, [1.0, 2.0]) == [1.0, 2.0]
        model = torch.nn.Linear(3, 3).to(world1.device)
        dist.broadcast(model.weight.data, src=0)                           # moved with .to(env.device)
        for bad in (lambda: torch.tensor([time.perf_counter()], dtype=torch.float64),   # zero_bench:301
                    lambda: torch.tensor([0.5]),                                           # sp_activation:148
                    lambda: ok.cpu() * 2):
            with pytest.raises(harness.DeviceError, match="created without device=env.device"):
                dist.all_reduce(bad())
    finally:
        for n, f in saved.items():
            setattr(dist, n, f)
        while torch._C._len_torch_function_stack() > mode_depth:
            torch._C._pop_torch_function_stack()


# ------------------------------------------------------------------ hardware() on 2 nodes × 8 GPUs

def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return re.sub(r"\s+", " ", line.split(":", 1)[1]).strip()
    raise AssertionError("no model name in /proc/cpuinfo")


HW_KEYS = {"kind", "backend", "world_size", "nnodes", "gpus_per_node", "cpu_model", "cpu_count", "gpu_name",
           "gpu_count", "id"}


def test_hardware_two_nodes_of_eight_gpus(monkeypatch):
    """torchrun on 2 nodes × 8 GPUs, seen from global rank 9 (node 1, local rank 1). The expected block
    is written out here, not computed by harness code."""
    for k, v in {"GROUP_WORLD_SIZE": "2", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1",
                 "RANK": "9", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H200")
    env = harness.Env(rank=9, world_size=16, local_rank=1, device=torch.device("cuda", 1), backend="nccl")
    assert harness.hardware(env) == {
        "kind": "gpu", "backend": "nccl", "world_size": 16, "nnodes": 2, "gpus_per_node": 8,
        "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(), "gpu_name": "NVIDIA H200", "gpu_count": 16,
        "id": "gpu-nccl-2x8-nvidia-h200"}


def test_hardware_cpu_run_on_two_nodes_has_its_own_id(monkeypatch):
    for k, v in {"GROUP_WORLD_SIZE": "2", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    env = harness.Env(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"), backend="gloo")
    hw = harness.hardware(env)
    slug = re.sub(r"[^a-z0-9]+", "-", _cpu_model().lower()).strip("-")
    assert (hw["world_size"], hw["nnodes"], hw["gpus_per_node"], hw["gpu_count"]) == (2, 2, None, 0)
    assert hw["id"] == f"cpu-gloo-2x1proc-{slug}"   # never the one-node file cpu-gloo-2proc-…


def test_gpu_fixtures_hardware_blocks_follow_the_same_rules():
    """The committed synthetic fixtures (tests/gpu_fixtures/make.py, harness.hardware on mocked CUDA):
    the same keys as a real GPU block, and the values the schema and the id rule require."""
    import json

    from snippets import results

    files = sorted((ROOT / "tests" / "gpu_fixtures" / "results").glob("*/*.json"))
    assert files
    for f in files:
        d = json.loads(f.read_text())
        hw = d["hardware"]
        assert set(hw) == HW_KEYS, f"{f}: {set(hw) ^ HW_KEYS}; regenerate: python -m tests.gpu_fixtures.make"
        results.validate(d, f"{f.parent.name}/{f.name}")
        assert (hw["kind"], hw["backend"]) == ("gpu", "nccl"), f
        assert hw["gpu_count"] == hw["world_size"] == hw["nnodes"] * hw["gpus_per_node"], f
        slug = re.sub(r"[^a-z0-9]+", "-", hw["gpu_name"].lower()).strip("-")
        assert hw["id"] == f"gpu-nccl-{hw['nnodes']}x{hw['gpus_per_node']}-{slug}" == f.stem, f
        assert hw["cpu_count"] >= 1 and hw["cpu_model"]

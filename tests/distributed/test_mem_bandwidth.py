"""mem_bandwidth: the tiny preset for real (torchrun, 1 CPU process, gloo), a copy that leaves one byte
wrong fails the run, and the timing of host<->device rows (events per span, a host wall clock closed by
a synchronize) with a fake event clock."""
from __future__ import annotations

import json
import re
import textwrap

import pytest

from snippets import results
from tests.conftest import ROOT, launch

pytestmark = pytest.mark.dist


def test_mem_bandwidth_tiny_on_cpu(run_tiny, monkeypatch):
    from gpu_runs import harness

    monkeypatch.setenv(harness.CHECK_DEVICES_VAR, "1")
    data, took = run_tiny("mem_bandwidth", nproc=1)
    results.validate(data)
    p, m = data["params"], data["measurements"]
    d2d = m["device_to_device"]
    assert d2d["memory"] == "DRAM" and [r["bytes"] for r in d2d["rows"]] == p["d2d_sizes"]
    for r in d2d["rows"]:
        assert r["GBps"] == pytest.approx(r["bytes"] / (r["time_us_median"] * 1e-6) / 1e9)
        assert r["traffic_GBps"] == pytest.approx(2 * r["GBps"])  # read once + written once
    # no CUDA device: host<->device does not apply, and no number stands in for one
    for key in ("host_to_device", "device_to_host"):
        assert m[key] == {"applies": False, "reason": m[key]["reason"]} and "no CUDA device" in m[key]["reason"]
    best = m["best"]
    assert best["device_to_device_GBps"] == max(r["GBps"] for r in d2d["rows"])
    assert all(best[f"{k}_{mem}_GBps"] is None for k in ("host_to_device", "device_to_host")
               for mem in ("pinned", "pageable"))
    assert m["check"]["ok"] and len(m["check"]["copies"]) == len(p["d2d_sizes"])
    assert all(c["equal"] for c in m["check"]["copies"])


CORRUPT = textwrap.dedent('''
    """mem_bandwidth with the last byte of every device-to-device destination wrong after timing."""
    import sys
    sys.path.insert(0, {root!r})
    from gpu_runs import harness, mem_bandwidth as mb

    real = mb.timed_copies

    def short(dst, src, *a, **k):
        out = real(dst, src, *a, **k)
        dst[-1] = src[-1] ^ 1
        return out

    mb.timed_copies = short
    sys.exit(harness.main(mb.PROGRAM, mb.__doc__, mb.PRESETS, mb.measure, script=mb.__file__))
''')


def test_a_copy_that_misses_a_byte_fails_the_run(tmp_path):
    script = tmp_path / "corrupt_mem.py"
    script.write_text(CORRUPT.format(root=str(ROOT)))
    out = tmp_path / "out"
    proc, _ = launch(str(script), 1, ["--preset", "tiny", "--out", out], timeout=120, check=False)
    assert proc.returncode != 0 and re.search(r"exitcode\s*:\s*1\b", proc.stderr), proc.stderr[-2000:]
    [f] = out.glob("*.json")
    c = json.loads(f.read_text())["measurements"]["check"]
    assert c["ok"] is False and not any(x["equal"] for x in c["copies"])


def test_host_rows_time_spans_with_events_and_a_wall_clock(monkeypatch):
    """The GPU path of timed_copies with a fake event clock: the copies of a span are enqueued back to
    back between two marks; the wall clock needs the span finished, so each span is closed by one
    synchronize (and opened by one, so that earlier work is not counted), never one per copy."""
    import torch

    from gpu_runs import mem_bandwidth as mb

    class Ev:
        def __init__(self, t):
            self.t = t

        def synchronize(self):

            pass


        def elapsed_time(self, other):
            return other.t - self.t

    class FakeCuda(mb.harness.Clock):
        def __init__(self):
            self.cuda, self.now, self.syncs = True, 0.0, 0

        def mark(self):
            return Ev(self.now)

        def resolve(self):
            self.syncs += 1

    clock = FakeCuda()
    src, dst = torch.arange(1000, dtype=torch.uint8), torch.zeros(1000, dtype=torch.uint8)
    copies = []
    real_copy = torch.Tensor.copy_

    def counted(self, other, non_blocking=False):
        copies.append(non_blocking)
        clock.now += 0.25  # 0.25 ms a copy on the device's timeline
        return real_copy(self, other)

    monkeypatch.setattr(torch.Tensor, "copy_", counted)
    cfg = {"warmup": 1, "spans": 3, "span_ms": 1.0, "max_iters": 100}
    r = mb.timed_copies(dst, src, cfg, clock, non_blocking=True, wall=True)
    monkeypatch.undo()
    assert r["iters_per_span"] == 4 and len(copies) == 1 + 1 + 3 * 4 and all(copies)
    assert r["time_us_median"] == pytest.approx(250.0) and r["GBps"] == pytest.approx(1000 / 250e-6 / 1e9)
    assert clock.syncs == 1 + 2 * 3 + 1  # probe; open and close each span; the final read
    assert "wall_us_median" in r and torch.equal(dst, src)

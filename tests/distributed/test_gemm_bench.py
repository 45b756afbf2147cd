"""gemm_bench: the tiny preset for real (torchrun, 2 CPU processes, gloo: every rank measures, rank 0
records), a product corrupted on one rank fails the run, and the GPU timing path (events, one
synchronize after the spans) with a fake event clock."""
from __future__ import annotations

import json
import re
import textwrap

import pytest

from snippets import results
from tests.conftest import ROOT, launch

pytestmark = pytest.mark.dist

ROW_KEYS = {"family", "h", "t", "tokens", "m", "n", "k", "dtype", "time_us_median", "tflops"}


def expected_shape(family: str, h: int, t: int, tokens: int) -> tuple[int, int, int]:
    """The brief's shard shapes, written out again here: (m, n, k) of [m × k] @ [k × n]."""
    return {"mlp_up": (tokens, 4 * h // t, h), "mlp_down": (tokens, h, 4 * h // t),
            "qkv": (tokens, 3 * h // t, h), "attn_out": (tokens, h, h // t), "square": (h, h, h)}[family]


def test_gemm_bench_tiny(run_tiny, monkeypatch):
    from gpu_runs import harness

    monkeypatch.setenv(harness.CHECK_DEVICES_VAR, "1")  # every collective's tensor must live on env.device
    data, took = run_tiny("gemm_bench", nproc=2)
    results.validate(data)
    assert data["hardware"]["world_size"] == 2 and data["hardware"]["kind"] == "cpu"
    p, m = data["params"], data["measurements"]
    assert {"dtype", "hs", "ts", "tokens"} <= set(p) and p["dtype"] == "float32"
    assert set(m["peak"]) == {"m", "n", "k", "dtype", "time_us_median", "tflops"}
    sweep = m["sweep"]
    want = {("square", h, 1) for h in p["hs"]} | {(f, h, t) for f in ("mlp_up", "mlp_down", "qkv", "attn_out")
                                                  for h in p["hs"] for t in p["ts"]}
    assert {(r["family"], r["h"], r["t"]) for r in sweep} == want and len(sweep) == len(want)
    for r in sweep:
        assert set(r) == ROW_KEYS, r
        assert (r["m"], r["n"], r["k"]) == expected_shape(r["family"], r["h"], r["t"], p["tokens"]), r
        assert r["tokens"] == r["m"] and r["dtype"] == "float32"
        assert r["tflops"] == pytest.approx(2 * r["m"] * r["n"] * r["k"] / (r["time_us_median"] * 1e-6) / 1e12)
    # the peak is the fastest of the large squares it tried, and it is one of them
    assert m["peak"]["m"] == m["peak"]["n"] == m["peak"]["k"] and m["peak"]["m"] in p["peak_sizes"]
    assert m["peak"]["tflops"] == pytest.approx(2 * m["peak"]["m"] ** 3 / (m["peak"]["time_us_median"] * 1e-6) / 1e12)
    c = m["check"]
    assert c["ok"] and len(c["peak_tflops_by_rank"]) == 2
    assert {s["family"] for s in c["small_vs_float64"]} == {"mlp_up", "mlp_down", "qkv", "attn_out", "square"}
    assert all(s["ok"] and s["rel_err"] < 1e-5 for s in c["small_vs_float64"])  # float32 against float64
    assert len(c["timed"]) == len(sweep) + len(p["peak_sizes"]) and all(t["all_written"] for t in c["timed"])


CORRUPT = textwrap.dedent('''
    """gemm_bench with every torch.mm on rank 1 off by one in one element."""
    import sys
    sys.path.insert(0, {root!r})
    import torch
    import torch.distributed as dist
    from gpu_runs import gemm_bench as gb, harness

    real = torch.mm

    def wrong(a, b, out=None):
        res = real(a, b, out=out) if out is not None else real(a, b)
        if dist.get_rank() == 1:
            res.view(-1)[0] += 1.0
        return res

    torch.mm = wrong
    sys.exit(harness.main(gb.PROGRAM, gb.__doc__, gb.PRESETS, gb.measure, script=gb.__file__))
''')


def test_a_wrong_product_on_one_rank_fails_the_run(tmp_path):
    script = tmp_path / "corrupt_gemm.py"
    script.write_text(CORRUPT.format(root=str(ROOT)))
    out = tmp_path / "out"
    proc, _ = launch(str(script), 2, ["--preset", "tiny", "--out", out], timeout=120, check=False)
    assert proc.returncode != 0 and re.search(r"exitcode\s*:\s*1\b", proc.stderr), proc.stderr[-2000:]
    [f] = out.glob("*.json")
    c = json.loads(f.read_text())["measurements"]["check"]
    assert c["ok"] is False
    # rank 0 computed correctly: its own checks pass; the all-reduced flag carries rank 1's failure
    assert all(s["ok"] for s in c["small_vs_float64"])


def test_gpu_timing_path_uses_events_and_one_synchronize(monkeypatch):
    """On CUDA the spans are enqueued back to back and read after a single synchronize: with a fake
    event clock (mark = an object, resolve = a counted synchronize) the probe and the spans resolve
    twice in all, and every span's interval is (end - start) / calls."""
    from gpu_runs import gemm_bench as gb

    class Ev:
        def __init__(self, t):
            self.t = t

        def synchronize(self):

            pass


        def elapsed_time(self, other):
            return (other.t - self.t) * 1.0

    class FakeCuda(gb.harness.Clock):
        def __init__(self):
            self.cuda, self.now, self.syncs, self.calls_at_sync = True, 0.0, 0, []

        def mark(self):
            return Ev(self.now)

        def resolve(self):
            self.syncs += 1

    clock = FakeCuda()
    calls = []

    def fn():  # every call "takes" 0.5 ms on the device
        calls.append(1)
        clock.now += 0.5

    per, iters, _ = gb.harness.span_times_ms(fn, clock, warmup=2, spans=4, span_ms=3.0, max_iters=100)
    assert clock.syncs == 2  # after the probe, and once after all spans
    assert iters == 6 and per == [0.5] * 4 and len(calls) == 2 + 1 + 4 * 6

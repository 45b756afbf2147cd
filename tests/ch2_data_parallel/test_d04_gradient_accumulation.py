"""Ch2-04 Gradient Accumulation 과 no_sync: each test asserts a claim the page makes."""
import inspect
import math
import time

import numpy as np
import pytest

from snippets.ch2_data_parallel import d04_gradient_accumulation as page
from snippets import results
from tests.conftest import ROOT, cell_budget


def _runs():
    """The committed CPU results, by world size: the page's prose reads these (GPU tabs: tests below)."""
    runs = {r.hardware["world_size"]: r for r in results.load(page.PROGRAM, kind="cpu")}
    assert {2, 4} <= set(runs)
    return runs


def test_no_sync_only_disarms_the_reducer_in_installed_torch():
    """Definition 2.4.2, read from the installed source: no_sync flips require_backward_grad_sync; the
    forward arms the Reducer and schedules the next buffer broadcast only when it is true."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    src = inspect.getsource(DDP.no_sync)
    assert "self.require_backward_grad_sync = False" in src
    pre = inspect.getsource(DDP._pre_forward)
    assert "if torch.is_grad_enabled() and self.require_backward_grad_sync:" in pre
    assert "self.reducer.prepare_for_forward()" in pre and "self._sync_buffers()" in pre
    post = inspect.getsource(DDP._post_forward)
    assert "self.require_forward_param_sync = True" in post and "self.require_forward_param_sync = False" in post
    assert "self.require_forward_param_sync" in inspect.getsource(DDP.will_sync_module_buffers)


def test_committed_allreduce_counts_equal_theorem_244():
    """Experiment 1: per micro-batch calls (0,…,0,K) vs (K,…,K), initial layout until the first synced
    backward; step bytes S vs M·S; the same at N = 2 and N = 4."""
    for n, run in _runs().items():
        m, p = run.measurements, run.params
        k0 = len(m["counts"]["no_sync"][0][-1]["bucket_bytes"])
        k = len(page.steady_buckets(run))
        assert k0 == 1 and k >= 2  # the page's reading: one initial bucket, several after the rebuild
        assert sum(page.steady_buckets(run)) == m["param_bytes"]
        for mode in ("no_sync", "sync_every"):
            pred = page.predicted_schedule(p["M"], len(m["counts"][mode]), k0, k, mode == "no_sync")
            for step, mbs in enumerate(m["counts"][mode]):
                assert [x["allreduce_calls"] for x in mbs] == pred[step]
                total = sum(x["bytes"] for x in mbs)
                assert total == (1 if mode == "no_sync" else p["M"]) * m["param_bytes"]
        assert m["counts"]["no_sync"][1] and [x["allreduce_calls"] for x in m["counts"]["no_sync"][1]] == [0] * (p["M"] - 1) + [k]


def test_ring_bytes_match_ch1_simulator():
    """Experiment 3's traffic column: Ch1-03's ring simulator sends 2(N−1)/N·S per rank; M× without no_sync."""
    from snippets.ch1_collective.d03_ring_allreduce import bytes_sweep

    for row in bytes_sweep((2, 4, 8), elems_per_rank=6):
        assert page.ring_bytes_per_rank(row["N"], row["S"]) == row["sent_max"]
    # the M× without no_sync is checked against the committed byte counts in test_committed_allreduce_counts_equal_theorem_244


def test_committed_gradients_equal_the_global_batch_gradient():
    """Experiment 2 / Theorem 2.4.3: scale 1/M gives the global-batch gradient (float32 rounding) without
    BN or with LayerNorm; no scale gives M times it; BN differs; ranks agree bit for bit."""
    for n, run in _runs().items():
        m, M = run.measurements, run.params["M"]
        for e in m["equality"]:
            assert e["ranks_bitwise_equal"]
            if e["norm"] in ("none", "layernorm"):
                if e["loss_divided_by_M"]:
                    assert e["max_rel_diff_vs_global"] < 1e-5 and abs(e["norm_ratio"] - 1) < 1e-5
                else:
                    assert abs(e["norm_ratio"] - M) < 1e-4 * M
            elif e["loss_divided_by_M"]:
                assert e["max_rel_diff_vs_global"] > 1e-2  # BN couples samples of a micro-batch
        assert m["no_sync_vs_sync_every_max_rel"] < 1e-5


def test_committed_bn_buffers_broadcast_once_per_cycle():
    """Experiment 5 / Theorem 2.4.5: [1, 0, …, 0] per cycle; ranks diverge inside a cycle and agree after."""
    for n, run in _runs().items():
        s = page.bn_summary(run)
        assert s["broadcasts"] == [[1] + [0] * (run.params["M"] - 1)] * len(s["broadcasts"])
        assert s["broadcasts_in_extra_forward_without_grad"] == 1
        assert s["rank_spread_end_of_cycle"] > 0 and s["rank_spread_after_broadcast"] == 0
        assert s["rank0_vs_global_batch_running_mean"] > 0


def test_layernorm_has_no_running_statistics():
    """⚖️ (ERRATA 10): nn.LayerNorm has no buffers; nn.BatchNorm1d has running_mean/var."""
    import torch.nn as nn

    assert list(nn.LayerNorm(8).buffers()) == []
    assert {name for name, _ in nn.BatchNorm1d(8).named_buffers()} >= {"running_mean", "running_var"}


def test_activation_bytes_scale_with_micro_batch_and_grads_do_not():
    """Experiment 3: saved activation bytes = b·(4(d+2h+C)+8) + one 4-byte scalar; grad bytes fixed; < 1 s."""
    page.memory_rows(per_rank=8, ms=(1,))  # warm up torch's first call
    t0 = time.perf_counter()
    rows = page.memory_rows(per_rank=32, ms=(1, 2, 4, 8))
    assert time.perf_counter() - t0 < cell_budget()
    assert {r["activation_bytes"] - r["formula_bytes"] for r in rows} == {4}
    assert len({r["grad_bytes"] for r in rows}) == 1
    psi = 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert rows[0]["grad_bytes"] == 4 * psi
    base = rows[0]["activation_bytes"] - 4
    for r in rows:
        assert (r["activation_bytes"] - 4) * r["M"] == base


def test_committed_step_times_follow_the_prediction_in_trend():
    """Experiment 4, from the results file itself: the (M−1) factor of the prediction is the number of extra
    all-reduce rounds the program *counted* (experiment 1's committed counts, not the formula), and at the
    largest M syncing every micro-batch was measured slower than no_sync (the page's sentence)."""
    run = _runs()[2]
    m = run.measurements
    k = len(page.steady_buckets(run))
    M = run.params["M"]
    steady = lambda mode: sum(x["allreduce_calls"] for x in m["counts"][mode][-1])  # noqa: E731
    assert steady("sync_every") - steady("no_sync") == (M - 1) * k  # measured extra rounds: (M−1)·k
    rows, alpha, beta = page.time_rows(run)
    assert alpha > 0 and beta >= 0
    steps = {(r["M"], r["mode"]): r["median_step_s"] for r in m["timing"]["steps"]}
    big = max(x for x, _ in steps)
    assert big >= 8 and steps[(big, "sync_every")] > steps[(big, "no_sync")]
    assert "<svg" in page.time_figure(run)


def test_exercise_2_alpha_term_dominates_for_large_n():
    """Problem 2 against Ch1-03's ring simulator (its step count and bytes sent, not the formula): the α part of
    ΔT grows like its 2(N−1) steps and its share rises; the bytes part saturates at 2S."""
    from snippets.ch1_collective.d03_ring_allreduce import bytes_sweep

    run = _runs()[2]
    alpha, beta = page.fit_link(run)
    buckets = page.steady_buckets(run)
    shares, bytes_part = [], []
    for row in bytes_sweep((2, 8, 64, 256), elems_per_rank=1):
        n = row["N"]
        a_part = 7 * len(buckets) * row["steps"] * alpha
        b_part = 7 * sum(row["sent_max"] / row["S"] * s for s in buckets) * beta
        assert page.predicted_extra_seconds(n, buckets, 8, alpha, beta) == pytest.approx(a_part + b_part)
        shares.append(a_part / (a_part + b_part))
        bytes_part.append(b_part)
    assert np.all(np.diff(shares) > 0) and shares[-1] > 0.9
    assert bytes_part[-1] < 2 * 7 * sum(buckets) * beta and bytes_part[-1] / bytes_part[-2] < 1.02


def test_exercise_1_counts():
    """Problem 1: M = B/(N·b) = 8; calls per step k vs M·k as the program counted them; bytes per rank from
    Ch1-03's ring simulator's ratio sent/S at N = 8 (0.7 GB for 0.4 GB, M times that without no_sync)."""
    from snippets.ch1_collective.d03_ring_allreduce import bytes_sweep

    run = _runs()[2]
    m, M_run = run.measurements, run.params["M"]
    calls = {mode: sum(x["allreduce_calls"] for x in m["counts"][mode][-1]) for mode in ("no_sync", "sync_every")}
    assert calls["sync_every"] == M_run * calls["no_sync"]  # measured: M times as many calls
    M = 1024 // (8 * 16)
    assert sum(page.predicted_calls(M, 5, True)) * M == sum(page.predicted_calls(M, 5, False)) == 40
    row = bytes_sweep((8,), elems_per_rank=3)[0]
    assert math.isclose(page.traffic_per_step(8, 4e8, M, True), row["sent_max"] / row["S"] * 4e8)
    assert math.isclose(page.traffic_per_step(8, 4e8, M, False), M * row["sent_max"] / row["S"] * 4e8)


def test_ddp_accumulation_tiny_preset_for_real(run_tiny):
    """The program itself (2 gloo processes, tiny preset, < 30 s): the real DDP obeys Theorems 2.4.3–2.4.5."""
    from snippets import results

    data, took = run_tiny("ddp_accumulation", nproc=2, timeout=120)
    results.validate(data)
    m, p = data["measurements"], data["params"]
    k0 = len(m["counts"]["no_sync"][0][-1]["bucket_bytes"])
    k = len(m["counts"]["no_sync"][-1][-1]["bucket_bytes"])
    for mode in ("no_sync", "sync_every"):
        pred = page.predicted_schedule(p["M"], p["steps"], k0, k, mode == "no_sync")
        assert [[x["allreduce_calls"] for x in s] for s in m["counts"][mode]] == pred
    ok = [e for e in m["equality"] if e["norm"] == "none" and e["loss_divided_by_M"]]
    assert ok and all(e["max_rel_diff_vs_global"] < 1e-5 for e in ok)
    assert [[x["buffer_broadcasts"] for x in c] for c in m["bn"]["per_cycle"]] == [[1] + [0] * (p["M"] - 1)] * 2


def test_accumulation_pattern_wraps_forward_and_scales_loss():
    """🔗 the standard pattern: forward and backward of the first M−1 micro-batches run inside no_sync, the last
    outside; each loss is divided by M; one optimizer step."""
    import contextlib

    import torch

    log = []

    class FakeDDP:
        inside = False

        @contextlib.contextmanager
        def no_sync(self):
            self.inside = True
            yield
            self.inside = False

        def __call__(self, x):
            log.append(("forward", self.inside))
            return x

    class Opt:
        steps = 0

        def step(self):
            self.steps += 1

        def zero_grad(self):
            pass

    x = torch.ones(3, requires_grad=True)
    opt = Opt()
    page.accumulation_step(FakeDDP(), opt, lambda out, y: out.sum(), [(x, None)] * 4)
    assert log == [("forward", True)] * 3 + [("forward", False)]
    assert torch.allclose(x.grad, torch.ones(3))  # 4 micro-batches × (1/4)
    assert opt.steps == 1


GPU_FILES = sorted((ROOT / "tests" / "gpu_fixtures" / "results" / "ddp_accumulation").glob("gpu-*.json"))


def test_gpu_tabs_on_the_fixtures():
    """The GPU tabs: counts of every GPU file checked against Theorem 2.4.4, the time table predicted
    from that file's own fit (α recomputed here from its JSON), and a hardware without timing says so."""
    import json

    (plat,) = results.platforms([results.read(f) for f in GPU_FILES])
    md = page.counts_tab(plat)
    for r in plat.runs:
        rows, _, _ = page.count_rows(r)
        assert f"**N = {r.hardware['world_size']} GPUs**" in md
    assert md.count(f"측정 = 예측인 (모드, step): {len(rows)} / {len(rows)}") == len(plat.runs)
    timed = [json.loads(f.read_text()) for f in GPU_FILES]
    timed = [d for d in timed if d["measurements"].get("timing")]
    d = timed[0]
    n = d["hardware"]["world_size"]
    pts = d["measurements"]["timing"]["allreduce"]
    s = np.array([p["bytes"] for p in pts], float)
    t = np.array([p["median_s"] for p in pts])
    a = np.column_stack([np.full_like(s, 2 * (n - 1)), 2 * (n - 1) / n * s]) / t[:, None]
    alpha, beta = np.linalg.solve(a.T @ a, a.T @ np.ones_like(t))
    tm = page.time_tab(plat)
    assert f"**N = {n} GPUs, nccl** — fit: α = {max(alpha, 0) * 1e6:.3g} µs" in tm and "GPU)" in tm
    no_timing = [r for r in plat.runs if not r.measurements.get("timing")]
    (bare,) = results.platforms(no_timing)
    assert "시간을 잰 결과 (timing) 가 없습니다" in page.time_tab(bare)
    assert "시간을 잰 결과 (timing) 가 없습니다" in page.extrapolation_tab(bare)

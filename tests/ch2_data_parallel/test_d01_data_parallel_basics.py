"""Ch2-01 Data Parallelism 의 기본: each test asserts a claim the page makes."""
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

from snippets import results
from snippets.ch2_data_parallel import d01_data_parallel_basics as page
from tests.conftest import ROOT, cell_budget


def _autograd_lsq_grad(w, x, y):
    """An independent route: torch autograd of the same loss, float64."""
    wt = torch.tensor(w, requires_grad=True)
    loss = 0.5 * ((torch.tensor(x) @ wt - torch.tensor(y)) ** 2).mean()
    loss.backward()
    return wt.grad.numpy()


def test_closed_form_gradient_equals_autograd():
    rng = np.random.default_rng(3)
    x, y, w = rng.standard_normal((20, 4)), rng.standard_normal(20), rng.standard_normal(4)
    np.testing.assert_allclose(page.lsq_grad(w, x, y), _autograd_lsq_grad(w, x, y), rtol=1e-12, atol=1e-14)


def test_identity_theorem_213_and_unequal_shards_theorem_214():
    """Experiment 1: equal shards and b_r/B weights agree to float64 rounding; the plain mean of unequal ones does not."""
    rows = {r["case"]: r for r in page.identity_rows()}
    for case, r in rows.items():
        if "1/N" in case:
            assert r["max_abs_diff"] > 1e-2 * r["norm"]
        else:
            assert r["max_abs_diff"] < 1e-14
    # theorem 2.1.4: the per-sample weight of the plain mean is 1/(N b_r), i.e. B/(N b_r) times too much
    rng = np.random.default_rng(0)
    x, y, w = rng.standard_normal((96, 5)), rng.standard_normal(96), rng.standard_normal(5)
    sizes = [64, 16, 16]
    plain = page.dp_gradient(w, x, y, sizes)
    coef = np.concatenate([np.full(b, 1 / (3 * b)) for b in sizes])
    np.testing.assert_allclose(plain, x.T @ (coef * (x @ w - y)), rtol=1e-12)


def test_fp_difference_scales_with_epsilon_theorem_215():
    """Experiment 2: not bitwise equal in either dtype; the relative gap is a few ε in both."""
    rows = [page.ddp_order_vs_global(dt) for dt in (torch.float32, torch.float64)]
    for r in rows:
        assert not r["bitwise_equal"] and r["max_abs_diff"] > 0
        assert 1e-2 < r["rel"] / r["eps"] < 1e2
    assert rows[1]["max_abs_diff"] < 1e-6 * rows[0]["max_abs_diff"]


def test_real_ddp_results_experiment_3():
    """Experiment 3: losses agree to < 1e-6, parameters differ (growing count) but ranks are bitwise equal."""
    runs = {r.hardware["world_size"]: r for r in results.load(page.PROGRAM, kind="cpu")}  # the prose reads these
    assert {2, 4} <= set(runs)
    for n, run in runs.items():
        eq = run.measurements["equivalence"]
        rows = eq["rows"]
        assert len(rows) >= 5 and eq["cfg"]["b"] == 16 and eq["lr"] == 0.1
        assert all(abs(r["ddp_loss"] - r["ref_loss"]) < 1e-6 for r in rows)
        assert all(0 < r["max_abs_param_diff"] < 1e-6 for r in rows)
        assert all(r["ranks_bitwise_equal"] for r in rows)
        assert not any(r["bitwise_equal_to_reference"] for r in rows)
        counts = [r["params_differing"] for r in rows]
        assert all(a < b for a, b in zip(counts, counts[1:]))
        # the reference really is the global-batch SGD: recompute its first loss here, independently
        torch.manual_seed(0)
        import importlib.util
        import sys
        from pathlib import Path

        spec = importlib.util.spec_from_file_location("ddp_bench", Path(__file__).parents[2] / "gpu_runs" / "ddp_bench.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules.setdefault("ddp_bench_for_test", mod)
        spec.loader.exec_module(mod)
        torch.manual_seed(0)
        ref = mod.Mlp(eq["cfg"]["d"])
        x, y = mod.eq_data(eq["cfg"], n, 0)
        assert float(torch.nn.functional.mse_loss(ref(x), y)) == pytest.approx(rows[0]["ref_loss"], rel=1e-6)
        assert eq["psi"] == sum(p.numel() for p in ref.parameters())


def test_replication_memory_experiment_4():
    """Experiment 4 against independent sources: ZeRO's published baseline (Rajbhandari et al. 2020, Figure 1:
    a 7.5B model under plain DP needs 120 GB per device, K = 12) and the installed torch's own DDP, whose flat
    buckets (default gradient_as_bucket_view=False) are a second, separate copy of every gradient, same dtype."""
    assert page.replication_rows(7.5e9)[0]["per_rank"] == pytest.approx(120e9)
    rows = page.replication_rows(7e9)
    assert len({r["per_rank"] for r in rows}) == 1 and rows[0]["per_rank"] > 80e9  # does not fit an 80 GB GPU
    # real DDP, one gloo process: the bucket buffers a comm hook receives
    assert not dist.is_initialized(), "another test left a process group behind"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)).to(torch.bfloat16)
        ddp = torch.nn.parallel.DistributedDataParallel(model)  # defaults: gradient_as_bucket_view=False
        seen = []

        def hook(state, bucket):
            buf = bucket.buffer()
            seen.append((buf.numel(), buf.dtype, buf.untyped_storage().data_ptr()))
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut

        ddp.register_comm_hook(None, hook)
        for _ in range(2):  # iteration 1 uses the rebuilt buckets
            seen.clear()
            ddp(torch.randn(4, 64, dtype=torch.bfloat16)).sum().backward()
        psi = sum(q.numel() for q in model.parameters())
        last = seen
        assert sum(x[0] for x in last) == psi and {x[1] for x in last} == {torch.bfloat16}
        grad_storages = {q.grad.untyped_storage().data_ptr() for q in model.parameters()}
        assert not grad_storages & {x[2] for x in last}  # a separate copy, not the gradients themselves
        elem = torch.empty(0, dtype=torch.bfloat16).element_size()
        assert rows[0]["ddp_bucket"] == elem * 7e9  # the page's extra column: one more gradient's worth of bytes
    finally:
        dist.destroy_process_group()


def test_solution_1_sum_reduction_scales_by_b():
    """Problem 1 by torch autograd (not the page's lsq_grad): 4 ranks × 32 samples, reduction="sum", DDP's mean
    over ranks = 32 × the global mean-loss gradient."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(128, 5, generator=g, dtype=torch.float64), torch.randn(128, generator=g, dtype=torch.float64)
    w = torch.randn(5, generator=g, dtype=torch.float64)

    def grad(xs, ys, reduction):
        v = w.clone().requires_grad_()
        torch.nn.functional.mse_loss(xs @ v, ys, reduction=reduction).backward()
        return v.grad

    ranks = [grad(x[r * 32:(r + 1) * 32], y[r * 32:(r + 1) * 32], "sum") for r in range(4)]
    torch.testing.assert_close(sum(ranks) / 4, 32 * grad(x, y, "mean"), rtol=1e-12, atol=1e-12)


def test_cells_are_fast():
    t0 = time.perf_counter()
    page.identity_rows()
    assert time.perf_counter() - t0 < cell_budget()
    t0 = time.perf_counter()
    for dt in (torch.float32, torch.float64):
        page.ddp_order_vs_global(dt)
    assert time.perf_counter() - t0 < cell_budget()


def test_equivalence_tab_on_the_gpu_fixture():
    """Experiment 3's GPU tab: unit GPUs, every world size of the fixture, and the |Δloss| reading
    recomputed here from the file's JSON."""
    import json

    files = sorted((ROOT / "tests" / "gpu_fixtures" / "results" / "ddp_bench").glob("gpu-*.json"))
    (plat,) = results.platforms([results.read(f) for f in files])
    md = page.equivalence_tab(plat)
    assert "processes" not in md
    for f in files:
        d = json.loads(f.read_text())
        n = d["hardware"]["world_size"]
        rows = d["measurements"]["equivalence"]["rows"]
        dloss = max(abs(r["ddp_loss"] - r["ref_loss"]) for r in rows)
        assert f"**N = {n} GPUs, nccl**: |Δloss| 의 최댓값 {dloss:.1e}" in md
        assert f"rank 끼리 bit 단위로 같은 step: {len(rows)} / {len(rows)} (모든 step)" in md

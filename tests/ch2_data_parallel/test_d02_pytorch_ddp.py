"""Ch2-02 PyTorch DDP: each test asserts a claim the page makes."""
import inspect
import json
import math

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from snippets import results
from snippets.ch2_data_parallel import d02_pytorch_ddp as page
from tests.conftest import ROOT


def _runs():
    """The committed CPU results, by world size: the page's prose reads these (GPU tabs: tests below)."""
    runs = {r.hardware["world_size"]: r for r in results.load(page.PROGRAM, kind="cpu")}
    assert {2, 4} <= set(runs)
    return runs


def _gpu_platform():
    """The GPU fixtures, with what the program writes only on CUDA (tests/gpu_fixtures/augment/ddp_bench.py)."""
    from tests.gpu_fixtures.augment.ddp_bench import augment

    runs = []
    for f in sorted((ROOT / "tests" / "gpu_fixtures" / "results" / "ddp_bench").glob("gpu-*.json")):
        d = json.loads(f.read_text())
        augment(d)
        runs.append(results.Result(f, d))
    (plat,) = results.platforms(runs)
    return plat


def test_construction_broadcast_theorem_224():
    """Experiment 1: different seeds before; after DDP(m) every rank equals rank 0's pre-wrap state; init_sync=False keeps them apart."""
    for n, run in _runs().items():
        s = page.construction_summary(run)
        assert s["distinct_before"] == n and s["distinct_after"] == 1 and s["after_is_rank0"]
        assert s["distinct_init_sync_false"] == n


def test_installed_source_matches_definitions():
    """Definitions 2.2.1–2.2.2 name these calls; read them in the installed torch."""
    from torch.nn.parallel import distributed as ddp_mod

    init = inspect.getsource(ddp_mod.DistributedDataParallel.__init__)
    assert "_sync_module_states(" in init and "src=0" in init and "_verify_param_shape_across_processes" in init
    assert "250 * 1024 * 1024" in init
    pre = inspect.getsource(ddp_mod.DistributedDataParallel._pre_forward)
    assert "_sync_buffers()" in pre
    sync = inspect.getsource(ddp_mod.DistributedDataParallel._sync_buffers)
    assert "authoritative_rank = 0" in sync
    assert "forward_sync_buffers" in inspect.signature(ddp_mod.DistributedDataParallel.__init__).parameters
    bn = inspect.getsource(torch.nn.SyncBatchNorm.forward)
    assert '"cuda"' in bn and "SyncBatchNorm expected input tensor to be on GPU" in bn
    # theorem 2.2.6 (c): SyncBatchNorm gathers per-rank (mean, invstd, count); it does not all-reduce Σx, Σx²
    from torch.nn.modules import _functions

    fwd = inspect.getsource(_functions.SyncBatchNorm.forward)
    assert "dist.all_gather(" in fwd and "batch_norm_gather_stats_with_counts" in fwd
    assert "all_reduce" not in fwd


def test_forward_buffer_sync_experiment_2():
    """Theorem 2.2.6 (b): with forward_sync_buffers the start of every forward equals rank 0's previous value."""
    for n, run in _runs().items():
        by = {b["forward_sync_buffers"]: b["rows"] for b in run.measurements["buffers"]}
        assert all(r["equal_at_start"] and not r["equal_after"] for r in by[True])
        assert by[False][0]["equal_at_start"] and not any(r["equal_at_start"] for r in by[False][1:])
        assert page.rank0_propagates(run)
        # without sync each rank keeps its own EMA: forward t+1 starts where the same rank ended forward t
        rows = by[False]
        assert all(rows[t + 1]["at_forward_start"] == rows[t]["after_forward"] for t in range(len(rows) - 1))


def _independent_sampler(d, n, r, drop_last, order):
    """A second, NumPy route to definition 2.2.3 (np.resize repeats from the front)."""
    c = d // n if drop_last else -(-d // n)
    return np.resize(np.array(order), n * c)[r::n].tolist() if c else []


@pytest.mark.parametrize("d,n", [(12, 4), (10, 4), (10, 3), (3, 4), (7, 7), (50_000, 64), (1, 2), (13, 5)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_formula_equals_torch_theorem_225(d, n, drop_last):
    shards = page.torch_shards(d, n, drop_last=drop_last)
    for r in range(n):
        assert shards[r] == page.sampler_formula(d, n, r, drop_last, list(range(d))) == \
            _independent_sampler(d, n, r, drop_last, list(range(d)))
    c = len(shards[0])
    assert all(len(s) == c for s in shards)
    counts = np.bincount(np.concatenate(shards).astype(int), minlength=d) if c else np.zeros(d, int)
    if drop_last:
        assert c == d // n and counts.max(initial=0) <= 1 and (counts == 0).sum() == d - n * c == d % n
    else:
        assert c == math.ceil(d / n)
        if d % n == 0:
            assert (counts == 1).all()
        elif d >= n:
            assert (counts >= 1).all() and (counts == 2).sum() == n * c - d <= n - 1


def test_sampler_shuffled_shards_are_disjoint_and_set_epoch_reshuffles():
    """Theorem 2.2.5 (a), (d): shuffled shards still partition; the order changes only through set_epoch."""
    for epoch in (0, 1, 5):
        shards = page.torch_shards(24, 4, shuffle=True, epoch=epoch)
        assert sorted(sum(shards, [])) == list(range(24))
    rows = {r["set_epoch"]: r for r in page.epoch_rows()}
    assert rows[False]["distinct"] == 1 and rows[True]["distinct"] == 3
    s = DistributedSampler(range(8), num_replicas=2, rank=0, shuffle=True, seed=0)
    s.set_epoch(2)
    g = torch.Generator().manual_seed(0 + 2)
    assert list(s) == torch.randperm(8, generator=g).tolist()[0::2]


def test_norm_layers_and_syncbn_statistics_theorem_226():
    """Experiment 4: LN/GN have no buffers; the all-reduced statistics equal BN on the concatenated batch."""
    rows = {r[0]: r for r in page.norm_buffers()}
    assert rows["`LayerNorm`"][1] == "없음" and "running_mean" in rows["`BatchNorm1d`"][1]
    assert list(torch.nn.LayerNorm(4).buffers()) == []
    c = page.syncbn_check()
    assert c["mean_err"] < 1e-12 and c["var_err"] < 1e-12 and c["biased_var_err"] < 1e-12
    assert c["local_vs_global"] > 0.5
    for n, run in _runs().items():
        s = page.batch_stats_row(run)
        assert s["global_mean0"] == pytest.approx(np.mean(s["local_mean0"]), rel=1e-5)  # equal b_r: plain mean of means
        assert s["max_local_vs_global"] > 0.5
        assert s["syncbn_runs"] is False and "GPU" in s["syncbn_error"]  # CPU results


def test_solution_1():
    d, n = 50_000, 64
    last = list(DistributedSampler(range(d), num_replicas=n, rank=n - 1, shuffle=False))
    assert len(last) == 782 and 64 * 782 - d == 48
    assert len(list(DistributedSampler(range(d), num_replicas=n, rank=0, shuffle=False, drop_last=True))) == 781


def test_syncbn_gathered_combination_with_unequal_counts():
    """Theorem 2.2.6 (c): per-rank (mean, var, count) combine to the concatenated batch's stats, also for unequal b_r."""
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(b, 3, generator=g, dtype=torch.float64) + r for r, b in enumerate((2, 7, 16))]
    mean, var = page.global_batch_stats(xs)
    cat = torch.cat(xs)
    assert torch.allclose(mean, cat.mean(0), rtol=0, atol=1e-12)
    assert torch.allclose(var, cat.var(0, unbiased=False), rtol=0, atol=1e-12)
    plain = sum(x.mean(0) for x in xs) / len(xs)  # the unweighted mean of means is not the global mean
    assert (plain - cat.mean(0)).abs().max() > 0.1


def test_gpu_tabs_read_the_gpu_files():
    """The GPU tabs: construction digests of that file (rank 0's pre-wrap digest everywhere after
    wrapping), and SyncBatchNorm reported as run on the GPU with its running-mean check."""
    plat = _gpu_platform()
    md = page.construction_tab(plat)
    for r in plat.runs:
        c = r.data["measurements"]["construction"]
        n = r.hardware["world_size"]
        assert f"$N={n}$ GPUs: 서로 다른 상태의 수 — 감싸기 전 {len(set(c['before']))}" in md
        assert md.count(f"`{c['before'][0]}`") >= n + 1     # rank 0's digest before, and every rank's after
    bs = page.batch_stats_tab(plat)
    assert "GPU 에서 `nn.SyncBatchNorm` 실행: **True**" in bs and "global 통계로 갱신한 값과 같음: **True**" in bs
    assert "processes" not in bs and "CPU 에서" not in bs
    cpu = results.platforms(list(_runs().values()))[0]
    assert "CPU 에서 `nn.SyncBatchNorm` 실행: **False**" in page.batch_stats_tab(cpu)
    assert page.buffers_tab(plat).count("**True**") == len(plat.runs)

"""Ch2-06 Async Updates — Hogwild! 와 Parameter Server: each test asserts a claim the page makes."""
import inspect
import math
import time

import numpy as np
import pytest

from snippets.ch2_data_parallel import d06_async_parameter_server as page
from snippets import results
from tests.conftest import ROOT, cell_budget


@pytest.mark.parametrize("tau", [0, 1, 2, 3, 4, 8, 16, 31])
def test_delay_threshold_equals_characteristic_roots(tau):
    """Theorem 2.6.3: just below c_κ every root of z^{κ+1} − z^κ + c is inside the unit circle, just above one is outside."""
    c = float(page.delay_threshold(tau))
    poly = lambda x: np.abs(np.roots([1.0, -1.0] + [0.0] * (tau - 1) + [x] if tau else [1.0, -1.0 + x])).max()  # noqa: E731
    assert poly(c * (1 - 1e-6)) < 1 < poly(c * (1 + 1e-4))


def test_delay_threshold_matches_bisection_and_approximation():
    """Experiment 2 / Problem 1: bisection of the simulated recursion agrees; π/(2κ) is within a few % at κ = 31."""
    for tau in (0, 1, 2, 4, 8, 16):
        assert abs(page.measured_threshold(tau) - float(page.delay_threshold(tau))) < 2e-3
    assert abs(math.pi / 62 / float(page.delay_threshold(31)) - 1) < 0.05


def test_parameter_server_fixed_lr_fails_and_scaled_lr_slows():
    """Experiment 2: a fixed ηλ_max = 0.5 reaches the target iff c_κ > 0.5; with ηλ_max = c_κ/2 the updates
    grow with κ (roughly ∝ 1/c_κ), random staleness never worse than the worst case."""
    prev = 0
    for tau in (0, 1, 2, 4, 8, 16):
        c = float(page.delay_threshold(tau))
        fixed = page.parameter_server(tau, 0.5, worst=True)
        assert math.isfinite(fixed) == (c > 0.5)
        worst = page.parameter_server(tau, 0.5 * c, worst=True)
        rand = page.parameter_server(tau, 0.5 * c, worst=False)
        assert math.isfinite(worst) and rand <= worst and worst >= prev
        prev = worst
    ratio = page.parameter_server(16, 0.5 * float(page.delay_threshold(16)), worst=True) / \
        page.parameter_server(2, 0.5 * float(page.delay_threshold(2)), worst=True)
    assert 2 < ratio < 2 * float(page.delay_threshold(2) / page.delay_threshold(16))


def test_easgd_conservation_and_centre():
    """Theorem 2.6.4 / Experiment 3: Σx_i + x̃ changes only by the gradient terms; γ = 0 leaves the centre at 0;
    γ > 0 puts the centre closer to w_opt than the workers; larger γ, smaller spread."""
    _, _, w_opt, lam = page.least_squares()
    res = {a: page.easgd(4, a, 0.5 / lam, track=True) for a in (0.0, 0.01, 0.05, 0.2)}
    assert all(r["drift"] < 1e-10 for r in res.values())
    assert math.isclose(res[0.0]["centre"], float(np.linalg.norm(w_opt)))
    for a in (0.01, 0.05, 0.2):
        assert res[a]["centre"] < 0.5 * res[a]["workers"]
    spreads = [res[a]["spread"] for a in (0.0, 0.01, 0.05, 0.2)]
    assert all(b < a for a, b in zip(spreads, spreads[1:]))


def _runs():
    """The committed CPU results, by world size: the page's prose reads these (GPU tabs: tests below)."""
    runs = {r.hardware["world_size"]: r for r in results.load(page.PROGRAM, kind="cpu")}
    assert {2, 4} <= set(runs)
    return runs


def test_committed_local_sgd_counts_and_equivalences():
    """Experiment 4 / Theorem 2.6.5: all-reduces = steps/H; H = 1 equals sync DDP; the hand-written outer step
    (lr 1, momentum 0) equals PostLocalSGDOptimizer; ranks agree right after every averaging; the final distance
    stays within 1.5× of synchronous DDP for every H (IID shards)."""
    for n, run in _runs().items():
        m, steps = run.measurements["methods"], run.params["steps"]
        assert m["sync"]["comm"]["all_reduce"]["calls"] == steps and m["sync"]["spread_max"] == 0
        assert m["local_1"]["max_diff_vs_sync"] < 1e-5
        sync_final = m["sync"]["curve"][-1]["dist"]
        for h in run.params["Hs"]:
            loc = m[f"local_{h}"]
            assert loc["comm"]["all_reduce"]["calls"] == steps // h == m[f"diloco_{h}"]["comm"]["all_reduce"]["calls"]
            assert loc["comm"]["all_reduce"]["bytes"] == steps // h * run.measurements["param_bytes"]
            assert m[f"outer_plain_{h}"]["max_diff_vs_local"] < 1e-5
            assert loc["spread_after_averaging"] == 0
            assert (loc["spread_max"] > 0) == (h > 1)
            assert loc["curve"][-1]["dist"] < 1.5 * sync_final
        assert len(page.method_rows(run)) == 1 + 3 * len(run.params["Hs"])


def test_committed_diloco_nesterov_is_not_monotone():
    """Experiment 5: with outer Nesterov (0.7, 0.9) the distance rises again at least once for every H and at some
    recorded point is below local SGD's."""
    run = _runs()[2]
    m = run.measurements["methods"]
    assert run.params["outer_lr"] == 0.7 and run.params["outer_momentum"] == 0.9
    for h in run.params["Hs"]:
        d = [p["dist"] for p in m[f"diloco_{h}"]["curve"]]
        loc = [p["dist"] for p in m[f"local_{h}"]["curve"]]
        assert any(b > a for a, b in zip(d, d[1:]))
        assert any(x < y for x, y in zip(d[1:], loc[1:]))


def test_committed_hogwild_converges_for_every_worker_count():
    """Experiment 1: same total updates, every P ends within 2× of P = 1 and far from the start."""
    run = _runs()[2]
    rows = run.measurements["hogwild"]
    assert [r["workers"] for r in rows] == [1, 2, 4]
    assert len({r["updates_total"] for r in rows}) == 1
    base = rows[0]["dist"]
    assert all(r["dist"] < 2 * base for r in rows)
    assert base < 0.05 * run.measurements["w0_dist"]


def test_program_uses_torch_local_sgd_api_and_page_constants():
    """The program uses torch's post_localSGD_hook / PostLocalSGDOptimizer / PeriodicModelAverager, and its
    preset is what the page says (32 features, 2048 rows per rank, batch 16, 256 steps)."""
    import gpu_runs.async_sgd as prog

    src = inspect.getsource(prog)
    for name in ("post_localSGD_hook", "PostLocalSGDOptimizer", "PeriodicModelAverager", "share_memory()",
                 "post_local_gradient_allreduce=False"):
        assert name in src
    f = prog.PRESETS["full"]
    assert (f["d"], f["rows"], f["b"], f["steps"]) == (32, 2048, 16, 256)
    a, _, _, _ = page.least_squares()
    assert a.shape == (2048, 16)


def test_averager_averages_when_step_reaches_warmup_modulo_period():
    """⚖️: PeriodicModelAverager averages when step ≥ warmup and (step − warmup) % period == 0 (installed torch)."""
    import torch.distributed.algorithms.model_averaging.averagers as averagers

    src = inspect.getsource(averagers.PeriodicModelAverager.average_parameters)
    assert "self.step >= self.warmup_steps" in src
    assert "(self.step - self.warmup_steps) % self.period == 0" in src


def test_exercise_2_heterogeneous_drift():
    """Problem 2: with different Hessians the averaged fixed point equals w* only for H = 1 and drifts toward 0."""
    lam, a, eta = (1.0, 3.0), (1.0, -1.0), 0.2
    w_star = -0.5
    lims = []
    for period in (1, 4, 16):
        w = [0.0, 0.0]
        for step in range(1, 4001):
            w = [wi - eta * l * (wi - x) for wi, l, x in zip(w, lam, a)]
            if step % period == 0:
                w = [sum(w) / 2] * 2
        lims.append(sum(w) / 2)
    assert abs(lims[0] - w_star) < 1e-9
    assert w_star < lims[1] < lims[2] < 0


def test_simulation_cells_fit_the_budget():
    t0 = time.perf_counter()
    for tau in (0, 4, 16):
        page.parameter_server(tau, 0.5 * float(page.delay_threshold(tau)), worst=False)
    page.easgd(4, 0.05, 0.5 / page.least_squares()[3], track=True)
    assert time.perf_counter() - t0 < cell_budget()


def test_async_sgd_tiny_preset_for_real(run_tiny):
    """The program itself (2 gloo processes, tiny preset): counts steps/H, H = 1 equals sync, the hand-written
    outer step equals PostLocalSGDOptimizer, Hogwild! processes converge. Budget on CPU seconds (the wall time
    on this shared machine mostly measures other tenants), as for Ch5-05's program."""
    import resource

    from snippets import results

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    data, took = run_tiny("async_sgd", nproc=2, timeout=180)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 30
    results.validate(data)
    m, p = data["measurements"], data["params"]
    for h in p["Hs"]:
        assert m["methods"][f"local_{h}"]["comm"]["all_reduce"]["calls"] == p["steps"] // h
        assert m["methods"][f"outer_plain_{h}"]["max_diff_vs_local"] < 1e-5
    assert m["methods"]["local_1"]["max_diff_vs_sync"] < 1e-5
    assert all(r["dist"] < 0.1 * m["w0_dist"] for r in m["hogwild"])


GPU_FILES = sorted((ROOT / "tests" / "gpu_fixtures" / "results" / "async_sgd").glob("gpu-*.json"))


def test_gpu_tabs_on_the_fixtures():
    """The GPU tabs: Hogwild! is labelled as a host-CPU measurement inside a GPU file, and the local-SGD
    table carries that file's all-reduce counts (steps / H, read here from its JSON)."""
    import json

    (plat,) = results.platforms([results.read(f) for f in GPU_FILES])
    hog = page.hogwild_tab(plat)
    assert "GPU 결과 파일이지만 Hogwild! 는 rank 0 의 host CPU" in hog and "wall (s, host CPU)" in hog
    md = page.methods_tab(plat)
    for f in GPU_FILES:
        d = json.loads(f.read_text())
        steps = d["params"]["steps"]
        assert f"**N = {d['hardware']['world_size']} GPUs, nccl**, {steps} step" in md
        for h in d["params"]["Hs"]:
            calls = d["measurements"]["methods"][f"local_{h}"]["comm"]["all_reduce"]["calls"]
            assert calls == steps // h and f"| PostLocalSGDOptimizer, H={h} | {h} | {calls} |" in md
    assert "N = 2 GPUs" in page.diloco_tab(plat)

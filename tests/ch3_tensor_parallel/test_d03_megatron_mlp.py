"""Ch3-03 Megatron MLP: each test asserts a claim the page makes."""
import math

import numpy as np
import pytest

from snippets.ch3_tensor_parallel import d03_megatron_mlp as page
from snippets.ch3_tensor_parallel import case_tolerance
from tests.ch3_tensor_parallel import cpu_runs, gpu_fixture, platform


def test_gelu_matches_torch():
    """The simulation's GELU and its derivative are torch's exact GELU (approximate='none')."""
    torch = pytest.importorskip("torch")
    x = np.linspace(-5, 5, 101)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.gelu(xt)
    y.sum().backward()
    assert np.allclose(page.gelu(x), y.detach().numpy(), atol=1e-12)
    assert np.allclose(page.gelu_grad(x), xt.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("xg", [True, False])
def test_megatron_mlp_exact_and_one_allreduce_per_pass(t, xg):
    """Theorem 3.3.3: equal to the reference; 1 all-reduce forward, 1 backward only if X needs a grad."""
    c = page.mlp_check(t=t, x_requires_grad=xg)
    assert c["max_err"] < 1e-12
    assert c["forward"] == 1 and c["backward"] == (1 if xg else 0)
    assert all(nb == c["activation_bytes"] for _, _, nb in c["log"])


def test_gelu_is_not_additive():
    """Theorem 3.3.4 (a): GELU on partial sums is wrong; GELU(1) + GELU(−1) = 2Φ(1) − 1 ≠ GELU(0)."""
    assert page.gelu_on_partial_sums_error()["max_abs_error"] > 0.1
    assert float(page.gelu(np.array([1.0]))[0] + page.gelu(np.array([-1.0]))[0]) == pytest.approx(math.erf(1 / math.sqrt(2)))


def _simulated_sent(calls, t):
    """Bytes one rank sends for these collectives, moved by Ch1's ring simulators (S one-byte elements each)."""
    from snippets.ch1_collective.d01_collective_taxonomy import ring_all_gather
    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce

    total = 0
    for op, nb in calls:
        if op == "all_reduce":
            total += int(ring_allreduce(np.zeros((t, nb), dtype=np.uint8))[1].max())
        else:  # all_gather / all_gather_into_tensor: each rank contributes nb/t
            total += int(ring_all_gather(np.zeros((t, nb // t), dtype=np.uint8))[1].max())
    return total


def test_opposite_order_costs_four_and_a_half_times():
    """Theorem 3.3.4 on what DTensor issued: in every committed tp_bench file, the opposite order's forward
    collectives total 5× Megatron's S, and Ch1's ring simulators send 4.5× the bytes per rank; order_costs agrees."""
    for run in page.tp_runs():
        meg, opp = page.measured(run, "mlp"), page.measured(run, "mlp_row_then_col")
        t = meg["t"]
        assert sum(nb for _, nb in opp["forward"]) == 5 * sum(nb for _, nb in meg["forward"])
        sent_meg, sent_opp = _simulated_sent(meg["forward"], t), _simulated_sent(opp["forward"], t)
        assert sent_opp == pytest.approx(4.5 * sent_meg)
        c = page.order_costs(t, meg["b"], meg["s"], meg["h"], 4)
        assert c["row → GELU → column"]["sent_per_rank"] == pytest.approx(sent_opp)
        assert c["column → GELU → row (Megatron)"]["sent_per_rank"] == pytest.approx(sent_meg)


@pytest.mark.parametrize("t", [3, 8, 64])
def test_order_costs_at_unmeasured_t_against_the_simulator(t):
    """Theorem 3.3.4 at t the files do not hold: order_costs' per-rank bytes equal Ch1's ring simulators'."""
    c = page.order_costs(t, 1, 192, 8, 1)  # S = 1536 bytes, divisible by every t here
    for name, v in c.items():
        assert v["sent_per_rank"] == pytest.approx(_simulated_sent(v["ops"], t)), name


def test_dtensor_counts_match_theorems():
    """Experiments 3-4: DTensor (committed, t = 2 and 4): Megatron order = one all_reduce of b·s·h·4 per pass
    (backward only with x.requires_grad); opposite order = all_reduce of 4·b·s·h·4 + all_gather of b·s·h·4 per pass."""
    assert sorted({r["t"] for r in page.measured_rows(cpu_runs(page.tp_runs()))}) == [2, 4]  # the CPU tab's t
    for run in page.tp_runs():
        cases = {c["case"]: c for c in run.measurements["cases"] if c["case"] in ("mlp", "mlp_row_then_col")}
        for c in cases.values():  # every quantity within the bound the run itself recorded for that case
            tol = case_tolerance(c)
            assert all(d <= tol[q] for q, d in c["max_abs_diff"].items()), (run.path, c["case"])
    for r in page.measured_rows():
        S = r["b"] * r["s"] * r["h"] * 4
        assert r["same"]
        if r["case"] == "mlp":
            assert r["forward"] == [("all_reduce", S)]
            assert r["backward"] == ([("all_reduce", S)] if r["x_requires_grad"] else [])
        else:
            want = sorted([("all_reduce", 4 * S), ("all_gather_into_tensor", S)])
            assert sorted(r["forward"]) == want and sorted(r["backward"]) == want
            sim = page.order_costs(r["t"], r["b"], r["s"], r["h"], 4)["row → GELU → column"]
            assert sum(nb for _, nb in r["forward"]) == sim["S_total"]


def test_gpu_tabs_read_the_gpu_file():
    """The GPU tab of experiments 3-4: each collective in units of this file's b·s·h·4 (recomputed from its params
    and forward_calls), and the requires_grad table from the same file."""
    run = gpu_fixture("tp_bench")
    plat = platform(run)
    p = run.data["params"]
    S = p["b"] * p["s"] * p["h"] * 4
    c = next(c for c in run.data["measurements"]["cases"] if c["case"] == "mlp_row_then_col")
    tab = page.orders_tab(plat)
    for op, nb in c["forward_calls"]:
        assert f"{op} {nb / S:g}·bsh·4" in tab
    assert f"{p['h']}" in tab
    # requires_grad table: plant a backward all_reduce into the GPU copy's mlp case with x.requires_grad = False
    import copy

    from snippets import results

    d = copy.deepcopy(run.data)
    c0 = next(c for c in d["measurements"]["cases"] if c["case"] == "mlp" and not c["x_requires_grad"])
    assert c0["backward_calls"] == []  # what the file says: no input gradient, no f
    c0["backward_calls"] = [["all_reduce", S]]
    cpu = cpu_runs(page.tp_runs())
    before = {q.kind: page.requires_grad_tab(q) for q in results.platforms(cpu + [run])}
    after = {q.kind: page.requires_grad_tab(q) for q in results.platforms(cpu + [results.Result(run.path, d)])}
    assert before["cpu"] == after["cpu"]
    t = run.data["hardware"]["world_size"]
    assert f"| {t} | False | ['all_reduce'] | 없음 |" in before["gpu"]
    assert f"| {t} | False | ['all_reduce'] | ['all_reduce'] |" in after["gpu"]
    assert f"h = {p['h']}" in before["gpu"]  # the tab's first line: the measured shape (as the page says)

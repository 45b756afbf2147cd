"""Ch3-03 Megatron MLP: each test asserts a claim the page makes."""
import math

import numpy as np
import pytest

from snippets.ch3_tensor_parallel import d03_megatron_mlp as page


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


@pytest.mark.parametrize("t", [2, 3, 8, 64])
def test_opposite_order_costs_four_and_a_half_times(t):
    """Theorem 3.3.4: S total 5× and ring bytes per rank 4.5× Megatron's, for every t."""
    c = page.order_costs(t, 8, 2048, 8192, 2)
    meg, opp = c["column → GELU → row (Megatron)"], c["row → GELU → column"]
    assert opp["S_total"] == 5 * meg["S_total"]
    assert opp["sent_per_rank"] == pytest.approx(4.5 * meg["sent_per_rank"])


def test_dtensor_counts_match_theorems():
    """Experiments 3-4: DTensor (committed, t = 2 and 4): Megatron order = one all_reduce of b·s·h·4 per pass
    (backward only with x.requires_grad); opposite order = all_reduce of 4·b·s·h·4 + all_gather of b·s·h·4 per pass."""
    rows = page.measured_rows()
    assert sorted({r["t"] for r in rows}) == [2, 4]
    for r in rows:
        S = r["b"] * r["s"] * r["h"] * 4
        assert r["same"] and max(r["diff"].values()) <= 1e-4
        if r["case"] == "mlp":
            assert r["forward"] == [("all_reduce", S)]
            assert r["backward"] == ([("all_reduce", S)] if r["x_requires_grad"] else [])
        else:
            want = sorted([("all_reduce", 4 * S), ("all_gather_into_tensor", S)])
            assert sorted(r["forward"]) == want and sorted(r["backward"]) == want
            sim = page.order_costs(r["t"], r["b"], r["s"], r["h"], 4)["row → GELU → column"]
            assert sum(nb for _, nb in r["forward"]) == sim["S_total"]


def test_from_local_backward_is_where_the_allreduce_lives():
    """Experiment 4's explanation, read from the installed torch: ColwiseParallel wraps a plain input
    with DTensor.from_local, whose backward redistributes the grad to the forward placements."""
    pytest.importorskip("torch")
    import inspect

    from torch.distributed.tensor import _api
    from torch.distributed.tensor.parallel import style

    src = inspect.getsource(style.ColwiseParallel._prepare_input_fn)
    assert "DTensor.from_local" in src
    back = inspect.getsource(_api._FromTorchTensor.backward)
    assert "forward_input_placements" in back and "redistribute" in back.lower()

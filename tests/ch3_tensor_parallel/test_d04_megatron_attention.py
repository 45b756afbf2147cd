"""Ch3-04 Megatron attention: each test asserts a claim the page makes."""
import numpy as np
import pytest

from snippets.ch3_tensor_parallel import d04_megatron_attention as page


def test_numpy_attention_backward_matches_torch_autograd():
    """The hand-written attention forward/backward equals torch's SDPA (causal) and autograd, float64."""
    torch = pytest.importorskip("torch")
    c = page.attention_check(n=8, h=24, a=6, t=2)
    X, Wq, Wk, Wv, Wo, dY, Y1, dX1 = c["data"]
    Xt = torch.tensor(X, requires_grad=True)
    W = [torch.tensor(w) for w in (Wq, Wk, Wv, Wo)]
    n, h, a = X.shape[0], X.shape[1], 6
    q, k, v = ((Xt @ w).view(n, a, h // a).transpose(0, 1) for w in W[:3])
    ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = ctx.transpose(0, 1).reshape(n, h) @ W[3]
    y.backward(torch.tensor(dY))
    assert np.allclose(Y1, y.detach().numpy(), atol=1e-12)
    assert np.allclose(dX1, Xt.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("a,t", [(6, 2), (6, 3), (6, 6), (4, 4), (12, 4)])
def test_head_split_is_exact_and_partials_need_a_sum(a, t):
    """Theorem 3.4.3 / Experiment 1: the head split equals t = 1; one rank's X̄_r alone is not X̄."""
    c = page.attention_check(h=4 * a, a=a, t=t)
    assert c["y_err"] < 1e-12 and c["dx_err"] < 1e-12
    assert c["partial_is_not_total"] > 1e-3


@pytest.mark.parametrize("a", [1, 2, 3, 5, 12, 16, 25, 40, 64])
@pytest.mark.parametrize("t", [1, 2, 3, 4, 8, 16])
def test_whole_heads_iff_t_divides_a(a, t):
    """Theorem 3.4.4, checked against torch.chunk (DTensor's Shard rule) of the q weight's rows."""
    torch = pytest.importorskip("torch")
    d = 4
    r = page.head_split(a * d, a, t)
    chunks = torch.chunk(torch.arange(a * d), t)
    whole = len(chunks) == t and all(c.numel() % d == 0 and int(c[0]) % d == 0 for c in chunks)
    assert r["whole_heads"] == whole == (a % t == 0)


def test_fused_layouts():
    """Experiment 2: contiguous slices of [Q|K|V] never hold a whole head (t ≥ 2); Megatron's
    per-head layout gives every rank whole heads whenever t | a."""
    for a, t in [(4, 2), (12, 4), (8, 8)]:
        assert not any(page.rank_can_attend(o) for o in page.fused_qkv_columns(a, 3, t, "qkv"))
        assert all(page.rank_can_attend(o) for o in page.fused_qkv_columns(a, 3, t, "per_head"))


def test_measured_qkv_lesson():
    """Experiment 3 / Theorem 3.4.5: separate q/k/v → 3 backward all_reduces of b·s·h·4; declaring the
    boundary once or fusing → 1; forward always 1; all agree with the unsharded module."""
    rows = page.measured_rows(names=("attn_separate", "attn_prepared", "attn_fused"))
    assert sorted({r["t"] for r in rows}) == [2, 4]
    for r in rows:
        S = r["b"] * r["s"] * r["h"] * 4
        n_bwd = 3 if r["case"] == "attn_separate" else 1
        assert r["forward"] == [("all_reduce", S)]
        assert r["backward"] == [("all_reduce", S)] * n_bwd
        assert max(r["diff"].values()) <= 1e-5 and r["same"]


def test_indivisible_heads_fail_in_dtensor():
    """Experiment 2 (measured): a = t + 1 heads under DTensor stops with a RuntimeError from the reshape."""
    for run in page.tp_runs():
        ih = run.measurements["indivisible_heads"]
        assert ih["a"] == ih["t"] + 1 and ih["outcome"] == "RuntimeError" and "invalid" in ih["message"]
        assert not page.head_split(ih["h"], ih["a"], ih["t"])["whole_heads"]


def test_block_equals_unsharded_within_tolerance():
    """Experiment 4: the GPT-2-small-shaped block at t = 2 and 4 matches t = 1 within 1e-4, is not bitwise,
    and issues exactly tp_cost's per-layer collectives."""
    from snippets.common.tp_cost import tp_collectives_per_layer

    want = tp_collectives_per_layer()
    for r in page.measured_rows(names=("block",)):
        assert (r["h"], r["a"]) == (768, 12)
        assert max(r["diff"].values()) <= 1e-4 and not r["bitwise"]
        assert [op for op, _ in r["forward"]] == ["all_reduce"] * want["forward"]["all_reduce"]
        assert [op for op, _ in r["backward"]] == ["all_reduce"] * want["backward"]["all_reduce"]


def test_prepare_module_input_signature():
    """The page's fix uses PrepareModuleInput(input_layouts, desired_input_layouts, use_local_output)."""
    pytest.importorskip("torch")
    import inspect

    from torch.distributed.tensor.parallel import PrepareModuleInput

    params = inspect.signature(PrepareModuleInput).parameters
    assert {"input_layouts", "desired_input_layouts", "use_local_output"} <= set(params)
    assert params["use_local_output"].default is False

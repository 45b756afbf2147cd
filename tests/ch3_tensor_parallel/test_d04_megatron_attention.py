"""Ch3-04 Megatron attention: each test asserts a claim the page makes."""
import numpy as np
import pytest

from snippets.ch3_tensor_parallel import d04_megatron_attention as page
from tests.ch3_tensor_parallel import FIXTURES, cpu_runs, gpu_fixture, platform


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
    assert sorted({r["t"] for r in page.measured_rows(cpu_runs(page.tp_runs()))}) == [2, 4]  # the CPU tab's t
    for r in rows:
        S = r["b"] * r["s"] * r["h"] * 4
        n_bwd = 3 if r["case"] == "attn_separate" else 1
        assert r["forward"] == [("all_reduce", S)]
        assert r["backward"] == [("all_reduce", S)] * n_bwd
        assert all(d <= min(1e-5, r["tol"][q]) for q, d in r["diff"].items()) and r["within"] and r["same"]


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
    for run in page.tp_runs():
        if run.params["preset"] == "full":  # the CPU preset: GPT-2 small's width and heads
            assert (run.params["h"], run.params["a"]) == (768, 12)
    for r in page.measured_rows(names=("block",)):
        assert all(d <= r["tol"][q] for q, d in r["diff"].items()) and r["within"] and not r["bitwise"]
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


def _case_as_tp_bench_writes_it(h=32, b=2, s=8, diffs=None):
    """One case in the shape gpu_runs/tp_bench.py's run_case writes (lines 264-278): the tolerance block from the
    program's own harness.tolerance(float32, K = max(4h, b·s)), abs = rel × the reference's max |value|."""
    import torch

    from gpu_runs import harness

    scale = {"output": 3.0, "input_grad": 0.5, "param_grad": 20.0}
    tol = harness.tolerance(torch.float32, max(4 * h, b * s))
    tol["abs"] = {k: tol["rel"] * v for k, v in scale.items()}
    diffs = diffs or {"output": 1e-7, "input_grad": 2e-8, "param_grad": 1e-6}
    within = all(diffs[k] <= tol["abs"][k] for k in diffs)
    return {"case": "block", "t": 2, "max_abs_diff": diffs, "ref_max_abs": scale, "tolerance": tol,
            "within_tolerance": within, "within_tolerance_all_ranks": within}


def test_tolerance_is_the_programs_per_case_bound():
    """Experiment 4's criterion is the per-quantity bound tp_bench records in each case: 2γ_K × max|ref| with
    K = max(4h, b·s), recomputed here from eps (not read back from the case), and the program's all-ranks verdict;
    a case without one (a file from before) falls back to fp32 1e-4 per quantity."""
    pytest.importorskip("torch")
    from snippets.ch3_tensor_parallel import FP32_TOLERANCE, case_tolerance, case_within, tolerance_rule

    c = _case_as_tp_bench_writes_it()
    u, K = 2.0 ** -24, max(4 * 32, 2 * 8)
    want = {q: 2 * K * u / (1 - K * u) * v for q, v in c["ref_max_abs"].items()}
    assert case_tolerance(c) == pytest.approx(want, rel=1e-12)
    assert case_within(c) and f"K = {K}, float32" in tolerance_rule(c)
    # a difference just above its own quantity's bound (but far below 1e-4): the program says False, and so does
    # the page, on every rank's verdict (rank 0's diff may be fine while another rank's is not)
    bad = _case_as_tp_bench_writes_it(diffs={"output": 1e-7, "input_grad": 2 * want["input_grad"], "param_grad": 1e-6})
    assert not bad["within_tolerance_all_ranks"] and not case_within(bad) and bad["max_abs_diff"]["input_grad"] < 1e-4
    other_rank = {**c, "within_tolerance_all_ranks": False}
    assert not case_within(other_rank)
    old = {k: v for k, v in c.items() if k not in ("tolerance", "within_tolerance", "within_tolerance_all_ranks")}
    assert case_tolerance(old) == {q: FP32_TOLERANCE for q in c["max_abs_diff"]} and case_within(old)


def test_block_table_on_a_case_in_the_programs_shape():
    """The table shows each quantity's own bound and the program's verdict (the crash of a float() over the
    params' sentence cannot come back: params["tolerance"] is a sentence in today's tp_bench)."""
    pytest.importorskip("torch")
    import copy

    from snippets import results

    run = gpu_fixture("tp_bench")
    d = copy.deepcopy(run.data)
    d["params"]["tolerance"] = "per case: harness.tolerance(float32, K = max(4h, b·s)) × the reference's max |value|"
    h, b, s = d["params"]["h"], d["params"]["b"], d["params"]["s"]
    for c in d["measurements"]["cases"]:
        new = _case_as_tp_bench_writes_it(h=h, b=b, s=s, diffs=c["max_abs_diff"])
        c.update({k: new[k] for k in ("ref_max_abs", "tolerance", "within_tolerance", "within_tolerance_all_ranks")})
    blk = next(c for c in d["measurements"]["cases"] if c["case"] == "block")
    blk["within_tolerance_all_ranks"] = False  # another rank went beyond its bound
    rows = page.measured_rows([results.Result(run.path, d)], names=("block",))
    table = page.block_table(rows)
    assert f"(≤ {blk['tolerance']['abs']['param_grad']:.1e})" in table
    assert f"K = {max(4 * h, b * s)}, float32" in table
    assert [r["within"] for r in rows] == [False] and "| False | False |" in table


@pytest.mark.dist
def test_the_real_programs_output_through_the_page(run_tiny):
    """tp_bench's tiny preset for real (2 processes): every case's bound and verdict reach the page's rows."""
    from snippets import results

    data, _ = run_tiny("tp_bench", nproc=2, timeout=180)
    run = results.Result(FIXTURES / "tp_bench" / "tiny.json", data)
    rows = page.measured_rows([run])
    for r, c in zip(rows, (c for n in ("attn_separate", "attn_prepared", "attn_fused", "block")
                           for c in data["measurements"]["cases"] if c["case"] == n)):
        assert r["tol"] == c["tolerance"]["abs"] and r["within"] is c["within_tolerance_all_ranks"] is True
    assert "K = " in page.block_table(rows)


def test_gpu_tabs_follow_the_gpu_file_and_only_it():
    """Mutate a copy of the GPU fixture (the block's param-grad difference, DTensor's message for a = t + 1 heads,
    one q/k/v plan's backward count): the GPU tab of each of experiments 2-4 changes with it, the CPU tab does not."""
    import copy

    from snippets import results

    run = gpu_fixture("tp_bench")
    d = copy.deepcopy(run.data)
    cases = {c["case"]: c for c in d["measurements"]["cases"]}
    cases["block"]["max_abs_diff"]["param_grad"] = 3.21e-9
    d["measurements"]["indivisible_heads"]["message"] = "a planted message"
    cases["attn_prepared"]["backward_calls"] = cases["attn_prepared"]["backward_calls"] * 2
    mutated = results.Result(run.path, d)

    def render(plat):
        return (page.indivisible_tab(plat) + page.qkv_tab(plat)
                + page.block_table(page.measured_rows(plat.runs, names=("block",))))

    cpu = cpu_runs(page.tp_runs())
    before = {p.kind: render(p) for p in results.platforms(cpu + [run])}
    after = {p.kind: render(p) for p in results.platforms(cpu + [mutated])}
    assert before["cpu"] == after["cpu"]
    assert "3.2e-09" in after["gpu"] and "3.2e-09" not in before["gpu"]
    assert "a planted message" in after["gpu"]
    S = d["params"]["b"] * d["params"]["s"] * d["params"]["h"] * 4
    prepared = [nb // S for _, nb in cases["attn_prepared"]["forward_calls"] + cases["attn_prepared"]["backward_calls"]]
    assert len(prepared) == 3 and f"| attn_prepared | ['all_reduce'] | ['all_reduce', 'all_reduce'] | {prepared} |" in after["gpu"]

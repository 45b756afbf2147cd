"""Ch1-01 Collective Operation 의 분류: each test asserts a claim the page makes."""
import json
import time

import numpy as np
import pytest

from snippets import results
from snippets.ch1_collective import d01_collective_taxonomy as page
from tests.conftest import ROOT, cell_budget


def _rand(n, c, seed=0):
    return list(np.random.default_rng(seed).integers(-99, 99, size=(n, n * c)))


# ---------------------------------------------------------------- experiment 1: the reference

@pytest.mark.parametrize("n,c", [(2, 1), (3, 2), (4, 2), (5, 3), (8, 1)])
def test_reference_shapes_definitions(n, c):
    """Definitions 1.1.2–1.1.9: input and output sizes on the root and on the other ranks."""
    for root in range(n):
        other = (root + 1) % n
        rows = {name: page.shape_row(name, n, c, root) for name in page.COLLECTIVES}
        full, blk = str(n * c), str(c)
        assert rows["broadcast"] == {"collective": "broadcast", "in_root": full, "in_other": full,
                                     "out_root": full, "out_other": full}
        assert (rows["scatter"]["in_root"], rows["scatter"]["in_other"], rows["scatter"]["out_other"]) == (full, "—", blk)
        assert (rows["gather"]["in_other"], rows["gather"]["out_root"], rows["gather"]["out_other"]) == (blk, full, "—")
        assert (rows["all_gather"]["in_other"], rows["all_gather"]["out_other"]) == (blk, full)
        assert (rows["reduce"]["out_root"], rows["reduce"]["out_other"]) == (full, "—")
        assert (rows["reduce_scatter"]["in_other"], rows["reduce_scatter"]["out_other"]) == (full, blk)
        assert (rows["all_reduce"]["in_other"], rows["all_reduce"]["out_other"]) == (full, full)
        assert (rows["all_to_all"]["in_other"], rows["all_to_all"]["out_other"]) == (full, full)


@pytest.mark.parametrize("n,c", [(2, 1), (4, 2), (7, 3)])
def test_reference_values(n, c):
    x = _rand(n, c)
    total = np.sum(x, axis=0)
    root = n - 1
    assert all(np.array_equal(y, x[root]) for y in page.broadcast(x, root))
    assert all(np.array_equal(y, x[root][r * c:(r + 1) * c]) for r, y in enumerate(page.scatter(x, root)))
    blocks = [xi[:c] for xi in x]
    g = page.gather(blocks, root)
    assert np.array_equal(g[root], np.concatenate(blocks)) and all(g[r] is None for r in range(n) if r != root)
    assert all(np.array_equal(y, np.concatenate(blocks)) for y in page.all_gather(blocks))
    red = page.reduce(x, root)
    assert np.array_equal(red[root], total) and sum(v is None for v in red) == n - 1
    assert all(np.array_equal(y, total[r * c:(r + 1) * c]) for r, y in enumerate(page.reduce_scatter(x)))
    assert all(np.array_equal(y, total) for y in page.all_reduce(x))
    a2a = page.all_to_all(x)
    for i in range(n):
        for j in range(n):  # block j of rank i's input is block i of rank j's output
            assert np.array_equal(a2a[j][i * c:(i + 1) * c], x[i][j * c:(j + 1) * c])


def test_all_reduce_is_a_sum_not_a_mean():
    """ERRATA row 1, as the page states it: the mean is the caller's division by N."""
    x = [np.full(4, float(r + 1)) for r in range(4)]
    y = page.all_reduce(x)[0]
    assert np.allclose(y, 10.0)
    assert not np.allclose(y, 2.5) and np.allclose(y / 4, 2.5)


def test_all_to_all_is_an_involution():
    """All-to-all applied twice returns the input (the block transpose is its own inverse)."""
    x = _rand(5, 3, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(page.all_to_all(page.all_to_all(x)), x))


# ---------------------------------------------------------------- experiment 3: the theorems

@pytest.mark.parametrize("n,c", [(2, 1), (3, 4), (4, 2), (8, 3), (16, 1)])
def test_theorem_allreduce_is_rs_then_ag(n, c):
    assert page.check_decomposition(n, c)


@pytest.mark.parametrize("n,c,seed", [(2, 1, 0), (4, 2, 1), (5, 3, 2), (8, 2, 3)])
def test_adjoint_duality(n, c, seed):
    """Theorem 1.1.12: ⟨AG(b), x⟩ = ⟨b, RS(x)⟩ (exact, integers)."""
    lhs, rhs = page.adjoint_gap(n, c, seed)
    assert lhs == rhs


@pytest.mark.parametrize("n,c", [(2, 1), (4, 2), (6, 3)])
def test_all_gather_backward_is_reduce_scatter(n, c):
    """Corollary 1.1.13: the gradient through an all-gather is the reduce-scatter of the upstream gradient."""
    grad, rs = page.ag_backward_by_differences(n, c, seed=n)
    assert np.array_equal(grad, rs)


def test_ring_halves_move_n_minus_1_over_n_each():
    """Corollary: each ring half sends (N−1)/N·S per rank; together 2(N−1)/N·S (thm-ring-traffic)."""
    t0 = time.perf_counter()
    rows = page.ring_traffic()
    assert time.perf_counter() - t0 < cell_budget()
    for r in rows:
        assert r["correct"]
        assert r["rs_max"] == r["rs_min"] == r["ag_max"] == r["ag_min"] == r["half"]
        assert r["rs_max"] + r["ag_max"] == r["ring_allreduce"]
    # a second ring, written separately (Ch1-03's ring_allreduce, np.array_split chunks), sends
    # per rank exactly what the two halves above send together
    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce
    for n in (2, 3, 8):
        x = np.random.default_rng(n).integers(-100, 100, size=(n, n * 4)).astype(np.int32)
        _, rs = page.ring_reduce_scatter(x)
        _, ag = page.ring_all_gather(page.ring_reduce_scatter(x)[0])
        _, sent, _, _ = ring_allreduce(x)
        assert np.array_equal(sent, rs + ag)


def test_ring_schedules_have_the_stated_owner():
    """Ring RS leaves block r on rank r; ring AG of those blocks restores the full sum everywhere."""
    x = np.arange(5 * 10).reshape(5, 10)
    shards, _ = page.ring_reduce_scatter(x)
    assert all(np.array_equal(shards[r], page.reduce_scatter(list(x))[r]) for r in range(5))
    full, _ = page.ring_all_gather(shards)
    assert np.array_equal(full, np.broadcast_to(x.sum(0), full.shape))


# ---------------------------------------------------------------- experiment 2: the real run

def _saved():
    runs = results.load("collectives_semantics", kind="cpu")
    return next(r for r in runs if r.hardware["world_size"] == 4)


def test_saved_run_matches_reference_for_every_api():
    r = _saved()
    assert not r.stale
    rows = page.check_against_reference(r)
    assert {row["collective"] for row in rows} == set(page.COLLECTIVES) | {"rs_then_ag", "all_reduce_avg"}
    assert all(row["match"] for row in rows), [row for row in rows if not row["match"]]
    assert r.hardware["backend"] == "gloo" and r.hardware["world_size"] == 4


def test_saved_run_inputs_are_the_documented_inputs():
    """The page's tables show these inputs: 100·(r+1) + arange(...)."""
    r = _saved()
    m = r.measurements
    n, c, root = m["world_size"], m["block"], m["root"]
    for call in m["calls"]:
        if call["collective"] in page.COLLECTIVES:
            want = page.make_inputs(call["collective"], n, c, root)
            got = [rr["input"] for rr in call["ranks"]]
            for g, w in zip(got, want):
                if call["collective"] == "broadcast" or w is not None:
                    assert np.array_equal(g, w)


def test_saved_run_theorem_and_deprecations():
    """Experiment 3 on the real run; torch 2.13 warns on the *_tensor names the page mentions."""
    r = _saved()
    by_api = {c["api"]: c for c in page.calls(r)}
    ar = [x["output"] for x in by_api["all_reduce"]["ranks"]]
    comp = next(c for c in page.calls(r) if c["collective"] == "rs_then_ag")
    assert [x["output"] for x in comp["ranks"]] == ar
    rs = [x["output"] for x in by_api["reduce_scatter"]["ranks"]]
    assert [x["shard"] for x in comp["ranks"]] == rs
    import torch

    # the committed run must come from the installed torch, so no assertion is version-gated away
    assert r.data["versions"]["torch"] == torch.__version__
    assert "all_gather_single" in (by_api["all_gather_into_tensor"]["ranks"][0]["warning"] or "")
    assert "reduce_scatter_single" in (by_api["reduce_scatter_tensor"]["ranks"][0]["warning"] or "")


def test_saved_run_sum_is_default_and_avg_is_the_mean():
    """ERRATA row 1 on the real run: all_reduce's default is SUM; ReduceOp.AVG (where the backend
    offers it; gloo in torch 2.13 did here) is that sum divided by N."""
    r = _saved()
    by_api = {c["api"]: c for c in page.calls(r)}
    n = r.measurements["world_size"]
    total = np.sum([x["input"] for x in by_api["all_reduce"]["ranks"]], axis=0)
    assert all(np.array_equal(x["output"], total) for x in by_api["all_reduce"]["ranks"])
    avg = by_api["all_reduce(op=ReduceOp.AVG)"]["ranks"]
    import torch

    assert r.data["versions"]["torch"] == torch.__version__
    if r.hardware["backend"] == "gloo":
        assert not any(x["error"] for x in avg)  # the page's ⚖️ note (the docstring says NCCL only)
    assert all(np.allclose(x["output"], total / n) for x in avg if not x["error"])


def test_saved_reduce_leaves_non_root_buffers_modified():
    """The page's ⚖️ note: after gloo's reduce a non-root buffer is neither its input nor the sum,
    but holds the complete sum of its own block (observed in this run)."""
    rows = page.reduce_scratch(_saved())
    assert len(rows) == 3
    assert all(not x["equals_input"] and not x["equals_total"] for x in rows)
    assert all(x["own_block_is_total"] for x in rows)


@pytest.mark.dist
def test_tiny_launch_matches_reference(run_tiny):
    """The tiny preset (2 processes, root 1) for real: every API equals the NumPy reference."""
    data, took = run_tiny("collectives_semantics", nproc=2)
    assert took < 30
    results.validate(data)
    assert data["hardware"]["world_size"] == 2 and data["measurements"]["root"] == 1
    rows = page.check_against_reference(data)
    assert {row["collective"] for row in rows} == set(page.COLLECTIVES) | {"rs_then_ag", "all_reduce_avg"}
    assert all(row["match"] for row in rows)


# ---------------------------------------------------------------- experiment 2: one tab per hardware

GPU_FIXTURE = ROOT / "tests" / "gpu_fixtures" / "results" / "collectives_semantics" / "gpu-nccl-1x4-nvidia-h200.json"


def _gpu_platform(mutate=None):
    d = json.loads(GPU_FIXTURE.read_text())
    if mutate:
        mutate(d)
    (plat,) = results.platforms([results.Result(GPU_FIXTURE, d)])
    return plat, d


def test_gpu_tab_checks_the_files_calls():
    """The GPU tab names its backend and unit, counts every call of that file, and a wrong output in
    the file turns into a ❌ and a lower count (the check reads the file, not a constant)."""
    plat, d = _gpu_platform()
    calls = len(d["measurements"]["calls"])
    md = page.check_tab(plat)
    assert "nccl, N = 4 GPUs" in md and "processes" not in md
    assert f"{calls} 개 호출 중 reference 와 일치: **{calls}**" in md

    def break_all_reduce(d):
        call = next(c for c in d["measurements"]["calls"] if c["api"] == "all_reduce")
        call["ranks"][2]["output"][0] += 1

    plat, _ = _gpu_platform(break_all_reduce)
    md = page.check_tab(plat)
    assert f"일치: **{calls - 1}**" in md and "| `all_reduce` | all_reduce | ❌ |" in md


def test_tab_readings_follow_the_file():
    """The readings printed in each tab come from that file: a backend whose non-root reduce buffers
    hold their inputs, and one that refuses AVG, are read as such."""
    def untouched(d):
        call = next(c for c in d["measurements"]["calls"] if c["api"] == "reduce")
        for r in call["ranks"]:
            if r["scratch"] is not None:
                r["scratch"] = r["input"]

    plat, _ = _gpu_platform(untouched)
    assert "이 nccl 에서 root 가 아닌 rank 의 buffer 는 입력 그대로 남았습니다." in page.reduce_scratch_tab(plat)
    plat, _ = _gpu_platform()
    assert "부분합" in page.reduce_scratch_tab(plat)  # the fixture mirrors the CPU file's gloo buffers

    def refuse_avg(d):
        call = next(c for c in d["measurements"]["calls"] if c["api"] == "all_reduce(op=ReduceOp.AVG)")
        for r in call["ranks"]:
            r["output"], r["error"] = None, "RuntimeError: AVG not supported"

    plat, _ = _gpu_platform(refuse_avg)
    assert "이 nccl 는 AVG 를 거절했습니다" in page.avg_tab(plat)
    plat, d = _gpu_platform()
    n = d["hardware"]["world_size"]
    ar = next(c for c in d["measurements"]["calls"] if c["api"] == "all_reduce")["ranks"][0]["output"]
    avg = next(c for c in d["measurements"]["calls"] if c["api"] == "all_reduce(op=ReduceOp.AVG)")["ranks"][0]["output"]
    assert np.allclose(avg, np.array(ar) / n) and "평균 (SUM / N) 을 돌려주었습니다" in page.avg_tab(plat)


def test_calls_and_decomposition_tabs_show_every_rank():
    plat, d = _gpu_platform()
    md = page.calls_tab(plat)
    assert all(f'"{api}"' in md for api in page.COLLECTIVES)
    dec = page.decomposition_tab(plat)
    assert dec.count("✅") == d["hardware"]["world_size"] and "❌" not in dec


# ---------------------------------------------------------------- experiment 4: where they are used

@pytest.mark.parametrize("psi,n", [(7e9, 8), (70e9, 64), (1e6, 2)])
def test_usage_bytes_agree_with_zero_paper(psi, n):
    """ZeRO-2 moves the same bytes as DP, ZeRO-3 1.5×; both equal zero_comm_volume·(N−1)/N·2 B."""
    ours, paper = page.zero_step_bytes(psi, n), page.zero_paper_bytes(psi, n)
    for k in ours:
        assert ours[k] == pytest.approx(paper[k])
    assert ours["ZeRO-2 (RS + AG)"] == pytest.approx(ours["DP (all_reduce)"])
    assert ours["ZeRO-3 (2·AG + RS)"] == pytest.approx(1.5 * ours["DP (all_reduce)"])


@pytest.mark.parametrize("psi,n", [(8000, 8), (4 * 999, 4), (64 * 10, 64)])
def test_usage_simulated_equals_formula(psi, n):
    """Experiment 4: ring simulators on real arrays send exactly the bytes usage_bytes predicts."""
    sim, formula = page.usage_simulated(psi, n), page.zero_step_bytes(psi, n)
    assert sim == {k: pytest.approx(v) for k, v in formula.items()}


@pytest.mark.parametrize("psi,n", [(8000, 8), (999 * 4, 4), (7 * 10, 7)])
def test_usage_all_reduce_equals_rs_plus_ag(psi, n):
    """The usage table's DDP row (one AllReduce) sends what its ZeRO-2 rows (RS + AG) send, and
    each row is what a ring that moves real int16 arrays sends: the AllReduce row against Ch1-03's
    ring_allreduce, the two halves against this page's ring RS/AG simulators."""
    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce

    rows = {r["use"]: r for r in page.usage_bytes(psi, n)}
    grads = np.random.default_rng(1).integers(-3, 3, size=(n, psi)).astype(np.int16)
    _, ar_sent, _, _ = ring_allreduce(grads)
    shards, rs_sent = page.ring_reduce_scatter(grads)
    _, ag_sent = page.ring_all_gather(shards)
    assert rows["DDP backward"]["sent_per_rank"] == pytest.approx(int(ar_sent.max()))
    assert rows["ZeRO-2 backward"]["sent_per_rank"] == pytest.approx(int(rs_sent.max()))
    assert rows["ZeRO-2 step 뒤"]["sent_per_rank"] == pytest.approx(int(ag_sent.max()))


# ---------------------------------------------------------------- the picture in §📖

def test_figure_cells_decode_the_reference():
    """The picture colours what the reference computes: e.g. all_to_all moves (rank i, block j) to
    rank j position i, reduce_scatter leaves Σ of block r on rank r, gather fills only the root."""
    n = 4
    _, a2a = page.figure_cells("all_to_all", n)
    assert all(a2a[j][i] == ([i], j) for i in range(n) for j in range(n))
    _, rs = page.figure_cells("reduce_scatter", n)
    assert rs == [[(list(range(n)), r)] for r in range(n)]
    _, g = page.figure_cells("gather", n)
    assert g[0] == [([r], r) for r in range(n)] and all(v is None for v in g[1:])
    html = page.taxonomy_html(n)
    assert all(name in html for name in page.COLLECTIVES)

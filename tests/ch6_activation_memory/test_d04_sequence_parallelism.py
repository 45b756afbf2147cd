"""Ch6-04 Sequence Parallelism: each test asserts a claim the page makes."""
import pytest

from snippets import results
from snippets.ch6_activation_memory import d04_sequence_parallelism as page
from snippets.common import activation_memory as am


def _cpu():
    return results.load("sp_activation_bench", kind="cpu")


@pytest.mark.parametrize("r", _cpu(), ids=lambda r: r.path.name)
def test_every_saved_byte_is_explained(r):
    """Experiment 1 / Theorem 6.4.4: measured per-rank bytes = Table 2 + masks + LN stats (+ gathered inputs for SP)."""
    rows = page.memory_rows(r)
    p = r.params
    s, b, h, a, t = p["s"], p["b"], p["h"], p["a"], p["t"]
    for row in rows:
        assert len(set(row["measured"])) == 1  # every rank saves the same bytes
        assert row["measured"][0] == row["explained"]
    tp, sp = rows
    # the paper's column is Table 2, printed forms
    assert tp["paper"] == pytest.approx(am.tensor_parallel(s, b, h, a, t))
    assert sp["paper"] == pytest.approx(am.tensor_sequence_parallel(s, b, h, a, t))
    # the gathered column inputs DTensor saves are what the forward AllGathers received: (t − 1) × their recorded input
    ag_in = next(x for x in page.comm_rows(r) if x["variant"] == "tp_sp" and x["phase"] == "forward")["input_bytes"]
    assert sp["gathered"] == pytest.approx((t - 1) * ag_in["all_gather_into_tensor"])
    assert sp["measured"][0] < tp["measured"][0]


def test_replicated_region_does_not_shrink_with_t():
    """'the 10sbh of TP does not shrink from t = 2 to t = 4': TP-only minus its sharded part is the same for both t."""
    runs = {r.params["t"]: r for r in _cpu()}
    assert {2, 4} <= set(runs)
    def replicated(r):
        p = r.params
        s, b, h, a, t = p["s"], p["b"], p["h"], p["a"], p["t"]
        sharded = am.layer_bytes(s, b, h, a, t=t, mask_bytes=2) - am.layer_bytes(s, b, h, a, t=1e18, mask_bytes=2)
        return r.measurements["tp"][0]["saved_bytes"] - sharded
    assert replicated(runs[2]) == pytest.approx(replicated(runs[4]))


@pytest.mark.parametrize("r", _cpu(), ids=lambda r: r.path.name)
def test_collectives_and_equal_volume(r):
    """Experiment 2 / Theorem 6.4.5: 2 AR vs 2 AG + 2 RS in forward and backward; equal ring bytes 4(t−1)S/t."""
    p = r.params
    t, S = p["t"], 2 * p["s"] * p["b"] * p["h"]
    rows = page.comm_rows(r)
    for x in rows:
        if x["variant"] == "tp":
            assert x["counts"] == {"all_reduce": 2} and x["input_bytes"] == {"all_reduce": 2 * S}
        else:
            assert x["counts"] == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}
            assert x["input_bytes"] == {"all_gather_into_tensor": 2 * S // t, "reduce_scatter_tensor": 2 * S}
        assert x["calls"] == x["counts"]
        assert x["ring_sent"] == pytest.approx(4 * (t - 1) * S / t)
    # the shared module's element counts against the collectives the run recorded (bf16: 2 bytes an element)
    el = am.sp_traffic_elements(p["s"], p["b"], p["h"], t)
    fwd = {x["variant"]: x for x in rows if x["phase"] == "forward"}
    ib = fwd["tp_sp"]["input_bytes"]
    assert 2 * el["tp_allreduce"] == pytest.approx(page.ring_bytes_sent("all_reduce", fwd["tp"]["input_bytes"]["all_reduce"], t))
    assert 2 * el["sp_allgather"] == pytest.approx(page.ring_bytes_sent("all_gather_into_tensor", ib["all_gather_into_tensor"], t))
    assert 2 * el["sp_reducescatter"] == pytest.approx(page.ring_bytes_sent("reduce_scatter_tensor", ib["reduce_scatter_tensor"], t))


@pytest.mark.parametrize("r", _cpu(), ids=lambda r: r.path.name)
def test_outputs_match_one_device_to_bf16_rounding(r):
    """Experiment 3: with dropout off both layouts give the single-device output up to bf16 rounding."""
    for v in ("tp", "tp_sp"):
        for x in r.measurements[v]:
            assert x["max_abs_diff_vs_one_device"] < 0.1
    timed = r.params["timing"] is not None
    assert timed == (r.params["t"] <= r.hardware["cpu_count"])  # timing only with processes ≤ cores


def test_ring_bytes_sent_against_ch1_ring_simulator():
    """Theorem 6.4.5 from the ring: the page's AR(S) and RS(S) + AG(S/t shard) both equal the bytes a rank sends
    in Ch1-03's ring simulator, which moves real arrays chunk by chunk (an independent implementation)."""
    import numpy as np

    from snippets.ch1_collective.d03_ring_allreduce import ring_allreduce

    for t in (2, 3, 4, 8, 16):
        x = np.arange(t * 6 * t, dtype=np.float32).reshape(t, 6 * t)
        out, sent, _, steps = ring_allreduce(x)
        S = x[0].nbytes
        assert np.array_equal(out[0], x.sum(0)) and steps == 2 * (t - 1)
        assert page.ring_bytes_sent("all_reduce", S, t) == pytest.approx(sent.max())
        assert page.ring_bytes_sent("reduce_scatter_tensor", S, t) + page.ring_bytes_sent("all_gather_into_tensor", S / t, t) \
            == pytest.approx(sent.max())
    with pytest.raises(ValueError):
        page.ring_bytes_sent("broadcast", 1, 2)


def test_exercise_2_rabenseifner_against_ch1_simulator():
    """Exercise 2: the α-β time of Rabenseifner (RS by recursive halving + AG by recursive doubling) has
    2·log2 t messages and 2(t−1)/t·S bytes: checked against Ch1-02's simulator, which runs the schedule on data."""
    import numpy as np

    from snippets.ch1_collective.d02_allreduce_algorithms import rabenseifner_allreduce
    from snippets.common import alphabeta as ab

    alpha, beta = 5e-6, 1 / 100e9
    for t in (2, 4, 8, 16):
        x = np.arange(t * 4 * t, dtype=np.float64).reshape(t, 4 * t)
        sim = rabenseifner_allreduce(x)
        S = x[0].nbytes
        assert sim.correct(x)
        assert sim.steps == 2 * np.log2(t)
        assert float(ab.rabenseifner_time(t, S, alpha, beta)) == pytest.approx(sim.time(alpha, beta))


def test_long_context_formulas():
    """Experiment 4, against independent sources: the activation is Table 2's TP+SP row without the score terms
    plus the logsumexp that torch's flash-attention kernel returns (its dtype and shape read at run time); the
    bytes sent are those of Ch1-01's ring simulators (TP+SP: 2 RS + 2 AG of 2sbh; ring attention: a ring AllGather
    of K and of V) and of Ch1-01's reference all_to_all run on tagged data (Ulysses: Q, K, V and the output)."""
    import numpy as np
    import torch

    from snippets.ch1_collective.d01_collective_taxonomy import all_to_all, ring_all_gather, ring_reduce_scatter

    s, b, h = 64, 2, 32
    q = torch.randn(b, 8, s, h // 8)
    lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)[1]
    lse_bytes_per_asb = lse.numel() * lse.element_size() / (8 * s * b)
    prev_uly = None
    for c in (2, 4, 8):
        a = 8
        lc = page.long_context(s, b, h, a, c)
        flash = am.tensor_sequence_parallel(s, b, h, a, c) - 5 * a * s * s * b / c + lse_bytes_per_asb * a * s * b / c
        for v in lc.values():
            assert v["activation"] == pytest.approx(flash)
        bf16 = np.uint16  # 2-byte elements, as bf16
        full = np.zeros((c, s * b * h), dtype=bf16)            # an [s, b, h] activation on every rank
        shards, rs = ring_reduce_scatter(full)
        _, ag = ring_all_gather(shards)
        assert lc["TP+SP (Megatron)"]["sent"] == 2 * rs.max() + 2 * ag.max()
        _, kv = ring_all_gather(np.zeros((c, s // c * b * h), dtype=bf16))  # this rank's K (or V) chunk
        assert lc["context parallel (ring)"]["sent"] == 2 * kv.max()
        tagged = [np.full(s // c * b * h, r, dtype=bf16) for r in range(c)]
        out = all_to_all(tagged)
        left = [sum(int((out[j] == r).sum()) for j in range(c) if j != r) * 2 for r in range(c)]
        uly = lc["Ulysses (all-to-all)"]["sent"]
        assert uly == 4 * max(left) == 4 * min(left)
        assert prev_uly is None or uly < prev_uly
        prev_uly = uly


@pytest.mark.dist
def test_tiny_preset_runs_and_explains_bytes(run_tiny):
    """The real program, 2 gloo processes, tiny preset: the same decomposition holds exactly."""
    data, _ = run_tiny("sp_activation_bench", nproc=2)
    r = results.Result(path=results.RESULTS, data=data)
    for row in page.memory_rows(r):
        assert set(row["measured"]) == {row["explained"]}
    assert page.comm_rows(r)[0]["counts"] == {"all_reduce": 2}


def test_gpu_tab_shows_the_allocator_bytes_and_cuda_mask_width(tmp_path, monkeypatch):
    """Experiment 1 per hardware: the GPU tab shows cuda_allocated_after_forward (written only on CUDA) and explains the
    saved bytes with 1-byte masks (its '+ mask' column is 0) and fp32 statistics; the CPU tab shows '—' there."""
    from tests.page_cells import edit, results_dir, run_cell, tab

    res = results_dir(tmp_path, ["sp_activation_bench"])
    f = res / "sp_activation_bench" / "gpu-nccl-1x2-nvidia-h200.json"
    edit(f, lambda d: d["measurements"]["tp"][0].update(cuda_allocated_after_forward=123_456_789))
    r = results.read(f)
    html = run_cell("ch6-activation-memory/04-sequence-parallelism.md", "ch6-04-exp1-memory", res, monkeypatch)
    gpu, cpu = tab(html, "GPU"), tab(html, "CPU")
    assert "123,456,789" in gpu and "123,456,789" not in cpu
    p = r.params
    s, b, h, a, t = p["s"], p["b"], p["h"], p["a"], p["t"]
    stats = 2 * 2 * s * b * 4  # tp: replicated LayerNorms, fp32 mean and rstd on CUDA
    explained = am.layer_bytes(s, b, h, a, t=t, mask_bytes=1) + stats
    assert f"{explained:,.0f}" in gpu and f"{explained:,.0f}" not in cpu
    assert f">+{stats:,}</td>" in gpu and ">+0</td>" in gpu  # LN statistics at fp32; no extra mask bytes


def test_long_context_table_flags_every_head_split_that_does_not_divide_the_heads(monkeypatch):
    """Experiment 4: TP+SP (t = c) and Ulysses both split the a heads over c ranks, ring attention does not.
    The flags the page prints are checked against a head count read from the cell's own table, not its rule."""
    from snippets import results
    from tests.page_cells import run_cell, table_rows

    out = run_cell("ch6-activation-memory/04-sequence-parallelism.md", "ch6-04-exp4-longctx", results.RESULTS, monkeypatch)
    a = 96  # GPT-3 175B (Brown et al. 2020, Table 2.1): 96 heads, as the cell's shape h = 12288 = 96 x 128
    flagged = {(r[0], r[1].split(" (a %")[0]) for r in (line.split("|")[1:-1] for line in out.splitlines()
                                                     if line.startswith("|") and "불가" in line) for r in [[x.strip() for x in r]]}
    want = {(str(c), name) for c in (8, 16, 32, 64) if a % c for name in ("TP+SP (Megatron)", "Ulysses (all-to-all)")}
    assert want == {("64", "TP+SP (Megatron)"), ("64", "Ulysses (all-to-all)")}
    assert flagged == want, flagged

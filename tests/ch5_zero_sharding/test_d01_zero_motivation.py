"""Ch5-01 ZeRO 의 Motivation 과 메모리 분해: each test asserts a claim the page makes."""
import pytest

from snippets.ch5_zero_sharding import d01_zero_motivation as page
from snippets.common import zero_memory as zm


@pytest.fixture(scope="module")
def counted():
    return page.per_parameter_table()


def test_real_mixed_precision_adam_is_16_bytes_per_parameter(counted):
    """Experiment 1 / Theorem 5.1.4: 2 + 2 + 4 + 4 + 4 bytes per parameter, from the tensors."""
    rows, psi, n_tensors = counted
    per = {name: b for name, b, _, _ in rows}
    assert per["params (16-bit)"] == 2 * psi
    assert per["grads (16-bit)"] == 2 * psi
    assert per["master (fp32)"] == 4 * psi
    assert per["Adam exp_avg m (fp32)"] == 4 * psi
    assert per["Adam exp_avg_sq v (fp32)"] == 4 * psi
    elementwise = sum(b for name, b, _, _ in rows if name != "Adam step (per tensor)")
    assert elementwise == 16 * psi == zm.zero_memory_bytes(psi, 1, 0)
    # K = 12: the optimizer's part equals the shared module's optimizer term
    optimizer = per["master (fp32)"] + per["Adam exp_avg m (fp32)"] + per["Adam exp_avg_sq v (fp32)"]
    assert optimizer == zm.zero_memory_breakdown(psi, 1, 0)["optimizer"] == zm.K_ADAM * psi
    # the only thing outside 16ψ: one 4-byte fp32 step counter per parameter tensor
    assert per["Adam step (per tensor)"] == 4 * n_tensors


def test_breakdown_sums_to_formula_for_every_stage():
    for psi, n in [(7e9, 8), (13e9, 16), (70e9, 16), (175e9, 64), (1e6, 3)]:
        for s in range(4):
            assert sum(zm.zero_memory_breakdown(psi, n, s).values()) == pytest.approx(zm.zero_memory_bytes(psi, n, s))


def test_stage_table_70b_16_errata_rows_13_14():
    """Experiment 2: 1120 / 332.5 / 201.25 / 70 GB, and 70 GB = 65.2 GiB."""
    rows = page.stage_table()
    r = next(r for r in rows if r["psi"] == 70e9 and r["N"] == 16)
    assert r["GB"] == pytest.approx([1120.0, 332.5, 201.25, 70.0])
    assert round(r["GiB"][3], 1) == 65.2
    assert r["GB"][1] - r["GB"][2] == pytest.approx(131.25)
    # stages are monotone for every row
    for r in rows:
        assert r["GB"] == sorted(r["GB"], reverse=True)


def test_step_transients_outside_16psi():
    """Experiment 3: foreach Adam allocates exactly 4ψ extra, fused 0, the for-loop ≈ 8 × the largest tensor."""
    rows = {r["variant"]: r for r in page.step_transients()}
    fe = rows["foreach=True"]
    assert fe["adam_peak"] == 4 * fe["psi"]
    assert fe["step_peak"] == 8 * fe["psi"]          # + the fp32 copy of the 16-bit grads
    fu = rows["fused=True"]
    assert fu["adam_peak"] == 0
    assert fu["step_peak"] == 4 * fu["psi"]
    fl = rows["for-loop (foreach=False)"]
    assert 8 * fl["largest"] <= fl["adam_peak"] < 8 * fl["largest"] + 4 * fl["largest"]
    assert fl["step_peak"] == 4 * fl["psi"] + fl["adam_peak"]
    assert all(r["leftover"] == 0 for r in rows.values())


@pytest.mark.parametrize("tokens,width,depth", [(64, 128, 2), (16, 32, 3), (128, 64, 1)])
def test_saved_activations_match_9Th_per_block(tokens, width, depth):
    """Experiment 3: activations = 2 bytes · 9·T·h per block, independent of ψ's 16 bytes."""
    a = page.saved_activation_bytes(tokens, width, depth)
    assert a["measured"] == a["predicted"] == 18 * tokens * width * depth


def test_activations_scale_with_tokens_not_parameters():
    small = page.saved_activation_bytes(32)
    big = page.saved_activation_bytes(128)
    assert big["psi"] == small["psi"]
    assert big["measured"] == 4 * small["measured"]


def _meta_model_states(psi: int, n: int, stage: int) -> int:
    """Independent route to the per-rank bytes: allocate the five arrays on the meta device with
    the dtypes of Definition 5.1.2 and let torch say their sizes (shard = ψ/N elements)."""
    import torch

    shard = lambda on: psi // n if on else psi  # noqa: E731
    arrays = [torch.empty(shard(stage >= 3), dtype=torch.bfloat16, device="meta"),   # θ16
              torch.empty(shard(stage >= 2), dtype=torch.bfloat16, device="meta")]   # g16
    arrays += [torch.empty(shard(stage >= 1), dtype=torch.float32, device="meta") for _ in range(3)]  # θ32, μ, ν
    return sum(t.nbytes for t in arrays)


def test_units_and_70b_numbers_from_meta_tensors():
    """Experiment 4 and Corollary 5.1.6: the byte counts that the GB/GiB columns convert come out of
    torch's own element sizes (meta tensors, nothing allocated); 70 GB = 65.2 GiB; GiB is ~7 % smaller."""
    psi, n = 70 * 10 ** 9, 16
    got = [_meta_model_states(psi, n, s) for s in range(4)]
    assert [g / 10 ** 9 for g in got] == pytest.approx([1120, 332.5, 201.25, 70])
    assert got == [zm.zero_memory_bytes(psi, n, s) for s in range(4)]
    assert f"{got[3] / 2 ** 30:.1f}" == "65.2"
    for r in page.unit_rows():
        assert r["bytes"] == _meta_model_states(int(r["psi"]), 1, 0)
        assert r["GiB"] < r["GB"] and 1 - r["GiB"] / r["GB"] == pytest.approx(0.0687, abs=1e-4)


def test_figure_bars_equal_independent_totals():
    """Experiment 2's figure: the four bar labels in the SVG are the meta-tensor totals of each stage,
    and the ZeRO-1 → ZeRO-2 drop is exactly the gradient term 2ψ(N−1)/N."""
    import re

    svg = page.stage_figure(70e9, 16)
    labels = [float(x.replace(",", "")) for x in re.findall(r">([\d,]+\.\d\d) GB<", svg)]
    want = [_meta_model_states(70 * 10 ** 9, 16, s) / 10 ** 9 for s in range(4)]
    assert labels == pytest.approx(want)
    parts = [zm.zero_memory_breakdown(70e9, 16, s) for s in (1, 2)]
    assert parts[0]["params"] == parts[1]["params"] and parts[0]["optimizer"] == parts[1]["optimizer"]
    assert parts[0]["grads"] - parts[1]["grads"] == pytest.approx(2 * 70e9 * 15 / 16)


def test_exercise2_70b_does_not_fit_16_cards_smallest_n():
    """Exercise 2: with the step's measured transients, 70B does not fit 16 × 80 GiB under ZeRO-3
    (foreach or fused); the smallest N is 20 (foreach) and 17 (fused), checked by brute force."""
    measured = {r["variant"]: r["step_peak"] / r["psi"] for r in page.step_transients()}
    assert measured["foreach=True"] == page.STEP_EXTRA_BYTES["foreach=True"]
    assert measured["fused=True"] == page.STEP_EXTRA_BYTES["fused=True"]
    psi, cap = 70e9, 80 * zm.GIB
    found = {}
    for name, extra in page.STEP_EXTRA_BYTES.items():
        assert page.zero3_step_peak(psi, 16, extra) > cap                         # (a) does not fit
        brute = next(n for n in range(1, 1024) if _meta_model_states(70 * 10 ** 9, n, 3) + extra * psi / n <= cap)
        found[name] = page.smallest_n_that_fits(psi, cap, extra)
        assert found[name] == brute
    assert found == {"foreach=True": 20, "fused=True": 17}
    # (c) rounded up to 8-GPU nodes both need N = 24; fused leaves more room for activations
    assert {8 * -(-n // 8) for n in found.values()} == {24}
    left = {k: cap - page.zero3_step_peak(psi, 24, page.STEP_EXTRA_BYTES[k]) for k in found}
    assert 0 < left["foreach=True"] < left["fused=True"]


def test_deepspeed_estimators_20_bytes_is_zero2_only():
    """Experiment 3 (a): the installed DeepSpeed's estimators, called for real. ZeRO-2 without offload:
    2ψ + 18ψ/N on the GPU (20 B/param at N = 1). ZeRO-3: 18ψ/N + 4 × largest layer; with offload, 2ψ (ZeRO-2)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    psi, largest = 10 ** 9, 10 ** 7
    _, gpu = estimate_zero2_model_states_mem_needs(psi, num_gpus_per_node=1, cpu_offload=False)
    assert gpu == 20 * psi == (zm.zero_memory_bytes(psi, 1, 2) + 4 * psi)   # the book's 16 + fp32 grads 4
    _, gpu16 = estimate_zero2_model_states_mem_needs(psi, num_gpus_per_node=8, num_nodes=2, cpu_offload=False)
    assert gpu16 == 2 * psi + 18 * psi // 16
    _, gpu_off = estimate_zero2_model_states_mem_needs(psi, num_gpus_per_node=1, cpu_offload=True)
    assert gpu_off == 2 * psi
    _, gpu3, _ = estimate_zero3_model_states_mem_needs(psi, largest, num_gpus_per_node=1, cpu_offload=False)
    assert gpu3 == 18 * psi + 4 * largest != 20 * psi


# --- experiment 5: the optimizer step's time (gpu_runs/step_anatomy.py) ------------------------------------

MD = "ch5-zero-sharding/01-zero-motivation.md"




def test_committed_adam_rows_count_seven_elements_of_the_models_dtype():
    """Experiment 5's accounting on the committed CPU result: every implementation ran, over all ψ parameters, its
    minimum bytes are 7 × ψ × 4 (float32: read p, g, m, v; write p, m, v), its Adam state is m and v (2 × 4 bytes
    an element), and its GB/s is those bytes over its time."""
    from snippets import results

    (run,) = [r for r in results.experiment(page.ANATOMY) if not r.is_gpu]
    assert run.params["dtype"] == "float32" and run.params["default_impl"] == "for-loop"
    rows = {r["impl"]: r for r in run.measurements["optimizer"]}
    assert set(rows) == {"fused", "foreach", "for-loop"} and all(r["supported"] for r in rows.values())
    psi = run.params["parameters"]
    for r in rows.values():
        assert r["params"] == psi and r["bytes_min"] == 7 * psi * 4 and r["state_bytes"] == 2 * psi * 4
        assert r["GBps"] == pytest.approx(r["bytes_min"] / (r["ms_median"] * 1e-3) / 1e9, rel=1e-12)


def test_experiment_5_tabs(tmp_path, monkeypatch):
    """The page's cell on the committed CPU file and a GPU-shaped copy whose fused step is 5× faster (so the GPU tab
    can only come from it). Per tab: each row's bandwidth is 7 × ψ × element size over its time (bf16 on the GPU
    copy, float32 on CPU), the fastest implementation is named, and the extrapolated 7B step on N = 8 ranks is
    30 bytes × 7e9 / 8 over the fastest bandwidth."""
    import json

    from tests.page_cells import edit, gpu_copies, results_dir, run_cell, tab, table_rows

    res = results_dir(tmp_path, [page.ANATOMY])
    (gpu,) = gpu_copies(res, page.ANATOMY)

    def faster_fused(d):
        for r in d["measurements"]["optimizer"]:
            if r["impl"] == "fused":
                r["ms_median"] /= 5
                r["GBps"] = r["bytes_min"] / (r["ms_median"] / 1e3) / 1e9
    edit(gpu, faster_fused)
    html = run_cell(MD, "ch5-01-exp5-steptime", res, monkeypatch)
    for kind, path, elem in (("CPU", next((res / page.ANATOMY).glob("cpu-*.json")), 4), ("GPU", gpu, 2)):
        body = tab(html, kind)
        opt = json.loads(path.read_text())["measurements"]["optimizer"]
        rows = {r[0]: r for r in table_rows(body)}
        gbps = {}
        for o in opt:
            r = rows[page.IMPL_OF[o["impl"]]]
            gbps[o["impl"]] = 7 * o["params"] * elem / (o["ms_median"] * 1e-3) / 1e9
            assert r[1] == f"{o['ms_median']:.3g}" and r[3] == f"{gbps[o['impl']]:.3g}"
        best = max(gbps, key=gbps.get)
        assert f"가장 빠른 구현: <strong>{page.IMPL_OF[best]}</strong>" in body
        assert f"원소당 {elem} bytes" in body
        (seven_b8,) = [r for r in table_rows(body) if r[:2] == ["7B", "8"]]
        assert seven_b8[2] == f"{30 * 7e9 / 8 / (gbps[best] * 1e9):,.3g}"


def test_experiment_5_cell_is_fast():
    import time

    from snippets import results
    from tests.conftest import cell_budget

    t0 = time.perf_counter()
    results.hardware_tabs(page.ANATOMY, page.adam_tab)
    assert time.perf_counter() - t0 < cell_budget()


def test_experiment_5_tab_says_when_a_hardware_has_no_single_device_run():
    import copy

    from snippets import results

    (run,) = [r for r in results.experiment(page.ANATOMY) if not r.is_gpu]
    d = copy.deepcopy(run.data)
    d["hardware"]["world_size"] = 2
    (plat,) = results.platforms([results.Result(run.path, d)])
    assert "장치 하나 (world size 1) 의 측정이 없습니다 (있는 N: 2)" in page.adam_tab(plat)

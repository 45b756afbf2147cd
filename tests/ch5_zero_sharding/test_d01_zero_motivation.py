"""Ch5-01 ZeRO 의 Motivation 과 메모리 분해: each test asserts a claim the page makes."""
import pytest

from snippets.ch5_zero_sharding import d01_zero_motivation as page
from snippets.common import zero_memory as zm


@pytest.fixture(scope="module")
def counted():
    return page.per_parameter_table()


def test_real_mixed_precision_adam_is_16_bytes_per_parameter(counted):
    """Experiment 1 / Theorem 5.1.3: 2 + 2 + 4 + 4 + 4 bytes per parameter, from the tensors."""
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


def test_units():
    """Experiment 4: 16ψ in GB and GiB; GiB is smaller by 2**30 / 1e9."""
    for r in page.unit_rows():
        assert r["GB"] * zm.GB == r["GiB"] * zm.GIB == r["bytes"] == 16 * r["psi"]
        assert r["GB"] / r["GiB"] == pytest.approx(2 ** 30 / 1e9)
    assert page.unit_rows([1.5e9])[0]["GB"] == 24.0


def test_figure_is_svg():
    assert page.stage_figure().startswith('<figure class="book-figure"><svg')

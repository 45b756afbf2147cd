"""Ch7-02 MoE Parallelism: each test asserts a claim the page makes, against an independent computation."""
import math

import pytest
import torch

from snippets import results
from snippets.ch7_3d_parallelism import d02_moe_expert_parallelism as page
from snippets.common import moe


def test_aux_loss_values_theorem():
    """Theorem 7.2.4: λ at uniform f or P, λE at collapse, the counterexample below λ (computed by hand)."""
    lam, E = 0.01, 8
    c = page.aux_cases(E=E, lam=lam)
    assert c["균등 (모든 확률 1/E)"] == pytest.approx(lam, rel=1e-6)
    assert c["token 마다 다른 expert 선호 (f, P 균등)"] == pytest.approx(lam, rel=1e-6)
    assert c["collapse (한 expert 에 확률 1)"] == pytest.approx(lam * E, rel=1e-6)
    # the proof's numbers, by hand: f = (0.9, 0.1), P = (0.45, 0.55), 2 (0.9·0.45 + 0.1·0.55) = 0.92
    assert c["반례 (E = 2, 90 : 10)"] == pytest.approx(0.92 * lam, rel=1e-6) and c["반례 (E = 2, 90 : 10)"] < lam


def test_aux_loss_bounds_on_random_routers():
    """L_aux ≤ λE always; the relaxation λE Σ P² ≥ λ (Cauchy–Schwarz) on random routers."""
    torch.manual_seed(0)
    for _ in range(50):
        E = int(torch.randint(2, 16, ()))
        p = (torch.randn(32, E) * float(torch.rand(()) * 5)).softmax(-1)
        lam = 0.01
        assert float(moe.aux_loss(p, lam)) <= lam * E + 1e-9
        assert float(lam * E * (p.mean(0) ** 2).sum()) >= lam - 1e-9


def test_gradient_only_through_P():
    """Theorem 7.2.5: autograd's gradient equals the formula with f constant, and both equal central finite
    differences (no autograd) at entries whose perturbation cannot change any argmax (asserted, not skipped)."""
    torch.manual_seed(1)
    g = page.aux_gradient(torch.randn(40, 6) * 3)
    assert torch.allclose(g["autograd"], g["formula"], atol=1e-9)
    z = torch.randn(10, 4, dtype=torch.float64)
    formula = page.aux_gradient(z)["formula"]
    eps, checked = 1e-6, 0
    for t in range(10):
        top2 = z[t].softmax(-1).topk(2).values
        for j in range(4):
            zp, zm = z.clone(), z.clone()
            zp[t, j] += eps
            zm[t, j] -= eps
            assert (zp.softmax(-1).argmax(-1) == z.softmax(-1).argmax(-1)).all(), (t, j, top2)  # f is unchanged
            assert (zm.softmax(-1).argmax(-1) == z.softmax(-1).argmax(-1)).all()
            fd = (float(moe.aux_loss(zp.softmax(-1))) - float(moe.aux_loss(zm.softmax(-1)))) / (2 * eps)
            assert fd == pytest.approx(float(formula[t, j]), rel=1e-5, abs=1e-11)
            checked += 1
    assert checked == 40


def test_capacity_and_routing():
    """Definition 7.2.1: n_cap = ⌈kτφ/E⌉; no expert keeps more than n_cap; kept = Σ min(asked, n_cap) for top-1."""
    # non-integer k·τ·φ/E must round up (tests-audit: a floor survived): values worked by hand
    assert moe.capacity(10, 4, 1.0) == 3          # 10/4 = 2.5 → 3
    assert moe.capacity(50, 5, 1.25) == 13        # 12.5 → 13
    assert moe.capacity(6, 4, 1.0, k=2) == 3      # 2·6/4 = 3 exactly
    assert moe.capacity(4096, 64, 1.25, k=2) == 160
    # an exact product that floating point overshoots (1000/10 · 1.1 = 110.00000000000001): ⌈110⌉ = 110
    assert moe.capacity(1000, 10, 1.1) == 110
    assert moe.capacity(300, 3, 1.1) == 110       # 100 · 1.1, also 110.00000000000001 in float
    # and route() keeps exactly that many when every token wants the same expert
    logits = torch.zeros(10, 4)
    logits[:, 2] = 5.0
    _, _, keep, _ = moe.route(logits, 1, moe.capacity(10, 4, 1.0))
    assert int(keep.sum()) == 3
    torch.manual_seed(2)
    logits = torch.randn(50, 5) + torch.linspace(0, 2, 5)
    for k in (1, 2):
        for cf in (0.5, 1.0, 2.0):
            cap = moe.capacity(50, 5, cf, k)
            expert, gate, keep, _ = moe.route(logits, k, cap)
            kept = torch.bincount(expert[keep], minlength=5)
            assert int(kept.max()) <= cap
            assert torch.allclose(gate.sum(-1), torch.ones(50)) or k == 1
            # priority (GShard): every token's 1st choice before any 2nd choice, so 1st choices are kept
            # up to the capacity exactly as if there were no 2nd choices
            asked1 = torch.bincount(expert[:, 0], minlength=5)
            kept1 = torch.bincount(expert[:, 0][keep[:, 0]], minlength=5)
            assert kept1.tolist() == [min(int(a), cap) for a in asked1]
            if k == 1:
                assert kept.tolist() == kept1.tolist()


def _runs():
    return results.load("moe_ep", kind="cpu")


@pytest.mark.parametrize("r", _runs(), ids=lambda r: r.path.name)
def test_ep_equals_one_process(r):
    """Experiment 2: output, input grads, summed router grad, expert grads, aux loss all equal one process."""
    for k in r.measurements["ranks"]:
        assert max(k["diff"].values()) < 1e-5, k["diff"]
        assert k["experts_with_grad"] == list(range(k["rank"] * r.params["epr"], (k["rank"] + 1) * r.params["epr"]))


@pytest.mark.parametrize("r", _runs(), ids=lambda r: r.path.name)
def test_all_to_all_splits_and_bytes(r):
    """Experiment 3 / Theorem 7.2.6 (a): what rank i sent to j is what j received from i; bytes from the splits;
    collectives: 2 all_to_all_single (counts, ids) + 2 functional forward, 2 functional backward."""
    m, h = r.measurements, r.params["h"]
    ranks = m["ranks"]
    W = m["W"]
    for i in range(W):
        for j in range(W):
            assert ranks[i]["send"][j] == ranks[j]["recv"][i]
    for k in ranks:
        assert sum(k["send"]) == k["kept_assignments"]
        assert k["dispatch_bytes"] == k["kept_assignments"] * h * 4
        assert k["combine_bytes"] == sum(k["recv"]) * h * 4
        assert k["bytes_leaving"] == k["dispatch_bytes"] - k["send"][k["rank"]] * h * 4
        assert k["comm_forward"]["all_to_all_single"]["calls"] == 2
        assert k["comm_forward"]["all_to_all_single"]["bytes"] == 8 * (W + k["kept_assignments"])  # int64 counts + ids
        assert k["funcol_forward"].get("c10d_functional.all_to_all_single") == 2
        assert k["funcol_backward"] == {"c10d_functional.all_to_all_single": 2}
        assert max(k["recv"]) <= k["capacity"] * r.params["epr"]  # a rank's experts accept at most n_cap each per group
    # the uniform formula is the mean over ranks only if routing were even: here it is skewed, the last rank receives most
    assert m["bytes_uniform_formula"] == pytest.approx(r.params["k"] * r.params["T"] * (W - 1) / W * h * 4)
    recv_total = [sum(k["recv"]) for k in ranks]
    assert recv_total[-1] == max(recv_total) and recv_total[-1] > min(recv_total)


@pytest.mark.parametrize("r", _runs(), ids=lambda r: r.path.name)
def test_capacity_sweep(r):
    """Experiment 4 / Theorem 7.2.6 (b): drops fall as φ grows, never below the bound, zero only if Nn_cap ≥ max A_i."""
    rows = page.sweep_rows(r)
    W = r.measurements["W"]
    for k in {x["k"] for x in rows}:
        series = [x for x in rows if x["k"] == k]
        drops = [x["dropped"] for x in series]
        assert drops == sorted(drops, reverse=True)
        for x, s in zip(series, [s for s in r.measurements["sweep"] if s["k"] == k]):
            assert x["dropped"] >= x["bound"] - 1e-12
            if x["dropped"] == 0:
                assert W * x["C"] >= max(s["asked"])
            if x["cf"] < x["imbalance"] * (1 - 1e-9) and W * x["C"] < max(s["asked"]):
                assert x["dropped"] > 0
        assert drops[-1] == 0  # the largest φ in the sweep keeps everything


def test_gpu_tab_of_the_splits_reads_the_gpu_file(tmp_path, monkeypatch):
    """Experiments 2–3 per hardware: each tab's numbers come from that hardware's files. One split in the N = 2
    GPU fixture is changed; the leaving bytes the GPU tab prints are recomputed here from that file."""
    from tests.page_cells import edit, results_dir, run_cell, tab

    md = "ch7-3d-parallelism/02-moe-expert-parallelism.md"
    res = results_dir(tmp_path, ["moe_ep"])
    f = res / "moe_ep" / "gpu-nccl-1x2-nvidia-h200.json"
    edit(f, lambda d: d["measurements"]["ranks"][0]["diff"].update(output=3.25e-3))
    agree = run_cell(md, "ch7-02-exp2-agree", res, monkeypatch)
    assert "3.2e-03" in tab(agree, "GPU") and "3.2e-03" not in tab(agree, "CPU")
    gpu_file = results.read(f)
    rows = page.traffic_rows(gpu_file)
    html = run_cell(md, "ch7-02-exp3-bytes", res, monkeypatch)
    assert all(f"{x['leaving']:,}" in tab(html, "GPU") for x in rows)
    assert "**N = 2**" not in tab(html, "GPU") and "<strong>N = 2</strong>" in tab(html, "GPU")


def test_mixtral_parameter_counts():
    """Experiment 7: total and active parameters of Mixtral 8x7B, recounted here weight by weight from its config
    (a list of weight shapes, not the page's formula), against Mistral's 46.7B / 12.9B and the paper's 47B / 13B."""
    h, ffn, L, E, k, V, kv_dim = 4096, 14336, 32, 8, 2, 32000, 8 * 128
    attn = [(h, h), (kv_dim, h), (kv_dim, h), (h, h)]                # q, k, v, o
    expert = [(ffn, h), (h, ffn), (ffn, h)]                          # w1, w2, w3
    layer_shared = sum(a * b for a, b in attn) + h * E + 2 * h       # + router, two RMSNorm
    one_expert = sum(a * b for a, b in expert)
    outside = 2 * V * h + h                                          # embedding, LM head, final norm
    total = L * (layer_shared + E * one_expert) + outside
    active = L * (layer_shared + k * one_expert) + outside
    got = page.moe_params(page.MIXTRAL_8X7B)
    assert (got["total"], got["active"]) == (total, active)
    assert round(total / 1e9, 1) == 46.7 and round(active / 1e9, 1) == 12.9
    assert round(total / 1e9) == 47 and round(active / 1e9) == 13


@pytest.mark.parametrize("r", _runs(), ids=lambda r: r.path.name)
def test_padded_dispatch_bytes_from_the_real_all_to_all(r):
    """Experiment 5 / Theorem 7.2.7: the bytes CommCounter counted on the padded run's two all_to_all_single calls
    equal 2·E·n_cap·h·e at every φ (so they scale with n_cap, not with what was kept), the padded layer equals one
    process, the uneven split never sends more, and the padding share is at least 1 − 1/φ."""
    m, p = r.measurements, r.params
    E, W, h = m["E"], m["W"], p["h"]
    for rank in m["ranks"]:
        for x in rank["padded"]:
            num = p["k"] * p["T"] * round(x["cf"] * 100)     # φ has two decimals in the sweep: exact integers
            cap = -(-num // (E * 100))                        # ⌈num / (100·E)⌉ without floating point
            assert x["capacity"] == cap and x["a2a_calls"] == 2
            assert x["a2a_bytes"] == 2 * E * cap * h * 4
            assert x["diff"] < 1e-5
            assert x["kept"] <= E * cap
    rows = page.padded_rows(r)
    for x in rows:
        assert x["uneven"] <= x["measured"]
        assert x["padding"] >= 1 - 1 / x["cf"] - 1e-12
    by = {x["cf"]: x for x in rows}
    assert by[2.0]["measured"] / by[1.0]["measured"] == pytest.approx(by[2.0]["cap"] / by[1.0]["cap"])
    assert by[2.0]["uneven"] / by[1.0]["uneven"] < by[2.0]["measured"] / by[1.0]["measured"]   # the page's reading


def test_aux_loss_over_global_vs_micro_batch():
    """Experiment 6: two domain-specific micro-batches, uniform overall: per micro-batch L_aux = 2λ (f_i = P_i = 2/E
    on half the experts: E · (E/2) · (2/E)² = 2), over the global batch λ (Theorem 7.2.4 (a))."""
    g = page.aux_global_vs_micro(E=8, lam=0.01)
    assert g["micro"] == pytest.approx(0.02, rel=1e-6)
    assert g["global"] == pytest.approx(0.01, rel=1e-6)


def test_loss_free_bias_balances_the_load():
    """Experiment 6: the sign-update bias brings max/mean load near 1 while the same router without it stays skewed;
    the bias is negative on the experts the tilt favours and positive on the others."""
    lf = page.loss_free_balance()
    tail_with, tail_without = sum(lf["with_bias"][-50:]) / 50, sum(lf["without"][-50:]) / 50
    assert tail_with < 1.3 and tail_without > 2.0
    assert lf["bias"][0] > 0 > lf["bias"][-1]

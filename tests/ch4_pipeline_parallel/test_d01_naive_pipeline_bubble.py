"""Ch4-01 naive pipeline bubble: each test asserts a claim the page makes against an independent computation."""
import numpy as np
import pytest

from snippets import results
from snippets.ch4_pipeline_parallel import d01_naive_pipeline_bubble as page
from snippets.common import pipeline_sim as ps
from tests.ch4_pipeline_parallel import gpu_fixture, platform, without_world_2

RUNS = page.runs()  # every committed pipeline_bench result, every hardware


def max_columns(md: str) -> int:
    """Columns of the widest Markdown table row in md (escaped pipes inside a cell do not count)."""
    import re

    return max((len(re.findall(r"(?<!\\)\|", ln)) - 1 for ln in md.splitlines() if ln.startswith("|")), default=0)


def test_theorem_414_simulator_against_closed_form():
    """Experiment 1: the simulated naive pipeline gives (p−1)/p of total time and p−1 relative to ideal."""
    for row in page.naive_table((1, 2, 3, 4, 8, 16, 64)):
        p = row[0]
        assert float(row[1]) == pytest.approx(float(row[2]), abs=1e-4)
        assert float(row[3]) == pytest.approx(p - 1, abs=1e-2)
        assert float(row[5]) == pytest.approx(3 * p)  # T_F + T_B + T_W = 3 per stage
    # the page's sentence about p = 64
    tl = ps.simulate("naive", 64, 1)
    assert tl.bubble_fraction() > 0.98 and tl.bubble_relative() == pytest.approx(63)
    # the table the page prints: one value per cell (the simulator agrees), each equal to the theorem's, 4 columns
    md = page.naive_markdown((1, 2, 4, 8, 16, 64))
    assert "≠" not in md and max_columns(md) <= 6
    for p in (1, 2, 4, 8, 16, 64):
        assert f"| {p} | {(p - 1) / p:.4f} | {p - 1:.2f} | {3 * p} |" in md
    assert "≠" in page.agree("0.750", "0.751")  # a disagreement would show on the page


def test_theorem_414_unbalanced_stages():
    """Experiment 3: any stage costs: T = Σc, 𝓑_tot = (p−1)/p, 𝓑_ideal = Σc/max c − 1 ≤ p − 1."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = int(rng.integers(1, 12))
        cost = rng.uniform(0.1, 3.0, size=p)
        tl = ps.simulate("naive", p, 1, stage_cost=cost)
        cf = page.naive_closed_form(3 * cost)
        assert tl.makespan == pytest.approx(cf["makespan"])
        assert tl.bubble_fraction() == pytest.approx(cf["fraction"]) == pytest.approx((p - 1) / p)
        assert tl.bubble_relative() == pytest.approx(cf["relative"])
        assert tl.bubble_relative() <= p - 1 + 1e-12
    rows = page.unbalanced_rows([(1, 1, 1, 2), (2, 1, 1, 1), (1, 1, 1, 5)])
    assert all(r[3] == r[4] == "0.750" for r in rows)
    rel = [float(r[5]) for r in rows]
    assert rel[0] < 3 and rel[2] < rel[0]  # a heavier stage makes 𝓑_ideal smaller (the page's reading)
    md = page.unbalanced_markdown([(1, 1, 1, 1), (1, 1, 1, 2), (2, 1, 1, 1), (1, 2, 3, 4), (1, 1, 1, 5)])
    assert "≠" not in md and max_columns(md) <= 6
    # the printed cells against Theorem 4.1.4 computed here (T = 3Σc, 𝓑_tot = 3/4, 𝓑_ideal = Σc/max c − 1)
    for cost in [(1, 1, 1, 2), (1, 2, 3, 4), (1, 1, 1, 5)]:
        name = " : ".join(map(str, cost))
        assert f"| {name} | {3 * sum(cost):g} | 0.750 | {sum(cost) / max(cost) - 1:.3f} |" in md


def test_theorem_415_turns_gpipes_formula_into_megatrons():
    """Theorem 4.1.5 maps GPipe's published (p−1)/(m+p−1) onto Megatron's published (p−1)/m (two papers' formulas),
    and the simulated GPipe / 1F1B / interleaved runs (equal busy time) land on both."""
    for sched, p, m, v in [("gpipe", 4, 8, 1), ("1f1b", 8, 32, 1), ("interleaved", 4, 8, 2)]:
        tl = ps.simulate(sched, p, m, v, t_f=1 / v, t_b=1 / v, t_w=1 / v)
        # the conversion carries the simulated 𝓑_tot onto Megatron's published (p−1)/(vm) (§2.2.1, §2.2.2) ...
        assert float(ps.frac_to_rel(tl.bubble_fraction())) == pytest.approx((p - 1) / (v * m))
        assert tl.bubble_relative() == pytest.approx((p - 1) / (v * m))
    # ... and GPipe's published (p−1)/(m+p−1) (§2.3) onto Megatron's (p−1)/m, both directions
    for p, m in [(2, 1), (4, 8), (8, 32), (16, 3)]:
        assert float(ps.frac_to_rel((p - 1) / (m + p - 1))) == pytest.approx((p - 1) / m)
        assert float(ps.rel_to_frac((p - 1) / m)) == pytest.approx((p - 1) / (m + p - 1))


def test_theorem_416_comm_formula():
    for p, c, d in [(2, 30.0, 1.0), (4, 30.0, 1.0), (8, 30.0, 1.0), (8, 30.0, 5.0), (3, 7.0, 0.5)]:
        r = page.naive_with_comm(p, c, d)
        assert r["makespan"] == pytest.approx(r["formula_makespan"])
        assert r["fraction"] >= (p - 1) / p
    r = page.naive_with_comm(8, 30.0, 1.0)  # problem 1
    assert r["makespan"] == pytest.approx(254)
    # the solution's arithmetic on the page: 224/254 and 224/30
    assert r["fraction"] == pytest.approx(224 / 254) and r["relative"] == pytest.approx(224 / 30)
    md = page.comm_markdown([(2, 30.0, 1.0), (4, 30.0, 1.0), (8, 30.0, 1.0), (8, 30.0, 5.0)])
    assert "≠" not in md and max_columns(md) <= 6
    for p, d in [(2, 1.0), (8, 5.0)]:
        assert f"| {p} | 30 / {d:g} | {30 * p + 2 * (p - 1) * d:.1f} |" in md


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.hardware["id"])
def test_measured_naive_runs_are_sequential_and_bounded(run):
    """Experiment 2: in every committed run no two ranks compute at once, and 𝓑_tot ≥ (p−1)/p (Theorem 4.1.6)."""
    p = run.params["p"]
    for v in ("sleep", "real"):
        e = page.entry(run, "gpipe", v, 1)
        rows = ps.measured_rows(e)
        assert [len(a) for a in rows] == [2] * p  # F and B on each rank
        assert [a["op"] for a in rows[0]] == ["F", "B"]
        assert ps.max_overlap(rows) < 1e-4
        b = ps.measured_bubbles(rows)
        assert b["fraction"] >= (p - 1) / p - 1e-4
        assert sum(b["busy"]) <= b["makespan"] + 1e-4
        for s in e["step_stats"]:
            assert s["bubble_fraction"] >= (p - 1) / p - 1e-4
        assert e["grad_max_err"] < 1e-6 and e["loss"] == pytest.approx(e["ref_loss"], rel=1e-6)
    assert page.measured_row(page.entry(run, "gpipe", "sleep", 1))[-1] == "0.00"
    md = page.measured_table(run)
    assert max_columns(md) <= 6
    sleep_time_row = next(ln for ln in md.splitlines() if ln.startswith("| sleep"))
    assert sleep_time_row.endswith("| 0.00 |")  # the overlap column of the time table


def test_problem_2_partition_does_not_change_naive_time():
    a = ps.simulate("naive", 4, 1, stage_cost=(1, 1, 1, 2))
    b = ps.simulate("naive", 4, 1, stage_cost=(1.25, 1.25, 1.25, 1.25))
    assert a.makespan == pytest.approx(b.makespan)
    assert a.bubble_fraction() == pytest.approx(b.bubble_fraction())
    assert a.bubble_relative() == pytest.approx(1.5) and b.bubble_relative() == pytest.approx(3)
    for cost in [(1, 1, 1, 2), (1.25, 1.25, 1.25, 1.25)]:  # the m = 16 formula printed beside the simulation
        tl = ps.simulate("gpipe", 4, 16, stage_cost=cost)
        assert tl.makespan == pytest.approx(3 * (sum(cost) + 15 * max(cost)))


def test_problem_3_definitions_at_m_equals_4p():
    for p in range(2, 65):
        assert ps.gpipe_bubble_fraction(p, 4 * p) < 0.2
        assert (ps.gpipe_bubble_relative(p, 4 * p) >= 0.2 - 1e-12) == (p >= 5)
    assert ps.gpipe_bubble_relative(4, 16) == pytest.approx(0.1875)
    assert ps.simulate("gpipe", 8, 32).bubble_relative() == pytest.approx(7 / 32)


def test_figure_cells_fit_the_cell_budget():
    import time

    from tests.ch4_pipeline_parallel import tabs_time, three_hardwares
    from tests.conftest import cell_budget

    for f in (page.naive_gantt, lambda: page.measured_gantt(RUNS[0], "CPU, gloo")):
        t0 = time.thread_time()
        f()
        assert time.thread_time() - t0 < cell_budget()
    from snippets.ch4_pipeline_parallel import the_run

    def exp2_like(plat):  # the page's exp2 cell: table and Gantt chart per hardware
        return page.measured_table(the_run(plat)) + page.measured_gantt(the_run(plat), plat.label)

    assert tabs_time(three_hardwares("pipeline_bench"), exp2_like) < cell_budget()


def test_gpu_tab_reads_the_gpu_file():
    """The GPU tab of experiments 2 and 4: labelled with the GPU, its T_hop recomputed from the GPU file's raw
    timeline (first start to last end over both ranks, minus the summed call durations, over 2(p − 1) hops)."""
    run = gpu_fixture("pipeline_bench")
    plat = platform(run)
    assert plat.is_gpu and "NVIDIA H200" in plat.label
    text = page.hop_tab(plat)
    p = run.data["params"]["p"]
    for v in ("sleep", "real"):
        e = next(x for x in run.data["measurements"] if (x["schedule"], x["variant"], x["m"]) == ("gpipe", v, 1))
        calls = [c for rank in e["timeline"] for c in rank]
        gap = max(c["end"] for c in calls) - min(c["start"] for c in calls) - sum(c["end"] - c["start"] for c in calls)
        # the three parts, from the raw calls (p = 2): F0 end → F1 start, rank 1's F end → B start, B1 end → B0 start
        (f0, b0), (f1, b1) = (sorted(rank, key=lambda c: c["start"]) for rank in e["timeline"])
        parts = [f1["start"] - f0["end"], b1["start"] - f1["end"], b0["start"] - b1["end"]]
        assert sum(parts) == pytest.approx(gap)
        cells = [f"{gap * 1e3:.2f}", *(f"{x * 1e3:.2f}" for x in parts), f"{gap / 2 / (p - 1) * 1e3:.2f}"]
        assert f"| {v} | " + " | ".join(cells) + " |" in text


def test_a_hardware_without_two_ranks_says_so():
    plat = without_world_2(gpu_fixture("pipeline_bench"))
    assert "N = 2 측정이 없습니다" in page.hop_tab(plat) and "world size 8" in page.hop_tab(plat)


def test_experiment_5_layer_flops_match_torchs_flop_counter():
    """24bsh² + 4bs²h (Narayanan 2021 §5.1) against torch's FlopCounterMode on the book's GPT block (matmuls)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from snippets.common.gpt_block import make_block

    for b, s_, h, a in [(2, 32, 64, 4), (1, 128, 32, 2)]:
        blk = make_block(h, a, dtype=torch.float32, p_drop=0.0)
        x = torch.randn(s_, b, h)  # GPTBlock is sequence-first: [s, b, h]
        with FlopCounterMode(display=False) as fc:
            blk(x)
        assert fc.get_total_flops() == page.layer_forward_flops(b, s_, h)


def test_experiment_5_reading_hides_for_large_layers_not_for_small():
    rows = page.p2p_rows([(1, 4096, 8192, 10), (1, 2048, 4096, 4), (1, 128, 1024, 1)], 5e-6, 50e9, 400e12)
    ratios = [float(r[-1]) for r in rows]
    assert ratios[0] < 0.05 and ratios[1] < 0.05 and ratios[2] > 0.5  # "1 % 안팎" vs thin layers near 1
    r = page.p2p_vs_compute(1, 4096, 8192, 2, 10, 0.0, 50e9, 400e12)
    r8 = page.p2p_vs_compute(8, 4096, 8192, 2, 10, 0.0, 50e9, 400e12)
    assert r["ratio"] == pytest.approx(r8["ratio"])  # the bandwidth part does not depend on b


def test_experiment_5_printed_formula_is_the_tables_bandwidth_part():
    """The page's printed S·β/T_F = eF/((24h+4s)·(L/p)·BW), evaluated as printed, equals the bandwidth part computed from
    first principles (64 MiB over 50 GB/s against 10 layers of 24bsh²+4bs²h FLOPs at 400 TFLOP/s: 0.0075) and the table."""
    from pathlib import Path

    md = Path("docs/ch4-pipeline-parallel/01-naive-pipeline-bubble.md").read_text()
    assert r"eF / \bigl((24h + 4s) \cdot (L/p) \cdot \mathrm{BW}\bigr)" in md
    b, s_, h, e, lps, bw, f = 1, 4096, 8192, 2, 10, 50e9, 400e12
    t_send = (b * s_ * h * e) / bw  # 67,108,864 B / 50e9 B/s = 1.342 ms
    t_fwd = lps * (24 * b * s_ * h * h + 4 * b * s_ * s_ * h) / f  # 178.67 ms
    first_principles = t_send / t_fwd
    assert first_principles == pytest.approx(0.0075, abs=5e-5)
    printed = e * f / ((24 * h + 4 * s_) * lps * bw)  # the formula as the page prints it
    assert printed == pytest.approx(first_principles, rel=1e-12)
    assert page.p2p_vs_compute(b, s_, h, e, lps, 0.0, bw, f)["ratio"] == pytest.approx(first_principles, rel=1e-12)
    row = page.p2p_rows([(b, s_, h, lps)], 5e-6, bw, f)[0]
    assert float(row[-1]) == pytest.approx(first_principles, abs=6e-4)  # α adds 5 µs: 0.0075 printed


@pytest.mark.parametrize("ds", results.experiment("deepspeed_pipe"), ids=lambda r: r.hardware["id"])
def test_experiment_5_deepspeed_sent_b_s_h_e_bytes(ds):
    """What DeepSpeed's engine really sent per boundary equals b·s·h·e (rows · d · 4, fp32), every message."""
    rows, d = ds.params["rows"], ds.params["d"]
    for r in ds.measurements["ranks"]:
        assert len(r["sent"]) == ds.measurements["m"]
        assert all(sh == [rows, d] and n == rows * d * 4 for _, sh, n in r["sent"])
    from tests.ch4_pipeline_parallel import platform as plat_of

    assert page.ds_sent_line(plat_of(ds)).count("**True**") == 2

"""Ch4-02 GPipe: each test asserts a claim the page makes against an independent computation."""
import numpy as np
import pytest

from snippets.ch4_pipeline_parallel import d02_gpipe_microbatching as page
from snippets.common import pipeline_sim as ps
from tests.ch4_pipeline_parallel import gpu_fixture, platform, without_world_2


def max_columns(md: str) -> int:
    """Columns of the widest Markdown table row in md (escaped pipes inside a cell do not count)."""
    import re

    return max((len(re.findall(r"(?<!\\)\|", ln)) - 1 for ln in md.splitlines() if ln.startswith("|")), default=0)


def test_theorem_423_start_times_and_bubbles():
    """Experiment 1: every simulated start time equals the closed form; both bubbles equal both formulas."""
    for p in (1, 2, 3, 4, 8):
        for m in (1, 2, 5, 8, 32):
            for tf, tb in [(1.0, 2.0), (0.7, 1.1)]:
                assert page.closed_form_check(p, m, tf, tb) == pytest.approx(0, abs=1e-9)
            tl = ps.simulate("gpipe", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
            assert tl.makespan == pytest.approx((m + p - 1) * 3)
    for row in page.grid_rows():
        assert row[2] == row[3] and row[4] == row[5]
    # the table the page prints: one value per cell, equal to the fractions computed here, ≤ 6 columns
    md = page.grid_markdown(ps_list=(2, 4, 8), ms=(1, 4, 8, 32))
    assert "≠" not in md and max_columns(md) <= 6
    for p, m in [(2, 1), (4, 8), (8, 32)]:
        assert f"| {p} | {m} | {(p - 1) / (m + p - 1):.4f} | {(p - 1) / m:.4f} | 0.0e+00 |" in md


def test_lemma_424_bound_is_tight_for_uniform_times():
    for p, m in [(2, 8), (4, 4), (8, 3)]:
        tl = ps.simulate("gpipe", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
        assert page.path_lower_bound(ps.timeline_rows(tl)) == pytest.approx(tl.makespan)
        one = ps.simulate("1f1b", p, m, t_f=1.0, t_b=1.0, t_w=1.0)
        assert page.path_lower_bound(ps.timeline_rows(one)) == pytest.approx(one.makespan)


def test_lemma_424_holds_for_random_durations():
    """The bound holds whatever the durations: random per-stage costs in the simulator."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        p, m = int(rng.integers(2, 6)), int(rng.integers(1, 9))
        tl = ps.simulate("gpipe", p, m, stage_cost=rng.uniform(0.2, 2.0, p), t_comm=float(rng.uniform(0, 0.3)))
        assert page.path_lower_bound(ps.timeline_rows(tl)) <= tl.makespan + 1e-9


@pytest.fixture(params=page.runs(), ids=lambda r: r.hardware["id"])
def run(request):
    """Every committed pipeline_bench result, every hardware."""
    return request.param


def test_measured_runs_follow_the_gpipe_order_and_the_bound(run):
    """Experiment 2: what ran is Definition 4.2.1's order; makespan ≥ the path bound; loss and grads match."""
    sweep = [e["m"] for e in page.entries(run, "gpipe", "sleep")]
    assert sweep == sorted(set(run.params["m_sweep"]) | {run.params["m_all"]})
    for v in ("sleep", "real"):
        for e in page.entries(run, "gpipe", v):
            rows = ps.measured_rows(e)
            for r, acts in enumerate(rows):
                want = [(o, i) for o, i, _ in ps.rank_order("gpipe", r, len(rows), e["m"])]
                assert [(a["op"], a["mb"]) for a in acts] == want
            b = ps.measured_bubbles(rows)
            assert page.path_lower_bound(rows) <= b["makespan"] + 1e-4
            assert e["grad_max_err"] < 1e-6 and e["loss"] == pytest.approx(e["ref_loss"], rel=1e-6)


def test_measured_bubble_falls_with_m_and_is_bounded_by_lemma_424(run):
    """The page's reading at the two ends of the sweep, and for every m the bound that Lemma 4.2.4 gives the
    measured 𝓑_tot: with T ≥ the path bound LB (its actual durations), 𝓑_tot ≥ 1 − Σbusy / (p·LB). The bound comes
    from the recorded durations, not from the formula, so a wrong order or a wrong busy/makespan fails it."""
    es = page.entries(run, "gpipe", "sleep")
    b = {e["m"]: ps.measured_bubbles(ps.measured_rows(e)) for e in es}
    assert b[max(b)]["fraction"] < b[1]["fraction"] / 2  # the page's "측정은 … 크게 줄어듭니다" at the ends
    p = run.params["p"]
    for e in es:
        rows = ps.measured_rows(e)
        x = b[e["m"]]
        assert x["fraction"] >= 1 - sum(x["busy"]) / (p * page.path_lower_bound(rows)) - 1e-9
    rows = page.sweep_rows(run)
    assert [r[0] for r in rows] == sorted(b)


def test_theorem_425b_live_microbatches_equal_m(run):
    """Experiment 3: counted from saved tensors, every rank holds exactly m micro-batches; rank 0's bytes are m×."""
    for v in ("sleep", "real"):
        for e in page.entries(run, "gpipe", v):
            assert e["peak_live_microbatches"] == [e["m"]] * 2
            assert list(ps.simulate("gpipe", 2, e["m"]).inflight()) == [e["m"]] * 2
            assert e["peak_saved_bytes"][0] == e["m"] * e["per_mb_saved_bytes"][0]
            assert e["peak_saved_bytes"][1] == pytest.approx(1.25 * e["m"] * e["per_mb_saved_bytes"][1])


def test_experiment_3_saved_bytes_are_a_sum_over_tensors_not_storages():
    """The page labels the bytes column a sum over saved tensors and says that in the real variant 8 saved tensors
    of 4 Linear+tanh layers are only 5 storages. Probed here with torch's saved_tensors_hooks on such layers:
    count tensors and unique untyped_storage().data_ptr() (parameters excluded)."""
    import torch
    from pathlib import Path

    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16) for _ in range(4)]
    params = {q.untyped_storage().data_ptr() for l in layers for q in l.parameters()}
    seen = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            seen.append(t)
        return t

    x = torch.randn(8, 16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = x
        for l in layers:
            y = torch.tanh(l(y))
    storages = {t.untyped_storage().data_ptr() for t in seen}
    assert len(seen) == 8 and len(storages) == 5
    summed = sum(t.numel() * t.element_size() for t in seen)
    unique = sum(t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t for t in seen}.values())
    assert summed / unique == pytest.approx(1.6)
    md = Path("docs/ch4-pipeline-parallel/02-gpipe-microbatching.md").read_text()
    assert "saved tensor 마다의 bytes 의 합" in md and "storage 로는 5 개" in md and "$1/1.6$" in md


def test_corollary_426_rule_of_thumb():
    for row in page.rule_of_thumb_rows():
        p = row[0]
        assert float(row[2].rstrip("%")) < 20 and float(row[4].rstrip("%")) < 25
        assert row[6] == 5 * (p - 1) + 1  # smallest m with (p−1)/m < 1/5


def test_problem_1_numbers():
    assert round(100 * float(ps.gpipe_bubble_fraction(8, 32)), 1) == 17.9
    assert round(100 * float(ps.gpipe_bubble_fraction(8, 64)), 1) == 9.9
    assert round(100 * float(ps.gpipe_bubble_relative(8, 32)), 1) == 21.9
    assert round(100 * float(ps.gpipe_bubble_relative(8, 64)), 1) == 10.9


def test_problem_2_best_m():
    p, batch, a, c = 8, 256, 1.0, 0.1
    ms = np.arange(1, 257)
    t = page.step_time(p, ms, batch, a, c)
    assert abs(ms[t.argmin()] - page.best_m(p, batch, a, c)) < 1  # the real minimiser is next to the integer one
    divisors = np.array([d for d in range(1, 257) if 256 % d == 0])
    assert divisors[page.step_time(p, divisors, batch, a, c).argmin()] == 16
    # the closed form matches the simulator (stage time a + c·B/m split as forward:backward = 1:2)
    for m in (4, 16):
        per = a + c * batch / m
        tl = ps.simulate("gpipe", p, m, t_f=per / 3, t_b=2 * per / 3, t_w=0.0)
        assert tl.makespan == pytest.approx(float(page.step_time(p, m, batch, a, c)))


def test_problem_3_remat_adds_one_forward_and_caps_efficiency():
    """The solution's premise, checked on torch: with torch.utils.checkpoint a stage runs its forward twice per
    micro-batch (once in forward, once in backward), so a rank's work is m(2T_F + T_B) and the useful share of it
    is (T_F + T_B)/(2T_F + T_B) = 3/4 at T_B = 2T_F; read off the simulator's busy time, not the formula."""
    import torch
    from torch.utils.checkpoint import checkpoint

    calls = []

    class Stage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            calls.append(1)
            return torch.tanh(self.lin(x))

    st = Stage()
    for _ in range(3):
        checkpoint(st, torch.randn(2, 4, requires_grad=True), use_reentrant=False).sum().backward()
    assert len(calls) == 2 * 3
    p, m, tf, tb = 4, 16, 1.0, 2.0
    remat = ps.simulate("gpipe", p, m, t_f=tf, t_b=tf + tb, t_w=0.0)
    useful = m * (tf + tb)
    assert useful / remat.busy().max() == pytest.approx(0.75)
    assert useful / remat.makespan < 0.75


def test_experiment_4_same_order_different_lengths(run):
    """The page: both variants ran GPipe's order (F 0..m−1, then B 0..m−1 on every rank), read here from the raw
    calls sorted by start time; the printed spread of F and B durations equals the values recomputed from the raw
    calls; the printed 𝓑_tot range over steps holds the median step's 𝓑_tot recomputed from its raw calls."""
    m = run.params["m_all"]
    rows = {r[0]: r for r in page.spread_rows(run, m)}
    assert set(rows) == {"sleep", "real"}
    for v, row in rows.items():
        e = next(x for x in run.measurements if (x["schedule"], x["variant"], x["m"]) == ("gpipe", v, m))
        for rank in e["timeline"]:
            calls = sorted(rank, key=lambda c: c["start"])
            assert [(c["op"], c["mb"]) for c in calls] == [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
        for op, col in (("F", 1), ("B", 3)):
            d = [c["end"] - c["start"] for rank in e["timeline"] for c in rank if c["op"] == op]
            assert row[col] == f"{min(d) * 1e3:.1f}–{max(d) * 1e3:.1f}"
            assert row[col + 1] == f"{max(d) / min(d):.2f}"
        # the 𝓑_tot range over steps: the one step whose calls the file keeps (the median) is recomputed here from
        # its raw calls; it must be the step_stats entry the file names and lie inside the printed range
        lo, hi = (float(x) for x in row[5].split("–"))
        own = _bubble_from_json(e)
        assert e["step_stats"][e["median_step"]]["bubble_fraction"] == pytest.approx(own, abs=1e-9)
        assert lo - 5e-4 <= own <= hi + 5e-4 and len(e["step_stats"]) == run.params["steps"]
        spans = sorted(st["makespan_s"] for st in e["step_stats"])
        assert e["step_stats"][e["median_step"]]["makespan_s"] == spans[len(spans) // 2]  # the median step by makespan


def test_figure_cells_fit_the_cell_budget(run):
    """GUIDE: one cell under 1 s; the tab functions of both hardware together (the page's cells draw both)."""
    import time

    from tests.conftest import cell_budget

    gpu = platform(gpu_fixture("pipeline_bench"))
    for f in (lambda: page.jitter_tab(gpu) + page.gantt_panels(run, run.params["m_all"]),
              lambda: page.sweep_tab(gpu) + page.sweep_figure(run)):
        t0 = time.thread_time()
        f()
        assert time.thread_time() - t0 < cell_budget()


def _bubble_from_json(e: dict) -> float:
    """𝓑_tot of one entry straight from its raw timeline: 1 − Σ busy / (p · makespan)."""
    calls = [c for rank in e["timeline"] for c in rank]
    span = max(c["end"] for c in calls) - min(c["start"] for c in calls)
    return 1 - sum(c["end"] - c["start"] for c in calls) / (len(e["timeline"]) * span)


def test_gpu_tabs_read_the_gpu_file():
    """The GPU tabs: the preset from the GPU file's params, the sweep's two ends recomputed from its raw timelines,
    Theorem 4.2.5 (b) and Lemma 4.2.4 checked on it, the Gantt panels labelled with the GPU."""
    run = gpu_fixture("pipeline_bench")
    plat = platform(run)
    sweep = page.sweep_tab(plat)
    assert f"preset `{run.data['params']['preset']}`" in sweep
    es = sorted((e for e in run.data["measurements"] if e["schedule"] == "gpipe" and e["variant"] == "sleep"),
                key=lambda e: e["m"])
    assert (f"m = {es[0]['m']} 의 {_bubble_from_json(es[0]):.3f} 에서 m = {es[-1]['m']} 의 "
            f"{_bubble_from_json(es[-1]):.3f} 로") in sweep
    assert "GPU (NVIDIA H200), NCCL" in sweep
    assert max_columns(sweep) <= 6  # the sweep is two tables (𝓑_tot with T, then 𝓑_ideal)
    ideal = sweep[sweep.index("**이상 시간 대비**"):]
    for e in es:  # the 𝓑_ideal table: measured, from the raw timeline (T / max busy − 1), beside (p−1)/m
        calls = [c for rank in e["timeline"] for c in rank]
        span = max(c["end"] for c in calls) - min(c["start"] for c in calls)
        busy = max(sum(c["end"] - c["start"] for c in rank) for rank in e["timeline"])
        p = run.data["params"]["p"]
        assert f"| {e['m']} | {span / busy - 1:.3f} |" in ideal and f"| {(p - 1) / e['m']:.3f} |" in ideal
    assert "두 rank 의 peak 가 정확히 m: **True**" in page.memory_tab(plat)
    assert "rank 1 1.25" in page.memory_tab(plat)  # the loss's saved input and target: 10/8 of a stage's layers
    assert "하한 ≤ T: **True**" in page.bound_tab(plat)
    assert page.jitter_tab(plat).count("GPU (NVIDIA H200), NCCL") == 2  # the sleep and real panels


def test_a_hardware_without_two_ranks_says_so():
    plat = without_world_2(gpu_fixture("pipeline_bench"))
    for tab in (page.sweep_tab, page.bound_tab, page.memory_tab, page.jitter_tab):
        assert "N = 2 측정이 없습니다" in tab(plat)


def test_the_figure_cells_with_three_hardwares_fit_the_budget():
    """Finding 9: the sweep and jitter cells with CPU + two GPU models (a relabelled copy) each stay under 1 s."""
    from tests.ch4_pipeline_parallel import tabs_time, three_hardwares
    from tests.conftest import cell_budget

    runs = three_hardwares("pipeline_bench")
    for tab in (page.sweep_tab, page.jitter_tab):
        assert tabs_time(runs, tab) < cell_budget(), tab.__name__


def test_a_mutated_gpu_file_changes_the_gpu_tab_only():
    """Lengthen one recorded backward of the GPU file's GPipe m = m_all sleep run (rank 1's last call, + 50 ms):
    the GPU sweep tab's measured 𝓑_tot for that m moves to the value recomputed from the mutated JSON, and the CPU
    tab is unchanged."""
    from snippets import results
    from tests.ch4_pipeline_parallel import mutated

    g = gpu_fixture("pipeline_bench")
    m_all = g.data["params"]["m_all"]

    def slower(d):
        e = next(x for x in d["measurements"] if (x["schedule"], x["variant"], x["m"]) == ("gpipe", "sleep", m_all))
        last = max(e["timeline"][1], key=lambda c: c["end"])
        last["end"] += 0.05

    bad = mutated(g, slower)
    cpu = [r for r in page.runs() if not r.is_gpu]
    before = {p.kind: page.sweep_tab(p) for p in results.platforms(cpu + [g])}
    after = {p.kind: page.sweep_tab(p) for p in results.platforms(cpu + [bad])}
    assert before["cpu"] == after["cpu"] and before["gpu"] != after["gpu"]
    e = next(x for x in bad.data["measurements"] if (x["schedule"], x["variant"], x["m"]) == ("gpipe", "sleep", m_all))
    assert f"| {m_all} | {_bubble_from_json(e):.3f} |" in after["gpu"]


def test_intuition_gantt_reads_the_simulator():
    import re

    svg = page.intuition_gantt()
    frac = [float(x) for x in re.findall(r"B_tot = ([0-9.]+)", svg)]
    assert frac == [round(ps.simulate("naive", 4, 1).bubble_fraction(), 3), round(float(ps.gpipe_bubble_fraction(4, 8)), 3)]


def test_holdings_diagram_counts_theorems_4_2_5_and_4_3_4():
    """The 📖 diagrams (Ch4-02 GPipe, Ch4-03 1F1B): at the fullest moment each rank holds what the theorems say,
    m for GPipe and min(p − r, m) for 1F1B, closed forms written here, and the drawing lists those counts."""
    for sched, p, m, want in [("gpipe", 4, 8, [8, 8, 8, 8]), ("1f1b", 4, 8, [min(4 - r, 8) for r in range(4)]),
                              ("1f1b", 8, 4, [min(8 - r, 4) for r in range(8)])]:
        tl = ps.simulate(sched, p, m)
        held = page.holdings(tl, page.fullest_moment(tl))
        assert [len(h) for h in held] == want
        svg = page.holdings_svg(sched, p, m)
        assert all(f"{n} 개" in svg for n in set(want))

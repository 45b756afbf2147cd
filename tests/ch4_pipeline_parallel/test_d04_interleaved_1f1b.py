"""Ch4-04 interleaved 1F1B: each test asserts a claim the page makes against an independent computation."""
import time

import pytest

from snippets.ch4_pipeline_parallel import d04_interleaved_1f1b as page
from snippets.common import pipeline_sim as ps
from tests.ch4_pipeline_parallel import gpu_fixture, platform, without_world_2
from tests.conftest import cell_budget


def max_columns(md: str) -> int:
    """Columns of the widest Markdown table row in md (escaped pipes inside a cell do not count)."""
    import re

    return max((len(re.findall(r"(?<!\\)\|", ln)) - 1 for ln in md.splitlines() if ln.startswith("|")), default=0)

RUNS = page.runs()  # every committed pipeline_bench result, every hardware


def test_theorem_443_bound_achieved_on_the_stated_range():
    for p in range(2, 9):
        for v in range(1, 5):
            for m in (p, 2 * p, 4 * p):
                tl = page.interleaved(p, m, v)
                assert tl.makespan == pytest.approx(page.lower_bound(p, m, v))
                assert tl.bubble_relative() == pytest.approx(float(ps.interleaved_bubble_relative(p, m, v)))
                bfs = ps.simulate("looped_bfs", p, m, v, t_f=1 / v, t_b=2 / v, t_w=0.0)
                assert bfs.makespan == pytest.approx(page.lower_bound(p, m, v))  # the page: both reach the bound
    for row in page.bubble_rows():
        assert row[3] == row[4] and row[5] == row[6]
    # the table the page prints: one value per cell, equal to (p−1)/(vm) and to the path of the proof written out here
    md = page.bubble_markdown(grid=((2, 8), (4, 8), (4, 16), (8, 32)), vs=(1, 2, 4))
    assert "≠" not in md and max_columns(md) <= 6
    for p, m, v in [(2, 8, 1), (4, 16, 2), (8, 32, 4)]:
        path = (p - 1) / v + m * 3 + (p - 1) * 2 / v
        assert f"| {p} | {m} | {v} | {(p - 1) / (v * m):.4f} | {path:g} |" in md


def test_lower_bound_holds_with_unbalanced_chunks_and_comm():
    import numpy as np

    rng = np.random.default_rng(3)
    for _ in range(10):
        p, v = int(rng.integers(2, 5)), int(rng.integers(1, 4))
        m = p * int(rng.integers(1, 4))
        cost = rng.uniform(0.5, 1.5, p * v)
        tl = ps.simulate("interleaved", p, m, v, t_f=1 / v, t_b=2 / v, t_w=0.0, stage_cost=cost,
                         t_comm=float(rng.uniform(0, 0.2)))
        rows = ps.timeline_rows(tl)
        # the path of the proof, with the actual durations
        head = sum(a["end"] - a["start"] for r in range(p - 1) for a in rows[r] if a["op"] == "F" and a["mb"] == 0 and a["chunk"] == 0)
        tail = sum(a["end"] - a["start"] for r in range(p - 1) for a in rows[r] if a["op"] == "B" and a["mb"] == m - 1 and a["chunk"] == 0)
        busy = sum(a["end"] - a["start"] for a in rows[p - 1])
        assert head + busy + tail <= tl.makespan + 1e-9


def test_theorem_444_memory_against_torch_and_p2p_counted_in_the_timeline():
    """Peak chunks = torch 2.13's own interleaved warm-up count (_get_warmup_ops, multiply_factor 2) + 1, measured
    by the simulator's timeline walk; the boundary crossings counted from the simulated dependencies' ranks."""
    from torch.distributed.pipelining.schedules import _get_warmup_ops

    for p in range(2, 9):
        for v in range(2, 6):
            m = 4 * p
            peak = page.interleaved(p, m, v).inflight()
            torch_w = [_get_warmup_ops(r, v, p, p, m, multiply_factor=2) for r in range(p)]
            assert list(peak) == [w + 1 for w in torch_w]
            assert peak[0] / v == pytest.approx(float(ps.interleaved_first_rank_memory(p, v)))
            assert peak[0] / v <= (3 * p - 1) / 2 + 1e-12  # the bound for v ≥ 2
            tl = page.interleaved(p, m, v)
            fwd = (tl.op == 0) & (tl.mb == 0)
            st, rk = tl.stage[fwd], tl.rank[fwd]
            owner = dict(zip(st.tolist(), rk.tolist()))
            crossings = sum(owner[s_] != owner[s_ - 1] for s_ in owner if s_ > 0)
            assert crossings == page.p2p_messages(p, v)
    rows = page.memory_rows()
    mem = [float(r[3]) for r in rows[1:]]
    assert mem == sorted(mem, reverse=True) and all(x > 8 for x in mem)  # decreasing in v, above 1F1B's pA
    assert rows[1][5] == "1.438"
    md = page.memory_markdown(p=8, m=32, vs=(2, 4, 8))
    assert "≠" not in md and max_columns(md) <= 6
    for v in (2, 4, 8):  # torch's warm-up count + 1 chunks, ÷ v for A; the crossings pv − 1 counted above
        chunks = _get_warmup_ops(0, v, 8, 8, 32, multiply_factor=2) + 1
        assert f"| {v} | {chunks} | {chunks / v:.3f} | {chunks / v / 8:.3f} | {8 * v} |" in md
        assert f"| {v} | {8 * v - 1} | {(8 * v - 1) / 7:.2f} |" in md


def test_v_equals_1_is_1f1b_not_the_interleaved_formula():
    """The page: at v = 1 Megatron runs 1F1B (pA on rank 0); the interleaved warm-up rule at v = 1 (which torch's
    _get_warmup_ops also gives) would hold 2p − 1, the value the formula M_0 reaches at v = 1."""
    from torch.distributed.pipelining.schedules import _get_warmup_ops

    for p in range(2, 9):
        m = 4 * p
        assert ps.simulate("1f1b", p, m).inflight()[0] == p
        assert ps.simulate("interleaved", p, m, 1).inflight()[0] == 2 * p - 1 == _get_warmup_ops(0, 1, p, p, m) + 1
        assert float(ps.interleaved_first_rank_memory(p, 1)) == 2 * p - 1


def test_problem_2_small_m_degenerates_to_gpipe_memory():
    assert page.interleaved(8, 8, 4).inflight()[0] == 32


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.hardware["id"])
def test_measured_orders_and_live_chunks(run):
    p, m = run.params["p"], run.params["m_all"]
    for v_name in ("sleep", "real"):
        for sched in ("interleaved", "looped_bfs"):
            e = page.entry(run, sched, v_name, m)
            rows = ps.measured_rows(e)
            for r, acts in enumerate(rows):
                want = [(o, i, c) for o, i, c in ps.rank_order(sched, r, p, m, 2)]
                assert [(a["op"], a["mb"], a["chunk"]) for a in acts] == want
            sim = ps.simulate(sched, p, m, 2).inflight()
            assert e["peak_live_microbatches"] == list(sim)
            assert e["stages_per_rank"] == [[0, 2], [1, 3]]
            assert e["grad_max_err"] < 1e-6
    assert page.entry(run, "interleaved", "sleep", m)["peak_live_microbatches"] == [5, 3]
    assert page.entry(run, "looped_bfs", "sleep", m)["peak_live_microbatches"] == [2 * m, 2 * m]


def test_experiment_4_best_v_moves_with_delta():
    best = []
    for delta in (0.0, 0.2):
        ts = [ps.simulate("1f1b" if v == 1 else "interleaved", 4, 8, v, t_f=1 / v, t_b=2 / v, t_w=0.0,
                          t_comm=delta).makespan for v in (1, 2, 4)]
        best.append((1, 2, 4)[min(range(3), key=ts.__getitem__)])
    assert best == [4, 2]
    # the printed table: at T_hop = 0 the step times are Theorem 4.4.3's bound m(T_F+T_B) + (p−1)(T_F+T_B)/v
    md = page.delta_markdown(deltas=(0.0, 0.05, 0.2), vs=(1, 2, 4))
    assert max_columns(md) <= 6
    bound = [8 * 3 + 3 * 3 / v for v in (1, 2, 4)]
    assert f"| 0 | {bound[0]:.2f} | {bound[1]:.2f} | {bound[2]:.2f} | 4 |" in md
    assert md.splitlines()[-1].endswith("| 2 |")  # T_hop = 0.2: v = 2 is fastest (the page's reading)


def test_figures_fit_the_cell_budget():
    run = RUNS[0]
    for f in (page.sim_gantt, lambda: page.measured_gantt(run)):
        t0 = time.thread_time()
        f()
        assert time.thread_time() - t0 < cell_budget()


def test_gpu_tabs_read_the_gpu_file():
    """The GPU tabs follow the GPU file: swap the start times of rank 0's first two recorded calls of the interleaved
    run in a copy, and exactly that line of the GPU tab turns False (its order is no longer Definition 4.4.2's,
    ps.rank_order); the CPU tab is unchanged; the live-chunk column is the file's peak_live_microbatches."""
    from snippets import results
    from tests.ch4_pipeline_parallel import mutated

    run = gpu_fixture("pipeline_bench")
    m = run.data["params"]["m_all"]

    def pick(d):
        return next(x for x in d["measurements"] if (x["schedule"], x["variant"], x["m"]) == ("interleaved", "sleep", m))

    def swap(d):
        calls = sorted(pick(d)["timeline"][0], key=lambda c: c["start"])
        a, b = calls[0], calls[1]
        a["start"], b["start"] = b["start"], a["start"]
        a["end"], b["end"] = b["end"], a["end"]

    bad = mutated(run, swap)
    calls = sorted(pick(bad.data)["timeline"][0], key=lambda c: c["start"])
    assert (calls[0]["stage"], calls[0]["mb"]) != (calls[1]["stage"], calls[1]["mb"])  # the swap changed the order
    cpu = [r for r in RUNS if not r.is_gpu]
    before = {p.kind: page.order_tab(p) for p in results.platforms(cpu + [run])}
    after = {p.kind: page.order_tab(p) for p in results.platforms(cpu + [bad])}
    assert before["cpu"] == after["cpu"]
    false_lines = [ln for ln in after["gpu"].splitlines() if ln.endswith("**False**")]
    assert len(false_lines) == 1 and false_lines[0].startswith("- `interleaved` rank 0:")
    tab = page.interleave_tab(platform(run))
    assert " / ".join(map(str, pick(run.data)["peak_live_microbatches"])) in tab
    assert max_columns(tab) <= 6


def test_the_interleave_cell_with_three_hardwares_fits_the_budget():
    from tests.ch4_pipeline_parallel import tabs_time, three_hardwares

    assert tabs_time(three_hardwares("pipeline_bench"), page.interleave_tab) < cell_budget()


def test_a_hardware_without_two_ranks_says_so():
    plat = without_world_2(gpu_fixture("pipeline_bench"))
    assert "N = 2 측정이 없습니다" in page.order_tab(plat) and "N = 2 측정이 없습니다" in page.interleave_tab(plat)


def test_problem_1_arithmetic_written_on_the_page():
    """The 기초 solution's hand arithmetic (7/(16v), 7/(16v+7), 8A(1 + 7/(8v))) against the simulator's timelines."""
    import re
    from pathlib import Path

    text = Path(__file__).resolve().parents[2].joinpath("docs/ch4-pipeline-parallel/04-interleaved-1f1b.md").read_text()
    for v, rel, tot, mem in [(1, "0.4375", "0.304", "8A"), (2, "0.219", "0.179", "11.5A"), (4, "0.109", "0.099", "9.75A")]:
        tl = ps.simulate("1f1b", 8, 16) if v == 1 else page.interleaved(8, 16, v)
        assert f"{tl.bubble_relative():.4f}".startswith(rel) or f"{tl.bubble_relative():.3f}" == rel
        assert f"{tl.bubble_fraction():.3f}" == tot
        assert f"{tl.inflight()[0] / v:g}A" == mem
        row = next(ln for ln in text.splitlines() if re.match(rf"\s*\| {v} \| \$7/", ln))
        assert rel in row and tot in row and mem.rstrip("A") in row


def test_v_equals_1_row_has_1f1bs_step_time():
    """Experiment 1's v = 1 rows run Definition 4.4.2's rule with one chunk: its makespan is 1F1B's (the page's
    sentence), while its warm-up (and memory) is not (test_v_equals_1_is_1f1b_not_the_interleaved_formula)."""
    for p, m in ((2, 8), (4, 8), (4, 16), (8, 32)):
        assert page.interleaved(p, m, 1).makespan == pytest.approx(ps.simulate("1f1b", p, m, t_f=1.0, t_b=2.0, t_w=0.0).makespan)


def test_experiment_3_real_variant_reading_from_the_results_file():
    """The printed reading of the real variant: the order of the measured 𝓑_tot (computed here from the raw start/end
    times), the near-equal busy time it relies on (within 5 %), and the simulator's verdict it quotes."""
    from snippets.common import pipeline_sim as ps

    for run in page.runs():
        m = run.params["m_all"]
        raw = {}
        for sched in ("1f1b", "interleaved", "looped_bfs"):
            rws = ps.measured_rows(page.entry(run, sched, "real", m))
            span = max(a["end"] for r in rws for a in r) - min(a["start"] for r in rws for a in r)
            busy = sum(a["end"] - a["start"] for r in rws for a in r)
            raw[sched] = (1 - busy / (len(rws) * span), busy)
        text = page.real_reading(run)
        n = page.real_reading_numbers(run)
        worse = raw["interleaved"][0] > raw["1f1b"][0]
        assert ("**오히려 나쁩니다**" in text) == worse
        for sched in raw:
            assert n[sched]["tot"] == pytest.approx(raw[sched][0])
        # the hop fed to the simulator is the real variant's own: its m = 1 GPipe run, T − Σbusy over 2(p − 1), raw
        e1 = next(x for x in run.measurements if (x["schedule"], x["variant"], x["m"]) == ("gpipe", "real", 1))
        calls = [c for rank in e1["timeline"] for c in rank]
        gap = max(c["end"] for c in calls) - min(c["start"] for c in calls) - sum(c["end"] - c["start"] for c in calls)
        assert n["hop"] == pytest.approx(gap / (2 * (run.params["p"] - 1)))
        assert f"T_hop ({gap / (2 * (run.params['p'] - 1)) * 1e3:.2f} ms)" in text
        if worse:
            assert abs(raw["interleaved"][1] - raw["1f1b"][1]) < 0.05 * raw["1f1b"][1]  # "계산 시간 합은 거의 같고"
            assert ("여전히 interleaved 가 낫다고" in text) == (n["interleaved"]["sim"] < n["1f1b"]["sim"])

"""Ch4-03 1F1B: each test asserts a claim the page makes against an independent computation."""
import time

import numpy as np
import pytest
import torch

from snippets.ch4_pipeline_parallel import d03_one_f_one_b as page
from snippets.common import pipeline_sim as ps
from tests.ch4_pipeline_parallel import gpu_fixture, platform, without_world_2
from tests.conftest import cell_budget

RUNS = page.runs()  # every committed pipeline_bench result, every hardware
DS_RUNS = page.deepspeed_runs()  # every committed deepspeed_pipe result


def test_theorem_433_same_makespan_as_gpipe_for_all_m():
    for p in range(1, 9):
        for m in range(1, 20):
            for tf, tb in [(1.0, 2.0), (1.0, 1.0), (0.4, 1.3)]:
                g = ps.simulate("gpipe", p, m, t_f=tf, t_b=tb, t_w=0.0)
                o = ps.simulate("1f1b", p, m, t_f=tf, t_b=tb, t_w=0.0)
                assert o.makespan == pytest.approx(g.makespan) == pytest.approx((m + p - 1) * (tf + tb))


def test_theorem_433_proof_schedule_is_the_earliest_one():
    """The start times written in the proof are exactly the simulator's earliest start times."""
    for p, m in [(2, 8), (4, 8), (4, 3), (8, 32), (5, 5)]:
        tf, tb = 1.0, 2.0
        tl = ps.simulate("1f1b", p, m, t_f=tf, t_b=tb, t_w=0.0)
        for k in range(len(tl.start)):
            r, j = int(tl.rank[k]), int(tl.mb[k])
            w = min(p - 1 - r, m)
            if tl.op[k] == 1:
                want = (p + j) * tf + (j + p - 1 - r) * tb
            elif j <= w:
                want = (r + j) * tf
            else:
                kk = j - w
                want = (p - 1 + kk) * tf + (kk + p - 1 - r) * tb
            assert tl.start[k] <= want + 1e-9  # earliest ≤ the proof's feasible times
        assert tl.makespan == pytest.approx((m + p - 1) * (tf + tb))


def test_theorem_434_inflight_is_min_p_minus_r_m_for_any_durations():
    rng = np.random.default_rng(2)
    for p in range(1, 10):
        for m in range(1, 20):
            want = [min(p - r, m) for r in range(p)]
            assert [page.inflight_from_order(page.one_f_one_b_order(r, p, m)) for r in range(p)] == want
            tl = ps.simulate("1f1b", p, m, stage_cost=rng.uniform(0.2, 3, p), t_comm=float(rng.uniform(0, 1)))
            assert list(tl.inflight()) == want
            assert list(ps.simulate("gpipe", p, m).inflight()) == [m] * p
    for row in page.compare_rows():
        assert row[2] == row[3] and row[7] == row[8]


def test_corollary_435_sums():
    for p, m in [(8, 32), (4, 16)]:
        o = ps.simulate("1f1b", p, m).inflight()
        assert o.sum() == p * (p + 1) // 2 and o[0] / m == pytest.approx(p / m)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.hardware["id"])
def test_measured_orders_and_live_counts(run):
    """Experiments 2-3: what ran is Definition 4.3.1's order; live micro-batches are p − r (1F1B) and m (GPipe)."""
    for v in ("sleep", "real"):
        for sched in ("gpipe", "1f1b"):
            for e in page.entries(run, sched, v):
                rows = ps.measured_rows(e)
                p = len(rows)
                for r, acts in enumerate(rows):
                    assert [f"{a['op']}{a['mb']}" for a in acts] == [f"{o}{i}" for o, i, _ in ps.rank_order(sched, r, p, e["m"])]
                want = [min(p - r, e["m"]) for r in range(p)] if sched == "1f1b" else [e["m"]] * p
                assert e["peak_live_microbatches"] == want
                assert e["grad_max_err"] < 1e-6
    assert len(page.measured_rows_table(run)) >= 3


def test_torch_planned_table_differs_from_what_ran():
    """The page's warning: Schedule1F1B's pipeline_order for rank p−1 lists micro-batches from 1 (torch 2.13)."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    ops = get_schedule_ops("1F1B", 2, 4)
    planned = [a.microbatch_index for a in ops[1] if a and a.computation_type.name == "FORWARD"]
    ran = [a["mb"] for a in ps.measured_rows(next(e for e in page.entries(RUNS[0], "1f1b") if e["m"] == 8))[1]
           if a["op"] == "F"]
    assert ran == list(range(8))
    if torch.__version__.startswith("2.13"):
        assert planned == [1, 2, 3, 4]


@pytest.mark.parametrize("ds", DS_RUNS, ids=lambda r: r.hardware["id"])
def test_deepspeed_stream_and_loss(ds):
    """Experiment 4: executed = planned TrainSchedule stream; its F/B order is 1F1B; buffers max(2, p − r); loss matches."""
    mm = ds.measurements
    p = ds.params["p"]
    for r in mm["ranks"]:
        assert r["executed"] == [c for step in r["planned"] for c in step]
        assert page.deepspeed_fb(r) == page.one_f_one_b_order(r["stage_id"], p, mm["m"])
        assert r["num_pipe_buffers"] == max(2, min(p - r["stage_id"], mm["m"]))
        assert r["loss"] == pytest.approx(mm["ref_loss"], rel=1e-6)
    # the same rule, recomputed from the installed DeepSpeed source
    from deepspeed.runtime.pipe.schedule import TrainSchedule

    for stages in (2, 4, 8):
        for sid in range(stages):
            assert TrainSchedule(micro_batches=16, stages=stages, stage_id=sid).num_pipe_buffers() == max(2, stages - sid)


def test_problem_2_comm_hurts_1f1b_more():
    g = ps.simulate("gpipe", 4, 8, t_f=1, t_b=1, t_w=1, t_comm=0.25)
    o = ps.simulate("1f1b", 4, 8, t_f=1, t_b=1, t_w=1, t_comm=0.25)
    assert g.makespan == pytest.approx(33 + 2 * 3 * 0.25)
    assert o.makespan > g.makespan


def test_problem_3_versions():
    v = page.pipedream_weight_versions(8)
    assert v["pipedream"] == [min(8 - r, 64) for r in range(8)] == list(ps.simulate("1f1b", 8, 64).inflight())
    assert v["2bw"] == [2] * 8 and v["flush"] == [1] * 8


def test_figures_fit_the_cell_budget():
    run = RUNS[0]
    gpu = platform(gpu_fixture("pipeline_bench"))
    for f in (page.sim_gantt, lambda: page.measured_gantt(run, 8) + page.compare_tab(gpu)):
        t0 = time.thread_time()
        svg = f()
        assert time.thread_time() - t0 < cell_budget()
        assert "rank 1" in svg


def test_gpu_tabs_read_the_gpu_files():
    """The GPU tabs: one row per m both schedules measured in the GPU file; a planted wrong live count in a copy of
    the GPU file (1F1B rank 0 holds one micro-batch more than p − r) turns the GPU tab's 1F1B verdict False, leaves
    GPipe's and the CPU tab alone; the DeepSpeed stream and losses are the GPU deepspeed_pipe file's."""
    from snippets import results
    from tests.ch4_pipeline_parallel import mutated

    run = gpu_fixture("pipeline_bench")
    shared = {e["m"] for e in run.data["measurements"] if e["schedule"] == "1f1b" and e["variant"] == "sleep"}
    assert len(page.measured_rows_table(run)) == len(shared)

    def one_more(d):
        e = next(x for x in d["measurements"] if (x["schedule"], x["variant"]) == ("1f1b", "sleep"))
        e["peak_live_microbatches"][0] += 1

    cpu = [r for r in RUNS if not r.is_gpu]
    before = {p.kind: page.memory_tab(p) for p in results.platforms(cpu + [run])}
    after = {p.kind: page.memory_tab(p) for p in results.platforms(cpu + [mutated(run, one_more)])}
    assert before["cpu"] == after["cpu"]
    # the verdict the unmutated file earns, recomputed here: 1F1B's live peak on rank r is min(m, p − r)
    p = run.data["params"]["p"]
    ok = all(list(e["peak_live_microbatches"]) == [min(e["m"], p - r) for r in range(p)]
             for e in run.data["measurements"] if e["schedule"] == "1f1b")
    assert f"1F1B **{ok}**" in before["gpu"] and "1F1B **False**" in after["gpu"]
    ds = gpu_fixture("deepspeed_pipe")
    text = page.deepspeed_tab(platform(ds))
    for r in ds.data["measurements"]["ranks"]:
        assert f"손실 {r['loss']:.8f}" in text and f"`num_pipe_buffers()` = {r['num_pipe_buffers']}" in text
    assert f"{ds.data['measurements']['ref_loss']:.8f}" in text


def test_the_compare_cell_with_three_hardwares_fits_the_budget():
    from tests.ch4_pipeline_parallel import tabs_time, three_hardwares

    assert tabs_time(three_hardwares("pipeline_bench"), page.compare_tab) < cell_budget()


def test_a_hardware_without_two_ranks_says_so():
    for prog, tabs in (("pipeline_bench", (page.compare_tab, page.memory_tab)), ("deepspeed_pipe", (page.deepspeed_tab,))):
        plat = without_world_2(gpu_fixture(prog))
        assert all("N = 2 측정이 없습니다" in tab(plat) for tab in tabs)

"""Ch4-05 Chimera / zero bubble: each test asserts a claim the page makes against an independent computation."""
import time

import numpy as np
import pytest

from snippets.ch4_pipeline_parallel import d05_chimera_bidirectional as page
from snippets.common import pipeline_sim as ps
from tests.ch4_pipeline_parallel import gpu_fixture, platform, without_world_2
from tests.conftest import cell_budget

RUNS = page.runs()  # every committed pipeline_bench result, every hardware


def test_theorem_454_zb_h1_bound_achieved_and_formula():
    for p in range(2, 9):
        for m in (p, 2 * p, 4 * p, 8 * p):
            for tf, tb, tw in [(1, 1, 1), (1, 1.5, 0.5), (1, 2, 1)]:
                z = ps.simulate("zb_h1", p, m, t_f=tf, t_b=tb, t_w=tw)
                assert z.makespan == pytest.approx(page.zb_h1_path_bound(p, m, tf, tb, tw))
                assert z.bubble_relative() == pytest.approx(float(ps.zb_h1_bubble_relative(p, m, tf, tb, tw)))
                assert list(z.inflight("B")) == [min(p - r, m) for r in range(p)]
            assert ps.simulate("zb_h1", p, m).bubble_relative() == pytest.approx(
                ps.simulate("1f1b", p, m).bubble_relative() / 3)


def test_zb_h1_order_is_torchs_rule_for_one_chunk():
    """Definition 4.5.1 = torch's _get_1f1b_rank_ops with enable_zero_bubble and num_1f1b_microbatches = rank."""
    from torch.distributed.pipelining.schedules import _Action, _get_1f1b_rank_ops

    for p, m in [(2, 8), (4, 8), (4, 12)]:
        for r in range(p):
            w = min(p - 1 - r, m)
            ops = _get_1f1b_rank_ops(1, p, w, m - w, w, r, lambda s: r, lambda s: r, num_1f1b_microbatches=r,
                                     enable_zero_bubble=True)
            kind = {"FORWARD": "F", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W"}
            theirs = [(kind[a.computation_type.name], a.microbatch_index) for a in ops if isinstance(a, _Action)]
            assert theirs == [(o, i) for o, i, _ in ps.rank_order("zb_h1", r, p, m)]


def test_problem_2_gain_is_two_p_minus_one_tw():
    p, m = 8, 32
    for tw in (1.0, 0.5, 0.1, 0.0):
        z = ps.simulate("zb_h1", p, m, t_f=1.0, t_b=1.0, t_w=tw)
        o = ps.simulate("1f1b", p, m, t_f=1.0, t_b=1.0, t_w=tw)
        assert o.makespan - z.makespan == pytest.approx(2 * (p - 1) * tw)


def _torch_ops(name: str, p: int, m: int, **kw):
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    return get_schedule_ops(name, p, m, num_stages_per_rank=2, **kw)


def test_zbv_bubble_memory_and_comm_against_torch_and_the_measurement():
    """Experiment 4's table: the ZBV bubble is half of ZB-H1's closed form ((p−1)/(6m) against Theorem 4.5.5's
    (p−1)/(3m)); its memory is the peak of torch's own ZBV table (2p chunks = pA) and, at p = 2, the weakref count of
    the committed run; the crossings are torch's SEND_F actions per micro-batch (ZBV and interleaved v = 2)."""
    kind = {"FORWARD": "F", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W", "FULL_BACKWARD": "BW"}
    for row in page.zbv_rows():
        p, m = row[0], row[1]
        assert float(row[2]) == pytest.approx((p - 1) / (6 * m), abs=1e-4)
        assert float(row[3]) == pytest.approx(float(ps.zb_h1_bubble_relative(p, m)), abs=1e-4)
        ops = _torch_ops("ZBVZeroBubble", p, m)
        torch_peak = max(ps.peak_live([(kind[a.computation_type.name], a.microbatch_index, a.stage_index) for a in r if a])
                         for r in ops)
        assert row[4] == f"{torch_peak / 2:g} / {p:g}"
        sends = {n: sum(1 for r in _torch_ops(n, p, 2 * p, with_comms=True) for a in r if a and a.computation_type.name == "SEND_F")
                 for n in ("ZBVZeroBubble", "Interleaved1F1B")}
        # 1F1B's crossings from DeepSpeed's own TrainSchedule: its SendActivation instructions over all stages, per micro-batch
        from deepspeed.runtime.pipe.schedule import SendActivation, TrainSchedule

        ds_sends = sum(1 for st in range(p) for step in TrainSchedule(micro_batches=2 * p, stages=p, stage_id=st)
                       for c in step if isinstance(c, SendActivation))
        assert row[5] == (f"{sends['ZBVZeroBubble'] // (2 * p)} / {sends['Interleaved1F1B'] // (2 * p)} / "
                          f"{ds_sends // (2 * p)}")
    for run in RUNS:
        e = page.entry(run, "zbv", "sleep", run.params["m_all"])
        assert e["peak_live_microbatches"] == [2 * 2, 2 * 2]  # measured at p = 2: 2p chunks on every rank


def test_dualpipev_counts_are_torchs_schedule_object():
    """Experiment 4: the overlapped pairs printed from the book's construction equal torch's ScheduleDualPipeV
    pipeline_order (OVERLAP_F_B actions per rank, slots other than W), and the construction is torch's slot by slot."""
    kind = {"FORWARD": "F", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W", "FULL_BACKWARD": "BW"}
    for row in page.dualpipev_rows():
        p, m = row[0], row[1]
        ops = _torch_ops("DualPipeV", p, m)
        per_rank = [sum(1 for a in r if a and a.computation_type.name == "OVERLAP_F_B") for r in ops]
        assert row[2] == " / ".join(map(str, per_rank)) and row[3] == sum(per_rank)
        assert row[4] == sum(1 for r in ops for a in r if a and a.computation_type.name != "BACKWARD_WEIGHT")
        assert row[5] == f"{sum(per_rank)} / {2 * m * p}"
    assert page.dualpipev_rows()[0][3:5] == [22, 42]  # the review's count at p = 2, m = 8 (22 of 42)
    for p, m in [(2, 4), (2, 8), (3, 6), (4, 8), (4, 16)]:
        ops = _torch_ops("DualPipeV", p, m)
        for r in range(p):
            def conv(a):
                if a.computation_type.name == "OVERLAP_F_B":
                    return ("OVERLAP", *(conv(x) for x in a.sub_actions))
                return (kind[a.computation_type.name], a.microbatch_index, 0 if a.stage_index == r else 1)
            assert ps.order_dualpipev(r, p, m) == [conv(a) for a in ops[r] if a]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.hardware["id"])
def test_live_activations_measured_by_weakref_equal_the_simulator(run):
    """Experiment 6 (review WRONG 1) on every committed file: for every run of all seven torch schedules the
    weakref count equals the simulator's in-flight count along the book's construction; the hook count is larger
    exactly for the split-backward schedules (the page's reading), and the page's sentence says so."""
    classes = set()
    for e in run.measurements:
        orders, _, _ = ps.orders_of(e["schedule"], 2, e["m"])
        assert e["peak_live_microbatches"] == [ps.peak_live(o) for o in orders], (e["schedule"], e["variant"], e["m"])
        if e["peak_live_microbatches_hooked"] != e["peak_live_microbatches"]:
            classes.add(e["torch_class"])
        assert all(h >= w for h, w in zip(e["peak_live_microbatches_hooked"], e["peak_live_microbatches"]))
    assert {"ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble"} <= classes
    assert not classes & {"ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS"}
    same, n, more = page.live_agreement(run)
    assert (same, n, set(more)) == (len(run.measurements), len(run.measurements), classes)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.hardware["id"])
def test_measured_zero_bubble_runs(run):
    m = run.params["m_all"]
    for v in ("sleep", "real"):
        for sched in ("interleaved_zb", "zbv", "dualpipev"):
            e = page.entry(run, sched, v, m)
            assert e["grad_max_err"] < 1e-6 and e["loss"] == pytest.approx(e["ref_loss"], rel=1e-6)
        zbv = page.entry(run, "zbv", v, m)
        assert zbv["stages_per_rank"] == [[0, 3], [1, 2]]
        rows = ps.measured_rows(zbv)
        for r, acts in enumerate(rows):  # what ran is the simulator's (and torch's table's) ZBV order
            want = [(o, i, ps.stage_of("zbv", r, c, 2, 2)) for o, i, c in ps.rank_order("zbv", r, 2, m)]
            assert [(a["op"], a["mb"], a["stage"]) for a in acts] == want
        # DualPipeV: the recorded calls are the book's construction (overlapped pairs run as F then whole B)
        dp = page.entry(run, "dualpipev", v, m)
        for r, acts in enumerate(ps.measured_rows(dp)):
            want = [("B" if o == "BW" else o, i, c) for o, i, c in ps.flatten_slots(ps.order_dualpipev(r, 2, m))]
            assert [("B" if a["op"] == "B" else a["op"], a["mb"], a["chunk"]) for a in acts] == want
            n_bw = sum(1 for o in ps.flatten_slots(ps.order_dualpipev(r, 2, m)) if o[0] == "BW")
            assert sum(1 for a in acts if a["op"] == "B" and a.get("full", True)) == n_bw
    rows = {r[0]: r for r in page.measured_rows(run)}
    assert rows["sleep: ScheduleZBVZeroBubble"][5] == f"I {4 * m}, W {4 * m}"
    dp = dict(x.split() for x in rows["sleep: ScheduleDualPipeV"][5].split(", "))
    n_split = sum(1 for r in range(2) for s in ps.order_dualpipev(r, 2, m) if s[0] == "B")
    assert (int(dp["B"]), int(dp["I"]), int(dp["W"])) == (4 * m - n_split, n_split, n_split)
    # stage 0 has no input gradient: its input-grad calls are (near) empty and the weight-grad call does the work
    split = {r[0]: (float(r[1]), float(r[2])) for r in page.first_stage_split(run)}
    assert split[0][0] < 0.2 * split[0][1]
    assert split[1][0] > 0.3 * split[1][1]


def test_theorem_457_steady_state_bubble():
    """Theorem 4.5.6 and experiment 3: the several-step simulator against the one-step simulator (a second
    implementation) for one synchronised step; post-validation's steady bubble = max_r idle_r / w_r; ZB-H1's idle
    (p−1−r)·T_F; ZB-H2 and ZBV reach 0 without the sync and keep (p−1)/(3m), (p−1)/(6m) with it; ZB-H2 holds 2p−1."""
    for p in (2, 4, 8):
        for m in (2 * p, 4 * p, 8 * p):
            for sched in ("1f1b", "zb_h1", "zbv", "gpipe", "interleaved"):
                one = ps.simulate(sched, p, m, 2 if sched in ("zbv", "interleaved") else 1)
                assert ps.simulate_steps(sched, p, m, steps=1)["first_step"] == pytest.approx(one.makespan)
            for sched in page.STEADY:
                post = ps.simulate_steps(sched, p, m, steps=4, sync=False)
                idle = ps.span_idle(sched, p, m)
                assert post["bubble_steady"] == pytest.approx(max(idle) / post["ideal"], abs=1e-12), (sched, p, m)
            assert ps.span_idle("zb_h1", p, m) == [p - 1 - r for r in range(p)]
            for sched, first in (("zb_h2", (p - 1) / (3 * m)), ("zbv", (p - 1) / (6 * m))):
                assert ps.simulate_steps(sched, p, m, sync=False)["bubble_steady"] == pytest.approx(0, abs=1e-12)
                assert ps.simulate_steps(sched, p, m, sync=True)["bubble_first"] == pytest.approx(first)
            assert ps.simulate_steps("zb_h1", p, m, sync=False)["bubble_steady"] == pytest.approx((p - 1) / (3 * m))
            assert [ps.peak_live(ps.order_zb_h2(r, p, m)) for r in range(p)] == [2 * p - 1] * p
    rows = {r[0]: r for r in page.steady_rows()}
    assert rows["zb_h2 (p = 8, m = 32)"][2] == rows["zbv (p = 8, m = 32)"][2] == "0.0000"
    assert float(rows["zb_h1 (p = 8, m = 32)"][2]) > 0 and rows["zb_h1 (p = 8, m = 32)"][3] == "7"


def test_zb_h2_is_a_valid_order():
    """Every micro-batch runs F, B and W exactly once on the rank, W after its B (the construction loses nothing)."""
    for p in (2, 3, 4, 8):
        for m in (p, 2 * p, 5 * p):
            for r in range(p):
                o = ps.order_zb_h2(r, p, m)
                assert sorted(o) == sorted((op, i, 0) for op in "FBW" for i in range(m))
                assert all(o.index(("B", i, 0)) < o.index(("W", i, 0)) for i in range(m))


def test_theorem_455_and_experiment_4_chimera():
    for p, m in [(2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (6, 12)]:
        for bwd in (1.0, 2.0):
            c = ps.simulate("chimera", p, m, t_f=1.0, t_b=bwd, t_w=0.0)
            assert len(c.start) == 2 * m * p  # every micro-batch passes F and B on every stage
            inf = c.inflight()
            assert list(inf) == list(inf[::-1])  # balanced: rank r and p-1-r hold the same
            # "more balanced than 1F1B": the spread over ranks is below 1F1B's p − 1 (rank 0 holds p, rank p−1 one),
            # 1F1B's counts taken from its own simulation, not from the cap inside the bidirectional construction
            one = ps.simulate("1f1b", p, m).inflight()
            assert inf.max() - inf.min() < one.max() - one.min() or p == 2
    # T_B = T_F: on the finite grid the list schedule meets the quoted formula exactly when p divides m,
    # and stays above it otherwise (what the page says)
    for p in (2, 4, 6, 8, 16):
        for m in range(2, 33, 2):
            c = ps.simulate("chimera", p, m, t_f=1.0, t_b=1.0, t_w=0.0)
            if m % p == 0:
                assert c.makespan == pytest.approx(2 * m + p - 2)
                assert c.bubble_fraction() == pytest.approx((p - 2) / (2 * m + p - 2))
            else:
                assert c.makespan > 2 * m + p - 2
    rows = page.chimera_rows()
    for r in rows:
        bwd, (p, m) = float(r[0]), [int(x.split("=")[1]) for x in r[1].split(",")]
        o = (p - 1) / (m + p - 1)  # 1F1B's bubble, fraction of total time (GPipe's closed form)
        assert float(r[4]) == pytest.approx(o, abs=5e-4)
        assert r[5] == ("양방향" if float(r[2]) < o else "1F1B")
        if bwd == 1.0:
            assert r[2] == r[3] and r[5] == "양방향"
        elif m <= 2 * p:
            assert r[5] == "양방향"  # the page's claim: with backward = 2 T_F it wins wherever m ≤ 2p on the grid
    w = page.chimera_wins(2.0)
    assert set(w["loses"]) == {"p = 4, m = 32", "p = 8, m = 32", "p = 8, m = 64"}
    got = {r[1]: (r[2], r[4]) for r in rows if r[0] == "2"}  # the Ch4 review's independent numbers
    assert got["p = 8, m = 32"] == ("0.220", "0.179") and got["p = 8, m = 64"] == ("0.197", "0.099")
    assert got["p = 4, m = 32"] == ("0.103", "0.086")


def test_problem_1_numbers():
    assert ps.simulate("zb_h1", 8, 32).bubble_relative() == pytest.approx(7 / 96)
    assert ps.simulate("1f1b", 8, 32).bubble_relative() == pytest.approx(7 / 32)


def test_figures_fit_the_cell_budget():
    run = RUNS[0]
    for f in (page.zb_gantt, lambda: page.measured_gantt(run), page.chimera_gantt, page.steps_gantt, page.mechanism_svg,
              page.steady_rows):
        t0 = time.thread_time()
        f()
        assert time.thread_time() - t0 < cell_budget()


def test_gpu_tabs_read_the_gpu_file():
    """The GPU tabs: the largest gradient error over the five schedules, read from the GPU file, and the per-stage
    input-grad / weight-grad means recomputed from its raw timeline."""
    run = gpu_fixture("pipeline_bench")
    plat = platform(run)
    m = run.data["params"]["m_all"]
    es = [e for e in run.data["measurements"] if e["m"] == m and e["schedule"] in page.MEASURED]
    assert f"최대 차이 (모든 행): {max(e['grad_max_err'] for e in es):.1e}" in page.zero_bubble_tab(plat)
    zbv = next(e for e in es if (e["schedule"], e["variant"]) == ("zbv", "sleep"))
    w0 = [c["end"] - c["start"] for rank in zbv["timeline"] for c in rank if c["op"] == "W" and c["stage"] == 0]
    assert f"| {1e3 * sum(w0) / len(w0):.1f} |" in page.split_tab(plat)


def test_a_hardware_without_two_ranks_says_so():
    plat = without_world_2(gpu_fixture("pipeline_bench"))
    assert "N = 2 측정이 없습니다" in page.zero_bubble_tab(plat) and "N = 2 측정이 없습니다" in page.split_tab(plat)


def test_the_zero_bubble_cell_with_three_hardwares_fits_the_budget():
    from tests.ch4_pipeline_parallel import tabs_time, three_hardwares

    assert tabs_time(three_hardwares("pipeline_bench"), page.zero_bubble_tab) < cell_budget()


# --- experiment 2: measured F / B / W (gpu_runs/step_anatomy.py) in the simulator -----------------------

MD = "ch4-pipeline-parallel/05-chimera-bidirectional.md"




@pytest.mark.parametrize("p", [2, 4, 8])
def test_zb_h1_formula_is_reached_exactly_when_w_is_the_shortest(p):
    """Experiment 2's reading of Theorem 4.5.5 on a grid of time ratios: the simulated ZB-H1 bubble equals the
    lower bound (p−1)(T_F+T_B−T_W)/(m·ΣT) when T_W ≤ min(T_F, T_B), and is larger otherwise."""
    for m in (p, 2 * p, 4 * p):
        for tb in (0.5, 0.8, 1.0, 1.5, 2.0):
            for tw in (0.25, 0.5, 0.8, 1.0, 1.3, 2.0, 3.0):
                sim = ps.simulate("zb_h1", p, m, t_f=1.0, t_b=tb, t_w=tw).bubble_relative()
                bound = (p - 1) * (1 + tb - tw) / (m * (1 + tb + tw))
                if tw <= min(1.0, tb):
                    assert sim == pytest.approx(bound, abs=1e-12), (m, tb, tw)
                else:
                    assert sim > bound + 1e-9, (m, tb, tw)


def test_committed_split_is_exact_and_counts_equal_flops():
    """Experiment 2 on the committed CPU result: the B / W split's gradients equal the unsplit backward's within
    the dtype's tolerance, and F, B and W each count 2·(2·T·h·4h)·blocks matmul FLOPs (recomputed here)."""
    from snippets import results

    (run,) = [r for r in results.experiment(page.ANATOMY) if not r.is_gpu]
    p, chk = run.params, run.measurements["stages_check"]
    per = p["layers"] // p["stages"]
    want = per * 2 * (2 * p["tokens"] * p["h"] * 4 * p["h"])
    assert chk["flops_counted_stage0"] == {"F": want, "B": want, "W": want}
    assert chk["max_rel_err_vs_BW"] <= chk["tol"] == 1e-5 and chk["ok"]
    assert [s["stage"] for s in run.measurements["stages"]] == list(range(p["stages"]))


def test_experiment_5_tabs_simulate_their_own_times(tmp_path, monkeypatch):
    """The page's cell on the committed CPU file and a GPU-shaped copy whose W times are tripled (so its tab can only
    come from that file, and T_W > min(T_F, T_B) there). Per tab: the inputs are the stage means of the JSON; the
    ZB-H1 formula column is Theorem 4.5.5's bound computed here; the simulated bubble is never below it and equals
    it exactly when T_W ≤ min(T_F, T_B); the 1F1B makespan is (m + p − 1)(T_F + T_BW), the closed form."""
    import json

    from tests.page_cells import edit, gpu_copies, results_dir, run_cell, tab, table_rows

    res = results_dir(tmp_path, ["pipeline_bench", page.ANATOMY])  # run_cell runs the whole session
    (gpu,) = gpu_copies(res, page.ANATOMY)

    def slow_w(d):
        for s in d["measurements"]["stages"]:
            s["W_ms_median"] *= 3
            s["B_plus_W_ms"] = s["B_ms_median"] + s["W_ms_median"]
    edit(gpu, slow_w)
    html = run_cell(MD, "ch4-05-exp5-fbw", res, monkeypatch)
    for kind, path in (("CPU", next((res / page.ANATOMY).glob("cpu-*.json"))), ("GPU", gpu)):
        body = tab(html, kind)
        st = json.loads(path.read_text())["measurements"]["stages"]
        p = len(st)
        f, b, w, bw = (float(np.mean([s[f"{k}_ms_median"] for s in st])) for k in ("F", "B", "W", "BW"))
        assert f"T_F = {f:.3g} ms, T_B = {b:.3g} ms, T_W = {w:.3g} ms" in body
        rows = [r for r in table_rows(body) if len(r) == 6 and r[1] in ("ZB-H1", "1F1B")]
        assert {int(r[0]) for r in rows} == {p, 4 * p}
        for r in rows:
            m = int(r[0])
            if r[1] == "ZB-H1":
                bound = (p - 1) * (f + b - w) / (m * (f + b + w))
                assert float(r[4]) == pytest.approx(bound, abs=5e-5)
                assert float(r[3]) >= float(r[4]) - 1e-4
                assert (abs(float(r[3]) - float(r[4])) < 5e-5) == (w <= min(f, b))
            else:
                assert float(r[5].replace(",", "")) == pytest.approx((m + p - 1) * (f + bw), rel=1e-3)
                assert float(r[3]) == pytest.approx((p - 1) / m, abs=5e-5)


def test_experiment_5_cell_is_fast():
    from snippets import results

    t0 = time.perf_counter()
    results.hardware_tabs(page.ANATOMY, page.fbw_tab)
    assert time.perf_counter() - t0 < cell_budget()


def test_experiment_5_tab_says_when_a_hardware_has_no_single_device_run():
    import copy

    from snippets import results

    (run,) = [r for r in results.experiment(page.ANATOMY) if not r.is_gpu]
    d = copy.deepcopy(run.data)
    d["hardware"]["world_size"] = 2
    assert "장치 하나 (world size 1) 에서만 돕니다" in page.fbw_tab(platform(results.Result(run.path, d)))

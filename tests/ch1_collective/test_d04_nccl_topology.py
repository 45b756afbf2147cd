"""Ch1-04 NCCL 과 NVLink 토폴로지: each test asserts a claim the page makes."""
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from snippets import results
from snippets.ch1_collective import d04_nccl_topology as page
from snippets.common import alphabeta as ab
from tests.conftest import ROOT, launch, cell_budget


# ---------------------------------------------------------------- link rates (ERRATA row 8)

def test_link_rates_are_per_direction_halves_of_the_marketing_totals():
    r = {x["link"]: x for x in page.link_rates()}
    assert r["NVLink3 (A100)"]["bidirectional"] == 600 and r["NVLink3 (A100)"]["per_direction"] == 300
    assert r["NVLink4 (H100)"]["bidirectional"] == 900 and r["NVLink4 (H100)"]["per_direction"] == 450
    assert r["InfiniBand HDR (1 port)"]["per_direction"] == 25
    assert r["InfiniBand NDR (1 port)"]["per_direction"] == 50
    assert r["PCIe Gen4 x16"]["per_direction"] == pytest.approx(31.5, abs=0.05)
    assert r["PCIe Gen5 x16"]["per_direction"] == pytest.approx(63.0, abs=0.05)
    # like-for-like per GPU: 12× (A100/HDR) and 9× (H100/NDR), not the 24× of 600 vs 25
    assert r["NVLink3 (A100)"]["per_direction"] / r["InfiniBand HDR (1 port)"]["per_direction"] == 12
    assert r["NVLink4 (H100)"]["per_direction"] / r["InfiniBand NDR (1 port)"]["per_direction"] == 9


def test_nccl_model_values_read_from_source():
    m = {x["link"]: x for x in page.nccl_model_rates()}
    assert m["NVLink4 ×18 (H100)"]["nccl"] == pytest.approx(370.8)
    assert m["PCIe Gen4 x16"]["nccl"] == 24.0 and m["PCIe Gen5 x16"]["nccl"] == 48.0
    assert m["InfiniBand NDR"]["nccl"] == 50.0
    assert all(x["nccl"] <= x["line_rate"] + 1e-9 for x in m.values())


# ---------------------------------------------------------------- experiment 1: topologies

@pytest.fixture(scope="module")
def cases():
    return {c["name"]: page.evaluate_case(c) for c in page.topology_cases()}


def test_experiment1_bottlenecks(cases):
    nv = cases["DGX H100-like, NVSwitch"]
    assert nv["B"] == 450 and nv["kind"] == "NVLink" and nv["N"] == 8
    pc = cases["PCIe node, 2 sockets"]
    assert pc["B"] == page.SRP_QPI_BW and pc["kind"] == "UPI"
    one = cases["2 nodes, 1 NIC/GPU, 1 ring"]
    eight = cases["2 nodes, 1 NIC/GPU, 8 rings"]
    pair = cases["2 nodes, 1 NIC/2 GPUs, 8 rings"]
    assert one["B"] == 50 and one["kind"] == "InfiniBand" and one["N"] == 16
    assert eight["B"] == 400 and eight["kind"] == "InfiniBand"
    assert pair["B"] == 200


def test_experiment1_times_use_the_shared_ring_formula(cases):
    for c in cases.values():
        for s in (1 << 20, 1 << 30):
            t = float(ab.ring_allreduce_time(c["N"], s, c["alpha"], 1 / (c["B"] * 1e9)))
            assert c[s]["time"] == pytest.approx(t)
            assert c[s]["busbw"] <= c["B"]  # busbw approaches B from below (Theorem 1.4.8)
        assert c[1 << 30]["busbw"] > 0.85 * c["B"]


def test_theorem_bottleneck_equals_slowest_step():
    """Theorem 1.4.5 by direct simulation: per step, every hop moves S/(kN) over its path and a
    link shared by ℓ hops needs ℓ·S/(kN·c) seconds; the slowest link sets the step time."""
    for case in page.topology_cases():
        g, rings = case["graph"], case["rings"]
        k, n, s = len(rings), len(rings[0]), 1e9
        per_link = {}
        for ring in rings:
            for u, v in zip(ring, ring[1:] + ring[:1]):
                for e in page.route(g, u, v):
                    per_link[e] = per_link.get(e, 0.0) + s / (k * n)
        step = max(b / (g.edges[e]["cap"] * 1e9) for e, b in per_link.items())
        total = 2 * (n - 1) * step
        b = page.ring_bottleneck(g, rings)["B"]
        assert total == pytest.approx(2 * (n - 1) / n * s / (b * 1e9))


@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_corollary_node_egress_bound(nodes):
    """Corollary 1.4.6: B ≤ each GPU's egress and ≤ a node's total NIC egress; rotated rings reach it."""
    g = page.multi_node(nodes, nics_per_node=8)
    for k in (1, 2, 8):
        b = page.ring_bottleneck(g, page.rotated_rings(g, k))["B"]
        assert b <= 8 * 50 + 1e-9 and b <= 450
        assert b == pytest.approx(min(k, 8) * 50)


def test_figure_and_cells_are_fast():
    from snippets.common import figures

    figures.svg(figures.new()[0])  # matplotlib's one-off start-up is not the cell's cost
    t0 = time.thread_time()  # CPU time of this thread: other jobs and threads do not count
    cs = page.topology_cases()
    [page.evaluate_case(c) for c in cs]
    assert "<svg" in page.topology_figure(cs)
    t1 = time.thread_time()
    assert "<svg" in page.selection_figure([1, 2, 16], 450.0, 400.0)
    t2 = time.thread_time()
    assert t1 - t0 < cell_budget() and t2 - t1 < cell_budget(), (t1 - t0, t2 - t1)


# ---------------------------------------------------------------- experiment 2: selection

def test_selection_is_the_argmin_of_predicted_times():
    """select() (argmin over a size grid) agrees with switch_points(), a second implementation that
    walks the lower envelope of the six affine costs exactly: just below and above every switch
    point select() picks the pairs the walk reports, and on each segment between them one pair."""
    for nodes in (1, 2, 4, 16, 64):
        pts = page.switch_points(nodes, bus_GBps=400.0)
        assert pts
        for x, lo, hi in pts:
            assert page.select([x * (1 - 1e-6), x * (1 + 1e-6)], nodes) == [lo, hi]
        edges = [2.0 ** 6] + [x for x, _, _ in pts] + [2.0 ** 34]
        pairs = [pts[0][1]] + [hi for _, _, hi in pts]
        for (a, b), pair in zip(zip(edges, edges[1:]), pairs):
            inside = np.geomspace(a, b, 9)[1:-1]
            assert page.select(inside, nodes) == [pair] * len(inside)


def test_cost_is_ncclTopoGetAlgoTime_form():
    lat, bw = page.model_cost("ring", "Simple", 1, 8, 450.0)
    # ring, Simple, one node on NVLink: base 8.4 + 2(N−1)·3.4 µs; algbw = busbw·N/(2(N−1))
    assert lat == pytest.approx(8.4 + 14 * 3.4)
    assert bw == pytest.approx(450 * 8 / 14)
    t = page.predicted_times([1e6], 1, 8, 450.0)[("ring", "Simple")][0]
    assert t == pytest.approx(lat + 1e6 / (1000 * bw))


def test_no_fixed_threshold_switch_points_move_with_n():
    """The size where the choice first changes depends on N, and the algorithm can change
    back and forth (tree → ring → tree → ring at 2 nodes)."""
    firsts = {nodes: page.switch_points(nodes, bus_GBps=400.0)[0][0] for nodes in (2, 4, 16, 64)}
    assert len({round(v) for v in firsts.values()}) == 4
    algos = [a for _, a, _ in page.switch_points(2, bus_GBps=400.0)]
    algos.append(page.switch_points(2, bus_GBps=400.0)[-1][2])
    seq = [a for a, _ in algos]
    assert seq.count("tree") >= 2 and seq.count("ring") >= 2
    # every reported switch point is where the two costs are equal
    for nodes in (1, 2, 16):
        for x, lo, hi in page.switch_points(nodes, bus_GBps=400.0):
            t = page.predicted_times([x], nodes, bus_GBps=400.0)
            assert t[lo][0] == pytest.approx(t[hi][0], rel=1e-9)


def test_experiment2_64_nodes_choose_ring_only_beyond_1_gib():
    """Experiment 2's reading: with 64 nodes the simplified model first picks ring above 1 GiB."""
    cases = {c["name"]: c for c in page.topology_cases()}
    bn = page.evaluate_case(cases["2 nodes, 1 NIC/GPU, 8 rings"])["B"]
    to_ring = [x for x, _, (algo, _) in page.switch_points(64, bus_GBps=bn) if algo == "ring"]
    assert to_ring and to_ring[0] > 2**30


def test_envelope_bandwidth_nondecreasing():
    """Theorem 1.4.7: along increasing S the chosen pair's algorithm bandwidth never decreases."""
    for nodes in (1, 2, 4, 16, 64):
        pts = page.switch_points(nodes, bus_GBps=400.0)
        bws = [page.model_cost(*pts[0][1], nodes, 8, 400.0)[1]] + \
              [page.model_cost(*hi, nodes, 8, 400.0)[1] for _, _, hi in pts]
        assert all(b2 > b1 for b1, b2 in zip(bws, bws[1:]))


# ---------------------------------------------------------------- experiment 3: busbw

def test_busbw_definitions_on_committed_results():
    runs = results.load("collectives_bench", kind="cpu")
    for r in runs:
        n = r.hardware["world_size"]
        for op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"):
            for row in page.bandwidth_rows(r, op):
                assert row["busbw"] == pytest.approx(row["stored_busbw"], rel=1e-9)
                assert row["busbw"] == pytest.approx(row["algbw"] * ab.BUSBW_FACTOR[op](n))


def test_ring_busbw_model_identity():
    """Theorem 1.4.8: busbw = 1/(β + Nα/S); independent of N as S → ∞."""
    s = np.logspace(1, 12, 30)
    for n in (2, 4, 8, 64):
        got = page.ring_busbw_model(n, s, 5e-6, 1 / 25e9)
        assert np.allclose(got, 1 / (1 / 25e9 + n * 5e-6 / s))
    assert page.ring_busbw_model(1024, 1e15, 5e-6, 1 / 25e9) == pytest.approx(25e9, rel=1e-3)


def test_fit_positive_on_committed_results():
    for r in results.load("collectives_bench", kind="cpu"):
        a, b = page.fit_allreduce(r)
        assert a > 0 and b > 0


# ---------------------------------------------------------------- experiment 4: NCCL log

def _line(body):
    return "node0:100:101 [0] NCCL INFO " + body


def test_parser_reads_the_source_formats():
    """Lines built from the format strings in the NCCL source (tests only: the page shows none)."""
    lines = [
        _line("comm 0x55 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0"),
        _line("Pattern 4, crossNic 0, nChannels 2, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1"),
        _line("Channel %02d/%02d :" % (1, 2) + "".join(f" {r}" for r in [0, 1, 2, 3, 4, 5, 6, 7])),
        _line("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"),
        _line("Ring %02d : %d -> %d -> %d" % (0, 7, 0, 1)),
        _line("%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}" % ("AllReduce", 1048576, "RING",
                                                                              "LL128", 0, 1)),
    ]
    p = page.parse_nccl_log(lines)
    assert p["comms"] == [{"rank": 0, "nRanks": 8, "nNodes": 1, "localRanks": 8}]
    assert p["patterns"][0]["pattern"] == "RING" and p["patterns"][0]["nChannels"] == 2
    assert p["channels"] == [{"channel": 1, "of": 2, "order": list(range(8))}]
    assert p["rings"] == [{"channel": 0, "prev": 7, "rank": 0, "next": 1}]
    assert p["algos"][0] == {"func": "AllReduce", "bytes": 1048576, "algo": "RING", "proto": "LL128",
                             "channels": (0, 1)}


def test_capture_cells_without_results_say_so_and_how_to_produce_one(tmp_path):
    """No capture file: the head-of-experiment box is the danger box (printed by the cell, not typed
    into the page) and the capture cell says how to make one; neither shows a log line."""
    status = page.capture_status(tmp_path)
    assert "admonition danger" in status and "이 판에는 GPU 로그가 없습니다" in status and "NCCL INFO" not in status
    text = page.captured_log(tmp_path)
    assert "없습니다" in text and page.CAPTURE_COMMAND in text and "NCCL INFO" not in text
    assert "hardware-tabs" not in text


FIXTURE = ROOT / "tests" / "gpu_fixtures" / "results" / page.CAPTURE_PROGRAM / "gpu-nccl-1x8-nvidia-h200.json"


def _fixture_folder(tmp_path, mutate=None):
    """The fixture copied into <tmp>/nccl_debug_capture/ (a results file must lie in its program's folder)."""
    d = json.loads(FIXTURE.read_text())
    if mutate:
        mutate(d)
    folder = tmp_path / page.CAPTURE_PROGRAM
    folder.mkdir()
    (folder / FIXTURE.name).write_text(json.dumps(d))
    return folder, d


def _independent_choices(d):
    """AllReduce (bytes -> {ALGO/proto}) from rank 0's lines, by splitting the enqueue.cc format by hand."""
    out = {}
    for ln in next(g for g in d["measurements"]["logs"] if g["rank"] == 0)["lines"]:
        body = ln.split(" NCCL INFO ", 1)[1]
        if body.startswith("AllReduce: ") and " Bytes -> Algo " in body:
            words = body.split()
            out.setdefault(int(words[1]), set()).add(f"{words[5]}/{words[7]}")
    return out


def test_capture_cells_with_a_capture_show_it_per_gpu_hardware(tmp_path):
    """A capture file (the synthetic GPU fixture, in a temporary folder): the head box no longer says
    there is no log, names the hardware and that the file is synthetic; the capture cell shows one GPU
    tab, the file's provenance, and each AllReduce size with the algorithm the file's lines name."""
    folder, d = _fixture_folder(tmp_path)
    status = page.capture_status(folder)
    assert "GPU 로그가 없습니다" not in status and "admonition info" in status
    assert "8× NVIDIA H200" in status and d["git"]["commit"][:12] in status and "합성 fixture" in status
    html = page.captured_log(folder)
    assert 'class="tabbed-set tabbed-alternate hardware-tabs"' in html
    assert "GPU — 8× NVIDIA H200, NCCL" in html and "CPU —" not in html
    assert f"gpu_runs/results/nccl_debug_capture/{FIXTURE.name}" not in html  # read from tmp_path, not the repo
    assert f"<code>{folder / FIXTURE.name}</code>" in html
    choices = _independent_choices(d)
    assert len(choices) == len(d["params"]["sizes"])
    for s, picked in choices.items():
        assert re.search(rf"<td[^>]*>{page.human_bytes(s)}</td>\n<td>{', '.join(sorted(picked))}</td>", html), s
    n = d["hardware"]["world_size"]
    rings = sum(ln.split(" NCCL INFO ", 1)[1].startswith("Ring ") for g in d["measurements"]["logs"] for ln in g["lines"])
    assert rings == n * 4
    assert f"Ring</code> 줄 {rings} 개 가운데 그 순서의 이웃과 같은 줄 {rings}" in html


def test_ring_check_catches_a_ring_line_that_disagrees(tmp_path):
    """The ring check can fail: one rank's Ring line with a wrong neighbour is counted as disagreeing."""
    def corrupt(d):
        lines = d["measurements"]["logs"][3]["lines"]
        i = next(k for k, ln in enumerate(lines) if " NCCL INFO Ring 00 : " in ln)
        lines[i] = lines[i].rsplit("->", 1)[0] + "-> 6"

    _, d = _fixture_folder(tmp_path, corrupt)
    parsed = page.parse_nccl_log([ln for g in d["measurements"]["logs"] for ln in g["lines"]])
    ok, total = page.ring_agreement(parsed)
    assert (ok, total) == (total - 1, 32)


def test_no_invented_capture_is_committed():
    """The page states no GPU log was captured for this edition; any committed capture must be a
    real GPU result with NCCL provenance."""
    folder = results.RESULTS / page.CAPTURE_PROGRAM
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        r = results.read(path)
        assert r.hardware["kind"] == "gpu" and r.hardware["backend"] == "nccl" and r.data["versions"]["nccl"]


def test_capture_script_refuses_on_cpu_direct():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "gpu_runs/nccl_debug_capture.py", "--preset", "tiny"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "needs CUDA GPUs and NCCL" in proc.stderr


@pytest.mark.dist
def test_capture_script_refuses_under_torchrun(tmp_path):
    proc, took = launch("gpu_runs/nccl_debug_capture.py", 2, ["--preset", "tiny", "--out", tmp_path], check=False)
    assert proc.returncode != 0
    assert "needs CUDA GPUs and NCCL" in proc.stderr + proc.stdout
    assert not list(tmp_path.glob("*.json"))


def test_capture_script_not_in_cpu_runs():
    """The capture needs CUDA: it must not be in the CPU regeneration list (it may be in the GPU plan)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("runs_mod", ROOT / "scripts" / "runs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    assert all(r[0] != "nccl_debug_capture" for r in mod.RUNS)


def test_anonymise_replaces_hostname_only():
    sys.path.insert(0, str(ROOT))
    import importlib.util

    spec = importlib.util.spec_from_file_location("ndc", ROOT / "gpu_runs" / "nccl_debug_capture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.anonymise(["dgx-a17:4242:4250 [3] NCCL INFO Ring 00 : 2 -> 3 -> 4"], 1)
    assert out == ["node1:4242:4250 [3] NCCL INFO Ring 00 : 2 -> 3 -> 4"]


def test_experiment3_readings_on_committed_results():
    """The page's reading: at the largest size all_reduce's algbw falls from N=2 to N=4, and gloo's
    reduce_scatter / all_gather reach a lower busbw than its all_reduce."""
    runs = {r.hardware["world_size"]: r for r in results.load("collectives_bench", kind="cpu")}
    last = lambda r, op: page.bandwidth_rows(r, op)[-1]
    assert last(runs[4], "all_reduce")["algbw"] < last(runs[2], "all_reduce")["algbw"]
    # oversubscribed N = 4 (2 cores): even busbw, which removes N, comes out lower
    assert runs[4].hardware["cpu_count"] < 4   # the page's premise, asserted rather than gated by an `if`
    assert last(runs[4], "all_reduce")["busbw"] < last(runs[2], "all_reduce")["busbw"]
    for r in runs.values():
        ar = last(r, "all_reduce")["busbw"]
        assert last(r, "reduce_scatter")["busbw"] < ar and last(r, "all_gather")["busbw"] < ar


def test_exercise1_a100_numbers():
    nv3 = page.nvlink_GBps("NVLink3 (A100)")[0]
    hdr = page.gbit_to_GBps(page.IB_PORT_GBIT["HDR"])
    one = page.nvswitch_node(nvlink=nv3)
    assert page.ring_bottleneck(one, page.rotated_rings(one, 1))["B"] == 300
    two = page.multi_node(2, nics_per_node=8, nvlink=nv3, nic=hdr, pcie=page.pcie_GBps(4))
    assert page.ring_bottleneck(two, page.rotated_rings(two, 1))["B"] == 25
    assert page.ring_bottleneck(two, page.rotated_rings(two, 8))["B"] == 200
    pc = page.pcie_node(socket_link=40.0)
    b = page.ring_bottleneck(pc, page.rotated_rings(pc, 1))
    assert b["kind"] == "PCIe" and b["B"] == pytest.approx(31.5, abs=0.05)


def test_exercise2_crossover_grows_with_nodes():
    prev = 0.0
    for m in (2, 4, 8, 16, 64, 256):
        lr, br = page.model_cost("ring", "Simple", m, 8, 400.0)
        lt, bt = page.model_cost("tree", "Simple", m, 8, 400.0)
        s = 1000 * (lr - lt) / (1 / bt - 1 / br)
        assert s > prev
        prev = s


def test_log_format_table_is_markdown_safe():
    assert all("|" not in cell for row in page.LOG_FORMATS for cell in row)


def test_page_names_the_capture_command_and_prints_the_capture_state_from_cells():
    """The "no GPU log" box is not typed into the page: the cells that read the results folder print it."""
    text = (ROOT / "docs" / "ch1-collective" / "04-nccl-topology.md").read_text(encoding="utf-8")
    assert page.CAPTURE_COMMAND in text
    assert "GPU 로그가 없습니다" not in text
    assert "print(capture_status())" in text and "print(captured_log())" in text
    assert "NCCL INFO" not in text  # no log line is typed into the page


def test_render_capture_on_a_record_built_here():
    """The renderer on a two-rank record that lives only in this test: the log excerpt, and the
    algorithm choice read against experiment 2's model at the RING graph's nChannels × bw."""
    lines = [_line("comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0"),
             _line("Pattern 4, crossNic 0, nChannels 2, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1"),
             _line("Channel 00/02 : 0 1"), _line("Ring 00 : 1 -> 0 -> 1"),
             _line("AllReduce: 1024 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}")]
    data = {"hardware": {"gpu_count": 2, "gpu_name": "test-gpu", "world_size": 2, "nnodes": 1},
            "versions": {"nccl": "x"},
            "measurements": {"calls": [], "logs": [{"rank": 0, "node": 0, "lines": lines},
                                                   {"rank": 1, "node": 0, "lines": []}]}}
    md = page.render_capture(data)
    assert "Channel 00/02 : 0 1" in md and "2× test-gpu" in md
    checks = page.capture_checks(data)
    model = page.select([1024], 1, 2, 2 * 20.0, "nvlink")[0]
    assert f"| 1 KiB | TREE/LL | {model[0].upper()}/{model[1]} |" in checks
    assert "| RING | 2 | 20 / 20 | NVL/PIX | 40 |" in checks
    assert "nRanks 2, nNodes 1" in checks and "같음" in checks


def test_busbw_tab_on_the_gpu_fixture():
    """The GPU tab of experiment 3: its unit is GPUs, every world size of the file appears, and the
    largest-S row carries that file's time and a busbw recomputed here from its JSON."""
    files = sorted((ROOT / "tests" / "gpu_fixtures" / "results" / "collectives_bench").glob("gpu-*.json"))
    runs = [results.read(f) for f in files]
    (plat,) = results.platforms(runs)
    md = page.busbw_tab(plat)
    assert "N (GPUs)" in md and "processes" not in md
    assert "rank 마다 GPU 가 하나라 과다 구독이 없습니다" in md and "scheduler" not in md
    for f in files:
        d = json.loads(f.read_text())
        n = d["hardware"]["world_size"]
        rows = [m for m in d["measurements"] if m["op"] == "all_reduce"]
        big = max(rows, key=lambda m: m["bytes"])
        busbw = big["bytes"] / (big["time_us_median"] * 1e-6) / 1e9 * 2 * (n - 1) / n
        assert f"| {n} | all_reduce | {2 * (n - 1) / n:.3f} | {page.human_bytes(big['bytes'])} | " \
               f"{big['time_us_median'] / 1e3:.3g} ms |" in md
        assert f"| {busbw:.3f} |" in md
    assert "<svg" in md


# ---------------------------------------------------------------- Theorem 1.4.9, experiments 5 and 6

@pytest.mark.parametrize("G,g", page.HIER_CASES)
def test_hierarchical_simulator_matches_theorem_byte_for_byte(G, g):
    """Theorem 1.4.9 (a)-(c): the 2D AllReduce on real integers is correct; per-rank intra/NIC bytes and
    steps equal the formulas exactly; the total equals the ring lower bound 2(N−1)S/N."""
    r = page.hierarchical_check(G, g)
    assert r["correct"]
    assert r["intra_max"] == r["intra_min"] == r["f_intra"]
    assert r["inter_max"] == r["inter_min"] == r["f_inter"]
    assert r["total"] == r["bound"]
    assert r["steps"] == r["f_steps"]


def test_hierarchical_time_formula_from_simulated_counts():
    """Theorem 1.4.9 (d): the shared cost equals the simulator's steps × α plus its bytes × β, phase by phase."""
    G, g, elems = 3, 4, 8
    n, count = G * g, G * g * elems
    x = np.random.default_rng(0).integers(-8, 8, size=(n, count)).astype(np.float32)
    r = page.hierarchical_allreduce(x, G, g)
    s = count * 4
    ai, bi, ae, be = 2e-6, 1 / 300e9, 9e-6, 1 / 25e9
    sim = r["intra_steps"] * ai + r["intra_sent"].max() * bi + r["inter_steps"] * ae + r["inter_sent"].max() * be
    assert float(ab.hierarchical_allreduce_time(G, g, s, ai, bi, ae, be)) == pytest.approx(sim, rel=1e-12)


def test_hierarchical_vs_flat_ring_claims():
    """Theorem 1.4.9 (e) and experiment 5's reading, on a grid of sizes: with α_i ≤ α_e and β_i ≤ β_e the
    2D latency term never exceeds the flat ring's; 2D beats a 1-channel flat ring at every S; with g channels
    the flat ring wins some large sizes at the page's constants and loses the small ones."""
    c = page.hier_constants()
    assert c["alpha_intra"] <= c["alpha_inter"] and c["beta_intra"] <= c["beta_inter"]
    sizes = np.logspace(3, 11, 60)
    for G in (2, 4, 16):
        lat2d = ab.hierarchical_allreduce_time(G, 8, 0.0, c["alpha_intra"], 0.0, c["alpha_inter"], 0.0)
        latflat = ab.flat_ring_two_level_time(G, 8, 0.0, c["alpha_intra"], 0.0, c["alpha_inter"], 0.0)
        assert lat2d <= latflat
        h = ab.hierarchical_allreduce_time(G, 8, sizes, **c)
        assert np.all(h <= ab.flat_ring_two_level_time(G, 8, sizes, **c, channels=1))
        fk = ab.flat_ring_two_level_time(G, 8, sizes, **c, channels=8)
        assert h[0] < fk[0] and fk[-1] < h[-1]
    rows = page.hier_time_rows()
    assert any(r["flatk"] < r["hier"] for r in rows) and any(r["hier"] < r["flatk"] for r in rows)
    assert all(r["hier"] < r["flatk"] for r in rows if r["S"] <= 1 << 20)


def test_step_budget_recomputed_independently():
    """Experiment 6: recompute gradient bytes, T_comm (from the simulator's byte counts), T_bwd and τ*."""
    b = page.BUDGET
    out = page.step_budget()
    c = page.hier_constants()
    s = 7e9 * 2
    assert out["S"] == s
    G, g = b["nodes"], b["per_node"]
    r = page.hierarchical_check(G, g)   # bytes per rank for its S; scale to the gradient size
    t = (r["steps"] - 2 * (G - 1)) * c["alpha_intra"] + r["intra_max"] / r["S"] * s * c["beta_intra"] \
        + 2 * (G - 1) * c["alpha_inter"] + r["inter_max"] / r["S"] * s * c["beta_inter"]
    assert out["t_comm"] == pytest.approx(t, rel=1e-9)
    t_bwd = 3 * 2 * 7e9 * b["tokens_per_gpu"] / (989e12 * 0.40) * (4 / 6)   # 4ψ per token, written another way
    assert out["t_bwd"] == pytest.approx(t_bwd, rel=1e-12)
    assert out["overlaps"] and out["t_comm"] < 0.1 * out["t_bwd"]   # "a small part of backward"
    # at τ* tokens the two times are equal
    tau = out["tau_star"]
    assert 4 * 7e9 * tau / (989e12 * 0.40) == pytest.approx(out["t_comm"], rel=1e-12)
    assert tau < b["tokens_per_gpu"]
    # "τ* is nearly independent of ψ": the ψ-free latency part is negligible, and doubling ψ leaves τ* within 0.1 %
    lat = float(ab.hierarchical_allreduce_time(G, g, 0.0, c["alpha_intra"], 0.0, c["alpha_inter"], 0.0))
    assert lat < 1e-3 * out["t_comm"]
    assert page.step_budget({**b, "params": 2 * b["params"]})["tau_star"] == pytest.approx(tau, rel=1e-3)
    # "the 2D time is the slower of the two formulas, so τ* is conservative"
    assert out["t_comm_flat"] < out["t_comm"]


def test_corollary_1_4_6b_needs_a_cut_of_the_whole_node():
    """Corollary 1.4.6 (b) as reworded: the bound is the capacity of the cut around a vertex set that splits
    the GPUs. For a node's whole vertex set (NVSwitch, NICs included) that cut is the NIC sum, and every
    channel set's B stays below it; the set of the node's GPUs alone has a far larger (weaker) cut."""
    g = page.multi_node(nodes=2, gpus=8, nics_per_node=8)
    whole = {v for v, d in g.nodes(data=True) if d.get("node") == 0}
    gpus_only = set(page.gpus_of(g, 0))
    cut = lambda a: sum(d["cap"] for u, v, d in g.edges(data=True) if u in a and v not in a)
    nic_sum = 8 * page.gbit_to_GBps(page.IB_PORT_GBIT["NDR"])
    assert cut(whole) == pytest.approx(nic_sum)
    assert cut(gpus_only) > 5 * nic_sum
    for k in (1, 2, 4, 8, 16):
        b = page.ring_bottleneck(g, page.rotated_rings(g, k))["B"]
        assert b <= cut(whole) * (1 + 1e-12)

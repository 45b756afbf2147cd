"""Ch5-06 ZeRO-Offload 와 ZeRO-Infinity: each test asserts a claim the page makes."""
import time

import numpy as np
import pytest

from snippets import results
from snippets.ch5_zero_sharding import d06_zero_offload_infinity as page
from snippets.common import zero_memory as zm
from tests.conftest import cell_budget


def test_pcie_rates_are_derived_from_lanes_and_encoding():
    """The page's link constants: Gen4 x16 raw ≈ 31.5 GB/s per direction (ERRATA row 8), ×2 per generation."""
    assert page.pcie_x16_bytes_per_s(4) == pytest.approx(31.5e9, rel=1e-2)
    assert page.pcie_x16_bytes_per_s(5) == 2 * page.pcie_x16_bytes_per_s(4) == 4 * page.pcie_x16_bytes_per_s(3)


def test_placement_matches_the_states_deepspeed_allocated():
    """Definition 5.6.1 against the committed offload_bench inventory (DeepSpeed 0.19.8, N = 2, every rank): the bytes
    per parameter placement_bytes puts on GPU + host equal the bytes DeepSpeed allocated for zero2 and
    zero3_offload_cpu; for zero2_offload_cpu DeepSpeed keeps the gradient partition in fp32 (torch's element size read
    here), 2ψ/N more than the 16-bit count; the GPU keeps exactly the 16-bit parameters (2ψ) under ZeRO-Offload."""
    import torch

    r = _cpu_run()
    n = r.hardware["world_size"]
    extra = (torch.empty((), dtype=torch.float32).element_size() - zm.GRAD_BYTES) / n
    cases = {"zero2": (2, False, False, 0.0), "zero3_offload_cpu": (3, True, True, 0.0),
             "zero2_offload_cpu": (2, True, False, extra)}
    for rank in range(n):
        by = {x["config"]: x for x in page.bench_rows(r, rank)}
        for config, (stage, opt, par, more) in cases.items():
            inv = {e["state"]: e["bytes"] / by[config]["psi"] for e in by[config]["inventory"]}
            p = page.placement_bytes(1.0, n, stage, opt, par)
            assert sum(inv.values()) == pytest.approx(p["gpu"] + p["host"] + more), config
            assert bool(by[config]["zero_optimization"].get("offload_param")) is par
            assert bool(by[config]["zero_optimization"].get("offload_optimizer")) is opt
        inv = {e["state"]: e["bytes"] / by["zero2_offload_cpu"]["psi"] for e in by["zero2_offload_cpu"]["inventory"]}
        off = page.placement_bytes(1.0, n, 2, True)
        assert off["gpu"] == pytest.approx(inv["params16"])                     # only the 16-bit parameters stay
        assert off["host"] + extra == pytest.approx(sum(v for k, v in inv.items() if k != "params16"))
    with pytest.raises(ValueError):
        page.placement_bytes(13e9, 8, 2, True, True)


def test_single_gpu_memory_saving_is_8x():
    """Ren et al. §3.4: offloading g16 and the fp32 update super-node saves 8× GPU memory at N = 1."""
    p = page.placement_bytes(1e9, 1, 1, True)  # N = 1: stages coincide in bytes
    assert zm.zero_memory_bytes(1e9, 1, 0) / p["gpu"] == pytest.approx(8)


def test_breakeven_is_independent_of_psi_and_is_where_times_meet():
    """Theorem 5.6.4: at tokens* the offload time equals the GPU time, for every ψ; below it offload is exposed."""
    hw = page.ASSUMED
    for n in (1, 8, 64):
        for offload in ("cpu", "nvme"):
            tok = page.breakeven_tokens(n, hw, offload=offload)
            for psi in (1e8, 7e9, 1e12):
                t = page.step_times(psi, tok, n, hw, offload=offload)
                assert t["gpu"] == pytest.approx(t["pcie"] + t["cpu"] + t["nvme"])
                lo = page.step_times(psi, tok / 2, n, hw, offload=offload)
                hi = page.step_times(psi, tok * 2, n, hw, offload=offload)
                assert lo["overlap"] > lo["gpu"] and hi["overlap"] == pytest.approx(hi["gpu"])
        assert page.breakeven_tokens(n, hw) == pytest.approx(page.breakeven_tokens(1, hw) / n)
    assert page.breakeven_tokens(1, hw, offload="nvme") > page.breakeven_tokens(1, hw)


def test_step_time_bounds_and_monotonicity():
    """Definition 5.6.2: overlap ≤ serial ≤ 2·overlap; faster links never slow a step."""
    psi = np.logspace(8, 11, 20)
    for tokens in (512, 4096, 65536):
        t = page.step_times(psi, tokens, 8)
        assert np.all(t["overlap"] <= t["serial"]) and np.all(t["serial"] <= 2 * t["overlap"] + 1e-12)
        times = [page.step_times(psi, tokens, 8, pcie=bw)["serial"] for bw in page.LINKS.values()]
        assert np.all(times[0] >= times[1]) and np.all(times[1] >= times[2])


def test_shipped_link_bytes_read_from_installed_deepspeed_source():
    """After Theorem 5.6.4: the cited lines of the installed stage_1_and_2.py hold the casts and copies the
    page names: fp32 cast on the device then copy down (4 B), 16-bit host buffer copied up (2 B): 6ψ/N."""
    import ast
    import importlib.util
    from pathlib import Path

    src = page.deepspeed_source_lines()
    for line, text, way, nbytes, _ in page.DEEPSPEED_OFFLOAD_COPIES:
        assert src[line].strip() == text, (line, src[line])
    # the lines sit in the functions the page names, and each DtoH copy follows an fp32 cast
    path = Path(importlib.util.find_spec("deepspeed").origin).parent / "runtime/zero/stage_1_and_2.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spans = {n.name: (n.lineno, n.end_lineno) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    inside = lambda line, fn: spans[fn][0] <= line <= spans[fn][1]  # noqa: E731
    assert inside(1900, "async_inplace_copy_grad_to_fp32_buffer_from_gpu")
    assert inside(1909, "async_inplace_copy_grad_to_fp32_buffer_from_gpu")
    assert inside(2156, "copy_grads_in_partition")
    assert inside(3095, "step") and inside(3096, "step")
    assert "single_partition_of_fp32_groups[i].grad" in src[1893]          # the destination is the host fp32 buffer
    assert "param_buffer_of_bit16_for_cpu_offload_groups[i]" in src[3094]  # the 16-bit host staging buffer
    down = {b for _, _, way, b, _ in page.DEEPSPEED_OFFLOAD_COPIES if way == "DtoH"}
    up = sum(b for _, _, way, b, _ in page.DEEPSPEED_OFFLOAD_COPIES if way == "HtoD")
    assert down == {4} and up == 2 and page.LINK_BYTES_SHIPPED == 4 + 2 and page.LINK_BYTES_PAPER == 2 + 2
    # the committed CPU run agrees: the host gradient buffer of ZeRO-2 offload is fp32
    by = {x["config"]: x for x in page.bench_rows(_cpu_run())}
    assert {e["state"]: e["dtype"] for e in by["zero2_offload_cpu"]["inventory"]}["grads"] == "float32"


def test_accumulation_moves_16bit_grads_every_micro_batch_unless_fp32_accumulation():
    """After Theorem 5.6.4 (gradient accumulation): in the installed stage_1_and_2.py the default (model-dtype)
    accumulation path keeps a host buffer in param.dtype, copies it up and down every micro-batch, and is called
    whenever micro_step_id > 0 or the step is not at its boundary; fp32 accumulation takes the compact path."""
    import ast
    import importlib.util
    from pathlib import Path

    src = page.deepspeed_source_lines()
    assert src[1809].strip() == "def async_accumulate_grad_in_cpu_via_gpu(self, param):"
    assert "dtype=param.dtype, device=self.device" in src[1824]                     # 16-bit host buffer
    assert src[1833].strip().startswith("dest_buffer.copy_(self.accumulated_grads_in_cpu[param_id]")   # up
    assert src[1846].strip().startswith("self.accumulated_grads_in_cpu[param_id].data.copy_(grad_accum")  # down
    assert src[2166].strip() == "if self.micro_step_id > 0 or not self.is_gradient_accumulation_boundary():"
    assert src[2167].strip() == "self.async_accumulate_grad_in_cpu_via_gpu(param)"
    assert "gradient_accumulation_dtype != torch.float32" in src[1261]
    path = Path(importlib.util.find_spec("deepspeed").origin).parent / "runtime/zero/stage_1_and_2.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spans = {n.name: (n.lineno, n.end_lineno) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert spans["async_accumulate_grad_in_cpu_via_gpu"][0] <= 1846 <= spans["async_accumulate_grad_in_cpu_via_gpu"][1]
    assert spans["copy_grads_in_partition"][0] <= 2166 <= spans["copy_grads_in_partition"][1]
    assert spans["_use_compact_grad_partition_buffer"][0] <= 1261 <= spans["_use_compact_grad_partition_buffer"][1]
    # the compact path returns before the per-micro-batch accumulation: its copy (line 2156) sits above line 2166
    assert spans["copy_grads_in_partition"][0] < 2156 < 2166


def test_step_model_uses_the_shipped_link_bytes():
    """Definition 5.6.2 / Theorem 5.6.5 with c_L: the PCIe term moves, per parameter of the rank's shard, one fp32
    gradient down and one 16-bit parameter up (shipped DeepSpeed, element sizes read from torch) or 16-bit both ways
    (the paper); the threshold computed by bisection on step_times (where offload stops being exposed) moves by the
    same byte difference."""
    import torch

    f32, b16 = (torch.empty((), dtype=d).element_size() for d in (torch.float32, torch.bfloat16))
    psi, n, w = 3e9, 4, 1e9
    assert float(page.step_times(psi, 1, n, pcie=w)["pcie"]) * w * n / psi == pytest.approx(f32 + b16)
    paper = page.step_times(psi, 1, n, pcie=w, link_bytes=page.LINK_BYTES_PAPER)
    assert float(paper["pcie"]) * w * n / psi == pytest.approx(b16 + b16)
    hw = page.ASSUMED

    def meet(link_bytes):
        lo, hi = 1.0, 1e9
        for _ in range(200):
            mid = (lo * hi) ** 0.5
            t = page.step_times(psi, mid, n, hw, link_bytes=link_bytes)
            lo, hi = (mid, hi) if float(t["overlap"]) > float(t["gpu"]) * (1 + 1e-12) else (lo, mid)
        return hi

    assert meet(page.LINK_BYTES_SHIPPED) == pytest.approx(page.breakeven_tokens(n, hw), rel=1e-6)
    assert meet(page.LINK_BYTES_PAPER) == pytest.approx(
        page.breakeven_tokens(n, hw, link_bytes=page.LINK_BYTES_PAPER), rel=1e-6)
    assert meet(page.LINK_BYTES_SHIPPED) - meet(page.LINK_BYTES_PAPER) == pytest.approx(
        hw.gpu_flops * (f32 - b16) / hw.pcie / (6 * n), rel=1e-5)


def test_exercise1_shipped_bytes_change_the_conclusion():
    """Exercise 1: at τ = 8192 (13B, N = 1, BW_cpu = 200 GB/s) the paper's 4ψ says offload hides, DeepSpeed's 6ψ says it does not."""
    from dataclasses import replace

    hw = replace(page.ASSUMED, cpu_bw=200 * zm.GB)
    paper = page.step_times(13e9, 8192, 1, hw, link_bytes=page.LINK_BYTES_PAPER)
    shipped = page.step_times(13e9, 8192, 1, hw)
    assert float(paper["overlap"]) == float(paper["gpu"])
    assert float(shipped["overlap"]) > float(shipped["gpu"])
    assert page.breakeven_tokens(1, hw, link_bytes=4) < 8192 < page.breakeven_tokens(1, hw)


def test_model_size_table_memory_walls():
    """Experiment 3's table: at N = 8 the GPU-only wall is (M−R)/(2 + 14/8) and offload's is (M−R)/2."""
    hw = page.ASSUMED
    wall = page.max_params_on_gpu(hw, 8, 2, False)
    wall_off = page.max_params_on_gpu(hw, 8, 2, True)
    assert wall == pytest.approx((hw.gpu_mem - hw.act_reserve) / (2 + 14 / 8))
    assert wall_off == pytest.approx((hw.gpu_mem - hw.act_reserve) / 2)
    rows = page.model_size_table(page.NODE_TOKENS, page.NODE_N)
    assert [r["fits_gpu_only"] for r in rows] == [p <= wall for p in page.MODEL_SIZES]
    assert any(r["fits_offload"] and not r["fits_gpu_only"] for r in rows)


def test_infinity_efficiency_formula():
    """Corollary 5.6.5: efficiency = compute time / (compute + data-movement time), computed here from times (a FLOP
    count over peak, the bytes those FLOPs need over bw) rather than the page's closed form; one half where
    ait·bw = peak, rising with ait."""
    peak, bw = 1e14, 1e12
    for ait in (10.0, 100.0, 1000.0):
        nbytes = 3.7e9
        t_compute, t_move = ait * nbytes / peak, nbytes / bw
        assert float(page.infinity_efficiency(ait, bw, peak)) == pytest.approx(t_compute / (t_compute + t_move))
    assert page.infinity_efficiency(peak / bw, bw, peak) == pytest.approx(0.5)
    e = page.infinity_efficiency(np.array([10, 100, 1000]), bw, peak)
    assert np.all(np.diff(e) > 0)


def test_figures_and_tables_are_fast():
    """GUIDE budget: a cell under 1 s. CPU time of this thread, so other jobs (and threads left by earlier tests) do not count."""
    from snippets.common import figures  # noqa: F401  (matplotlib import is paid once per build)

    t0 = time.thread_time()
    svg = page.step_time_figure(page.NODE_TOKENS, page.NODE_N)
    page.model_size_table(page.NODE_TOKENS, page.NODE_N)
    assert "<svg" in svg and time.thread_time() - t0 < cell_budget()
    t0 = time.thread_time()
    assert "<svg" in page.efficiency_figure(page.NODE_N) and time.thread_time() - t0 < cell_budget()


# ------------------------------------------------------------ the committed DeepSpeed results

def _cpu_run():
    runs = results.load("offload_bench", kind="cpu")
    assert len(runs) >= 1
    return runs[0]


def test_committed_inventory_matches_formula_on_every_rank():
    """Experiment 1: each state's bytes per rank equal the shared formula (fp32 grads under stage-2 offload)."""
    r = _cpu_run()
    n = r.hardware["world_size"]
    assert n == 2
    for rank in range(n):
        header, rows = page.inventory_table(r, rank)
        assert rows and all(row[-1] == "✅" for row in rows)
    by = {x["config"]: x for x in page.bench_rows(r)}
    assert by["zero2_offload_cpu"]["cpu_offload_flag"] and not by["zero2"]["cpu_offload_flag"]
    inv = {e["state"]: e for e in by["zero2_offload_cpu"]["inventory"]}
    assert inv["grads"]["dtype"] == "float32" and inv["master_fp32"]["numel"] == by["zero2"]["psi"] // n
    inv3 = {e["state"]: e for e in by["zero3_offload_cpu"]["inventory"]}
    assert inv3["params16"]["numel"] * n == by["zero3_offload_cpu"]["psi"]


def test_committed_nvme_error_is_recorded():
    """Experiment 1: NVMe offload cannot start here; the page quotes DeepSpeed's own error."""
    r = _cpu_run()
    errs = page.errors(r)
    assert set(errs) == {"zero3_offload_nvme"}
    assert "async_io" in errs["zero3_offload_nvme"]
    assert r.params["op_builders"]["async_io"]["compatible"] is False


def test_committed_cpu_adam_is_not_faster_than_the_bandwidth_bound():
    """Experiment 4: a torch AdamW step takes at least 28 B/param / host copy bandwidth, on every rank."""
    rows = page.probe_rows(_cpu_run())
    assert sorted(p["rank"] for p in rows) == [0, 1]
    for p in rows:
        assert p["numel"] >= 1 << 23  # 32 MB per fp32 tensor: larger than the caches
        assert p["adam_ms"] >= p["adam_bound_ms"] and p["ratio"] >= 1


def test_link_prediction_and_placement_rule():
    """Experiment 4's GPU prediction: no offload moves nothing; ZeRO-2 offload moves the fp32 gradient partition
    down (4ψ/N) and the 16-bit update up (2ψ/N), the bytes of DEEPSPEED_OFFLOAD_COPIES; ZeRO-3 gets no number.
    Definition 5.6.1's places: on a GPU only the 16-bit parameters of ZeRO-2 offload stay on the device."""
    by = {x["config"]: x for x in page.bench_rows(_cpu_run())}
    psi, n = by["zero2"]["psi"], 2
    assert page.link_prediction(by["zero2"], n) == {"DtoH": 0.0, "HtoD": 0.0}
    down = max(b for _, _, way, b, _ in page.DEEPSPEED_OFFLOAD_COPIES if way == "DtoH")  # alternative paths, 4 B each
    up = sum(b for _, _, way, b, _ in page.DEEPSPEED_OFFLOAD_COPIES if way == "HtoD")
    assert page.link_prediction(by["zero2_offload_cpu"], n) == {"DtoH": down * psi / n, "HtoD": up * psi / n}
    assert page.link_prediction(by["zero3_offload_cpu"], n) is None
    dev = page.expected_devices(by["zero2_offload_cpu"], "cuda")
    assert dev == {"params16": "cuda", "grads": "cpu", "master_fp32": "cpu", "adam_m": "cpu", "adam_v": "cpu"}
    assert set(page.expected_devices(by["zero3_offload_cpu"], "cuda").values()) == {"cpu"}
    assert all(row[-1] == "✅" for row in page.placement_check(_cpu_run()))  # CPU: every place is "cpu"


def test_gpu_tab_compares_the_gpu_files_memcpy_bytes(tmp_path, monkeypatch):
    """Experiment 4 per hardware: the step-time cell's GPU tab tabulates that file's memcpy bytes per step next to
    the prediction, and the host-probe cell's GPU tab its pinned PCIe bandwidth; the CPU tabs have neither. The
    fixture's HtoD bytes are halved first, so the measured column can only come from that file."""
    from tests.page_cells import edit, gpu_copies, results_dir, run_cell, tab, table_rows

    md = "ch5-zero-sharding/06-zero-offload-infinity.md"
    res = results_dir(tmp_path, ["offload_bench"])
    f = res / "offload_bench" / "gpu-nccl-1x2-nvidia-h200.json"

    def half(d):
        for m in d["measurements"]:
            if "memcpy_bytes" in m:
                m["memcpy_bytes"]["HtoD"] //= 2
    edit(f, half)
    gpu_file = results.read(f)
    off = next(m for m in page.bench_rows(gpu_file) if m["config"] == "zero2_offload_cpu")
    n = gpu_file.hardware["world_size"]
    html = run_cell(md, "ch5-06-exp4-cpu", res, monkeypatch)
    gpu, cpu_tab = tab(html, "GPU"), tab(html, "CPU")
    measured = off["memcpy_bytes"]["HtoD"] / off["memcpy_steps"] / 1e6
    assert f"{measured:,.2f}" in gpu and f"{2 * off['psi'] / n / 1e6:,.2f}" in gpu and f"{4 * off['psi'] / n / 1e6:,.2f}" in gpu
    assert "DtoH" in gpu and "DtoH" not in cpu_tab
    probe = next(m for m in gpu_file.measurements if m["config"] == "host_probe")["probe"]
    host = run_cell(md, "ch5-06-exp4-adam", res, monkeypatch)
    assert f"{probe['pcie_h2d_GBps']:.1f}" in tab(host, "GPU") and "pinned HtoD" not in tab(host, "CPU")
    placed = tab(run_cell(md, "ch5-06-exp1-inventory", res, monkeypatch), "GPU")
    assert "params16 cuda, grads cpu" in placed  # ZeRO-2 offload's inventory as the GPU file records it


def test_gpu_path_memcpy_parser_on_a_kineto_like_trace(monkeypatch):
    """Experiment 4's GPU path: memcpy bytes are summed from the trace's gpu_memcpy events by direction."""
    import json
    import sys

    from gpu_runs import offload_bench

    class FakeProfile:
        def export_chrome_trace(self, path):
            ev = [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "args": {"bytes": 1000}},
                  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "args": {"bytes": 24}},
                  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "args": {"bytes": 512}},
                  {"ph": "X", "cat": "kernel", "name": "gemm", "args": {}}]
            with open(path, "w") as f:
                json.dump({"traceEvents": ev}, f)

    assert offload_bench.memcpy_bytes(FakeProfile()) == {"DtoH": 1024, "HtoD": 512, "DtoD": 0}
    assert "gpu_runs.offload_bench" in sys.modules


@pytest.mark.dist
def test_tiny_preset_really_offloads(run_tiny):
    """The program, launched for real (2 gloo processes): offload works without compiled ops."""
    data, took = run_tiny("offload_bench", 2, timeout=240)
    rows = {(m["rank"], m["config"]): m for m in data["measurements"]}
    for rank in (0, 1):
        off = rows[(rank, "zero2_offload_cpu")]
        assert off["ok"] and off["cpu_offload_flag"]
        assert off["losses"][-1] < off["losses"][0]
        states = {e["state"]: e for e in off["inventory"]}
        psi = off["psi"]
        assert states["adam_m"]["numel"] == states["adam_v"]["numel"] == psi // 2
        assert states["master_fp32"]["bytes"] == 4 * psi // 2
        assert not rows[(rank, "zero3_offload_nvme")]["ok"]
        probe = rows[(rank, "host_probe")]["probe"]
        assert probe["copy_GBps"] > 0 and probe["adam_ms"] > 0
    assert took < 120  # GUIDE: < 30 s on an idle 2-core machine; the bound leaves room for a shared one
    print(f"tiny offload_bench: {took:.1f} s")


# --- experiment 5: the link offload crosses (gpu_runs/mem_bandwidth.py) -------------------------------

MD = "ch5-zero-sharding/06-zero-offload-infinity.md"




def test_committed_cpu_result_has_no_host_device_link():
    """Experiment 5's CPU reading: the committed CPU file records host↔device copies as not applicable, with a
    reason and no numbers, so the page has nothing to invent."""
    (mem,) = [r for r in results.experiment(page.MEM_PROGRAM) if not r.is_gpu]
    m = mem.measurements
    for d in page.DIRECTIONS:
        assert m[d]["applies"] is False and m[d]["reason"] and set(m[d]) == {"applies", "reason"}
    assert all(v is None for k, v in m["best"].items() if not k.startswith("device_to_device"))
    assert page.link_rates(mem) is None


def test_experiment_5_tabs(tmp_path, monkeypatch):
    """The page's cell. CPU tab: the file's reason, verbatim, and no GB/s at all. GPU tab (a GPU-shaped copy whose
    pinned copies are scaled, so the numbers can only come from it): the pinned / pageable ratios recomputed from
    its JSON, and τ* with the measured link where the step-time model (step_times, a second route to Theorem
    5.6.5) has the GPU time equal to the offload time."""
    import html as H
    import json

    from tests.page_cells import edit, gpu_copies, results_dir, run_cell, tab, table_rows

    res = results_dir(tmp_path, [page.MEM_PROGRAM, "offload_bench"])  # run_cell runs the whole session
    (gpu,) = gpu_copies(res, page.MEM_PROGRAM)

    def scale(d):
        for direction in page.DIRECTIONS:
            for r in d["measurements"][direction]["pinned"]:
                r["GBps"] *= 1.3
    edit(gpu, scale)
    out = run_cell(MD, "ch5-06-exp5-link", res, monkeypatch)
    cpu_body = tab(out, "CPU").split('<details')[0]
    cpu = json.loads(next((res / page.MEM_PROGRAM).glob("cpu-*.json")).read_text())
    for direction in page.DIRECTIONS:
        assert cpu["measurements"][direction]["reason"] in H.unescape(cpu_body)
    assert "GB/s" not in cpu_body
    body = tab(out, "GPU")
    d = json.loads(gpu.read_text())["measurements"]
    best = {(k, mem): max(r["GBps"] for r in d[k][mem]) for k in page.DIRECTIONS for mem in ("pinned", "pageable")}
    h2d, d2h = best[("host_to_device", "pinned")], best[("device_to_host", "pinned")]
    assert f"HtoD {h2d / best[('host_to_device', 'pageable')]:.2f}×" in body
    assert f"DtoH {d2h / best[('device_to_host', 'pageable')]:.2f}×" in body
    b = 6 / (4 / (d2h * 1e9) + 2 / (h2d * 1e9))          # bytes/s: 4 down then 2 up per parameter, one link
    (row,) = [r for r in table_rows(body) if r[0] == "측정: pinned"]
    assert row[1] == f"{b / 1e9:.2f}"
    tau = float(row[-1].replace(",", ""))
    t = page.step_times(13e9, tau, page.NODE_N, page.ASSUMED, pcie=b)   # at τ* the GPU time is the offload time
    assert t["gpu"] == pytest.approx(t["pcie"] + t["cpu"], rel=1e-3)
    link, cpu_adam = 6 / b, 30 / page.ASSUMED.cpu_bw                   # c_L / B and c_A / BW_cpu, seconds per parameter
    assert row[3] == f"{link / (link + cpu_adam):.0%}"
    assert "host↔device 복사가 없습니다" not in body


def test_experiment_5_cell_is_fast(tmp_path):
    from tests.page_cells import gpu_copies, results_dir

    res = results_dir(tmp_path, [page.MEM_PROGRAM], gpu=False)
    runs = [results.read(p) for p in [*sorted((res / page.MEM_PROGRAM).glob("*.json")), *gpu_copies(res, page.MEM_PROGRAM)]]
    t0 = time.perf_counter()
    results.hardware_tabs(runs, page.host_link_tab)
    assert time.perf_counter() - t0 < cell_budget()


def test_breakeven_caveats_shared_host_and_omitted_allgather():
    """Next to Theorem 5.6.5: (1) τ* ∝ 1/N only with a fixed host share — with one node's host bandwidth split N ways
    the threshold found by bisection on step_times (a hardware with cpu_bw = B_host/N) is what the page prints and
    N·τ* is not constant; (2) the omitted ZeRO-2 AllGather: its time, taken as half of Ch1's ring AllReduce (α = 0),
    equals the compute 6ψτ/F at τ*_AG, for every ψ, and τ*_AG tends to F·e/(6·BW_gpu), not 0."""
    from dataclasses import replace

    from snippets.common import alphabeta as ab

    hw = page.ASSUMED

    def meet(h, n, psi=7e9):
        lo, hi = 1.0, 1e9
        for _ in range(200):
            mid = (lo * hi) ** 0.5
            t = page.step_times(psi, mid, n, h)
            lo, hi = (mid, hi) if float(t["overlap"]) > float(t["gpu"]) * (1 + 1e-12) else (lo, mid)
        return hi

    rows = {r["N"]: r for r in page.caveat_rows()}
    for n in (1, 2, 4, 8):
        assert rows[n]["shared"] == pytest.approx(meet(replace(hw, cpu_bw=page.NODE_HOST_BW / n), n), rel=1e-6)
        assert rows[n]["fixed"] == pytest.approx(meet(hw, n), rel=1e-6)
    assert rows[8]["shared"] == pytest.approx(rows[8]["fixed"])          # a full node: the share is hw.cpu_bw
    assert page.NODE_HOST_BW / page.NODE_N == pytest.approx(hw.cpu_bw)
    assert rows[1]["fixed"] == pytest.approx(8 * rows[8]["fixed"])         # fixed share: exactly 1/N
    assert rows[1]["shared"] < 4 * rows[8]["shared"]                        # shared host: far from 1/N
    for n in (2, 8, 64):
        for psi in (1e9, 7e10):
            t_ag = float(ab.ring_allreduce_time(n, 2 * psi, 0.0, 1 / page.GPU_LINK_BW)) / 2
            assert 6 * psi * rows[n]["allgather"] / hw.gpu_flops == pytest.approx(t_ag)
    assert rows[1]["allgather"] == 0
    assert rows[64]["allgather"] < hw.gpu_flops * 2 / (6 * page.GPU_LINK_BW) < 1.02 * rows[64]["allgather"]
    assert all(r["allgather"] < r["fixed"] for r in rows.values())          # "smaller than τ* in this assumption"


def test_zero2_step_allgather_call_names_in_installed_sources():
    """The caveat's call chain, read from the installed sources: DeepSpeed's ZeRO-1/2 step calls all_gather_dp_groups,
    which reaches dist.all_gather_into_tensor (the old name); torch 2.13's FSDP2 collectives call all_gather_single."""
    import ast
    import inspect

    import deepspeed.runtime.utils as ds_utils
    import deepspeed.runtime.zero.stage_1_and_2 as s12
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as fc

    import textwrap

    def calls(obj):
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
        return {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
                for n in ast.walk(tree) if isinstance(n, ast.Call)}

    assert "all_gather_dp_groups" in calls(s12.DeepSpeedZeroOptimizer.step)
    assert "all_gather_into_tensor_dp_groups" in calls(ds_utils.all_gather_dp_groups)
    assert "all_gather_into_tensor" in calls(ds_utils.all_gather_into_tensor_dp_groups)
    fsdp = calls(fc)
    assert {"all_gather_single", "reduce_scatter_single"} <= fsdp
    assert not {"all_gather_into_tensor", "reduce_scatter_tensor"} & fsdp

"""Chapter 3 (tensor parallelism). The helpers below are the plumbing every page of the chapter shares
to read gpu_runs/tp_bench.py's results per hardware (one tab per hardware, snippets.results.hardware_tabs);
the formulas and the readings live in each page's module."""
from __future__ import annotations


def unit(plat) -> str:
    """What one rank is on this hardware: 'GPUs' or 'processes'."""
    return "GPUs" if plat.is_gpu else "processes"


def hw_short(plat) -> str:
    """'CPU, gloo' / 'GPU, NCCL': the hardware a measured figure panel or table row comes from."""
    backend = plat.runs[0].hardware["backend"]
    return f"GPU ({plat.runs[0].hardware['gpu_name']}), {backend.upper()}" if plat.is_gpu else f"CPU, {backend}"


def missing(plat, what: str) -> str:
    """A tab's note for a measurement this hardware's results do not contain."""
    worlds = ", ".join(str(n) for n in sorted(plat.by_world))
    return (f'!!! note "이 하드웨어에는 없는 측정"\n    {what} (이 하드웨어의 결과 파일: '
            f"world size {worlds} {unit(plat)}).\n")


def shape_line(run) -> str:
    """The measured shape and dtype of one tp_bench results file, read from its params."""
    p = run.params
    return (f"b = {p['b']}, s = {p['s']}, h = {p['h']}, a = {p['a']}, {p.get('dtype', 'float32')} "
            f"(preset `{p['preset']}`)")


# The absolute bound tp_bench.py applied to its fp32 cases before it recorded a tolerance per case (its old
# exit status: max_abs_diff_all_ranks > 1e-4). Used only for a file whose cases carry no "tolerance".
FP32_TOLERANCE = 1e-4


def case_tolerance(case: dict) -> dict[str, float]:
    """The absolute bound per quantity ('output', 'input_grad', 'param_grad') one tp_bench case was judged by.

    tp_bench.py's run_case records it per case (gpu_runs/tp_bench.py:269-278): harness.tolerance(dtype, K)
    with K = max(4h, b·s) gives rel = 2γ_K (gpu_runs/harness.py:335), and abs[q] = rel × the reference's
    max |q| (case["ref_max_abs"]). A file written before that recorded none: FP32_TOLERANCE for each."""
    tol = case.get("tolerance")
    if isinstance(tol, dict) and "abs" in tol:
        return {k: float(v) for k, v in tol["abs"].items()}
    return {k: FP32_TOLERANCE for k in case["max_abs_diff"]}


def case_within(case: dict) -> bool:
    """The program's own verdict over every rank (within_tolerance_all_ranks) where it wrote one; otherwise
    rank 0's differences against case_tolerance."""
    if "within_tolerance_all_ranks" in case:
        return bool(case["within_tolerance_all_ranks"])
    tol = case_tolerance(case)
    return all(d <= tol[k] for k, d in case["max_abs_diff"].items())


def tolerance_rule(case: dict) -> str:
    """How the case's bound was set, in words for the page ('2γ_K × max|ref|, K = 3072, float32' or the old 1e-4)."""
    tol = case.get("tolerance")
    if isinstance(tol, dict) and "abs" in tol:
        return f"2γ_K × max|ref|, K = {tol['reduction_length']}, {tol['dtype']} (rel {tol['rel']:.1e})"
    return f"절대 오차 {FP32_TOLERANCE:g} (이 파일은 case 별 tolerance 를 기록하기 전의 것)"

"""Chapter 4 (pipeline parallelism). The helpers below are the plumbing the chapter's pages share to read
gpu_runs/pipeline_bench.py's and gpu_runs/deepspeed_pipe.py's results per hardware (one tab per hardware,
snippets.results.hardware_tabs); the formulas, the simulator comparisons and the readings live in each
page's module."""
from __future__ import annotations


def the_run(plat):
    """The one results file of a two-rank program on this hardware (pipeline_bench and deepspeed_pipe run
    with world size 2 only); None if this hardware has none at world size 2."""
    return plat.by_world.get(2)


def hw_short(plat) -> str:
    """'CPU, gloo' / 'GPU (NVIDIA H200), NCCL': the hardware a measured figure panel comes from."""
    h = plat.runs[0].hardware
    return f"GPU ({h['gpu_name']}), {h['backend'].upper()}" if plat.is_gpu else f"CPU, {h['backend']}"


def missing(plat, what: str = "이 프로그램은 rank 2 개 (world size 2) 에서만 돕니다: 이 하드웨어에는 N = 2 측정이 없습니다") -> str:
    """A tab's note for a measurement this hardware's results do not contain."""
    worlds = ", ".join(str(n) for n in sorted(plat.by_world))
    return f'!!! note "이 하드웨어에는 없는 측정"\n    {what} (이 하드웨어의 결과 파일: world size {worlds}).\n'


def preset_line(run) -> str:
    """The preset and sizes of one pipeline_bench file, read from its params."""
    p = run.params
    return (f"preset `{p['preset']}`: p = {p['p']}, 층 {p['layers']} 개, sleep 변형 T = {p['sleep_ms']:g} ms/층/op, "
            f"real 변형 d = {p['d']}, rows = {p['rows']}; 측정한 step {p['steps']} 개의 median")


def gantt(ax, rows, title: str = "", unit: float = 1.0, label_mb: bool = True) -> None:
    """The same chart as snippets.common.pipeline_sim.gantt (per-rank bars, the op's colour, chunk 1 hatched and
    lighter, the micro-batch written on the bar), drawn with one broken_barh collection per (rank, op, chunk)
    instead of one barh per action: a measured timeline has hundreds of actions, and a tab per hardware draws
    it once per hardware, so this keeps a cell with three hardwares under the 1 s budget."""
    from snippets.common.pipeline_sim import OP_COLOURS

    for r, acts in enumerate(rows):
        groups: dict[tuple, list] = {}
        for a in acts:
            x0, w = a["start"] / unit, (a["end"] - a["start"]) / unit
            groups.setdefault((a["op"], a.get("chunk", 0) != 0), []).append((x0, w))
            if label_mb and w > 0:
                ax.text(x0 + w / 2, r, str(a["mb"]), ha="center", va="center", fontsize=7, color="white")
        for (op, second), spans in groups.items():
            ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=OP_COLOURS[op], edgecolor="white", linewidth=0.5,
                           alpha=0.6 if second else 1.0, hatch="//" if second else None)
    ax.autoscale_view()
    ax.set_yticks(range(len(rows)), [f"rank {r}" for r in range(len(rows))])
    ax.set_ylim(len(rows) - 0.5, -0.5)  # rank 0 on top, as pipeline_sim.gantt's invert_yaxis
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", visible=False)

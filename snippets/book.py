"""The book's table of contents: 7 chapters, 35 documents (from the syllabus).

Single source for the landing-page map, the structure tests and the mirrored names
(page -> snippets module -> test module). A document is "written" when its page exists.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@dataclass(frozen=True)
class Doc:
    chapter: str  # folder name, e.g. "ch1-collective"
    number: int  # number in the syllabus
    slug: str  # ascii slug, e.g. "ring-allreduce"
    title: str  # Korean title as in the syllabus (corrected where ERRATA says so)

    @property
    def stem(self) -> str:
        return f"{self.number:02d}-{self.slug}"

    @property
    def path(self) -> str:
        """Path relative to docs/."""
        return f"{self.chapter}/{self.stem}.md"

    @property
    def url(self) -> str:
        return f"{self.chapter}/{self.stem}/"

    @property
    def package(self) -> str:
        return self.chapter.split("-", 1)[0] + "_" + self.chapter.split("-", 1)[1].replace("-", "_")

    @property
    def module(self) -> str:
        """Mirrored snippets module: snippets/<package>/d<NN>_<slug>.py."""
        return f"d{self.number:02d}_{self.slug.replace('-', '_')}"

    @property
    def module_path(self) -> str:
        return f"snippets/{self.package}/{self.module}.py"

    @property
    def test_path(self) -> str:
        return f"tests/{self.package}/test_{self.module}.py"

    @property
    def written(self) -> bool:
        return (DOCS / self.path).exists()


@dataclass(frozen=True)
class Chapter:
    folder: str
    number: int
    title: str
    docs: tuple[Doc, ...]

    @property
    def package(self) -> str:
        return self.docs[0].package

    @property
    def lab_path(self) -> str:
        return f"{self.folder}/lab.py"


def _chapter(folder: str, number: int, title: str, docs: list[tuple[str, str]]) -> Chapter:
    return Chapter(folder, number, title,
                   tuple(Doc(folder, i + 1, slug, t) for i, (slug, t) in enumerate(docs)))


CHAPTERS: tuple[Chapter, ...] = (
    _chapter("ch1-collective", 1, "Collective Communication 의 수학", [
        ("collective-taxonomy", "Collective Operation 의 분류"),
        ("allreduce-algorithms", "AllReduce 의 구현 비교"),
        ("ring-allreduce", "Ring AllReduce 의 수학"),
        ("nccl-topology", "NCCL 과 NVLink 토폴로지"),
        ("bandwidth-latency", "Bandwidth vs Latency Bound"),
    ]),
    _chapter("ch2-data-parallel", 2, "Data Parallelism 과 PyTorch DDP", [
        ("data-parallel-basics", "Data Parallelism 의 기본"),
        ("pytorch-ddp", "PyTorch DistributedDataParallel (DDP)"),
        ("gradient-bucket", "Gradient Bucket 과 Backward Overlap"),
        ("gradient-accumulation", "Gradient Accumulation 과 no_sync"),
        ("batch-size-scaling", "Batch Size Scaling Rules"),
        ("async-parameter-server", "Async Updates — Hogwild! 와 Parameter Server"),
    ]),
    _chapter("ch3-tensor-parallel", 3, "Model Parallelism 과 Tensor Parallelism", [
        ("model-parallel-motivation", "Model Parallelism 의 동기와 Naive 한계"),
        ("column-row-split", "Tensor Parallelism — Column / Row Split"),
        ("megatron-mlp", "Megatron MLP 의 TP 구조"),
        ("megatron-attention", "Megatron Attention 의 TP 구조"),
        ("tp-communication-cost", "Tensor Parallelism 의 통신 비용 분석"),
    ]),
    _chapter("ch4-pipeline-parallel", 4, "Pipeline Parallelism", [
        ("naive-pipeline-bubble", "Naive Pipeline 의 Bubble 문제"),
        ("gpipe-microbatching", "GPipe 와 Micro-batching"),
        ("one-f-one-b", "1F1B Schedule (PipeDream-Flush)"),
        ("interleaved-1f1b", "Interleaved 1F1B (Megatron-LM)"),
        ("chimera-bidirectional", "Chimera, 2D/3D Pipeline"),
    ]),
    _chapter("ch5-zero-sharding", 5, "ZeRO 와 Sharding (FSDP)", [
        ("zero-motivation", "ZeRO 의 Motivation 과 메모리 분해"),
        ("zero-1", "ZeRO-1 — Optimizer State Sharding"),
        ("zero-2", "ZeRO-2 — Gradient Sharding 추가"),
        ("zero-3", "ZeRO-3 — Parameter Sharding"),
        ("fsdp", "FSDP — PyTorch Fully Sharded Data Parallel"),
        ("zero-offload-infinity", "ZeRO-Offload 와 ZeRO-Infinity"),
    ]),
    _chapter("ch6-activation-memory", 6, "Activation Memory 최적화", [
        ("activation-size", "Activation Memory 의 크기"),
        ("gradient-checkpointing", "Gradient Checkpointing"),
        ("selective-recompute", "Selective Activation Recomputation"),
        ("sequence-parallelism", "Sequence Parallelism"),
    ]),
    _chapter("ch7-3d-parallelism", 7, "3D Parallelism 과 실전", [
        ("3d-parallelism", "3D Parallelism 통합 — DP × TP × PP"),
        ("moe-expert-parallelism", "MoE Parallelism — Expert Parallelism"),
        ("checkpointing-resume", "Efficient Checkpointing 과 Resume"),
        ("elastic-training", "Failure Recovery — Elastic Training"),
    ]),
)

ALL_DOCS: tuple[Doc, ...] = tuple(d for c in CHAPTERS for d in c.docs)


def doc_by_path(path: str) -> Doc | None:
    """Doc for a path relative to docs/ (e.g. 'ch1-collective/03-ring-allreduce.md')."""
    return next((d for d in ALL_DOCS if d.path == path), None)


def written_docs() -> list[Doc]:
    return [d for d in ALL_DOCS if d.written]

"""The book's table of contents: 7 chapters, 35 documents (from the syllabus).

Single source for the landing-page map, the structure tests and the mirrored names
(page -> snippets module -> test module). A document is "written" when its page exists.
"""
from __future__ import annotations

import math
import re
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


# ------------------------------------------------------------------ the landing page: one line, reading time, tour

def key(doc: Doc) -> str:
    """'Ch4-03': how the pages name a document."""
    return f"Ch{doc.chapter[2]}-{doc.number:02d}"


def by_key(k: str) -> Doc:
    return next(d for d in ALL_DOCS if key(d) == k)


SUMMARIES: dict[str, str] = {
    "Ch1-01": "여덟 collective 가 rank 마다 무엇을 받고 내놓는지, AllReduce 가 ReduceScatter 와 AllGather 로 나뉘는 이유.",
    "Ch1-02": "Naive, recursive doubling, Rabenseifner, ring, tree 의 step 수와 보내는 bytes 를 한 모델로 비교합니다.",
    "Ch1-03": "Ring AllReduce 가 보내는 bytes 와, 그것이 어떤 AllReduce 도 내려갈 수 없는 대역폭 하한인 이유.",
    "Ch1-04": "NCCL 이 토폴로지를 읽어 channel, 알고리즘, protocol 을 고르는 과정과 링크 대역폭의 단위.",
    "Ch1-05": "α-β 모델로 latency 에 묶인 메시지와 대역폭에 묶인 메시지를 가르고, 측정에서 α 와 β 를 뽑습니다.",
    "Ch2-01": "Gradient 평균이 큰 batch 의 SGD 와 같아지는 조건과, 실제 DDP 가 bit 단위로 어디까지 같은지.",
    "Ch2-02": "DDP 가 생성, forward, sampler 에서 실제로 하는 일을 torch 의 코드와 실행으로 따라갑니다.",
    "Ch2-03": "Gradient 를 bucket 으로 묶어 backward 와 AllReduce 를 겹치는 방법과, 그 겹침을 재는 법.",
    "Ch2-04": "Gradient accumulation 과 no_sync 로 큰 batch 를 만들 때 메모리와 통신이 어떻게 바뀌는지.",
    "Ch2-05": "Batch 를 키울 때의 학습률 규칙과 warmup, 쓸모 있는 가장 큰 batch 를 재는 양.",
    "Ch2-06": "Hogwild! 와 parameter server: 낡은 gradient 가 학습률에 주는 한계와 elastic averaging.",
    "Ch3-01": "70B 모델이 data parallel 로는 GPU 하나에 들어가지 않는 이유와, 층을 나눈 naive model parallel 의 한계.",
    "Ch3-02": "행렬곱을 열로, 행으로 나누는 두 방법과 Megatron 의 f, g 연산자.",
    "Ch3-03": "Megatron MLP 를 column 다음 row 로 나눠 MLP 의 forward 와 backward 에 AllReduce 를 한 번씩만 쓰는 구조.",
    "Ch3-04": "Attention 을 head 로 나누는 tensor parallel 과 fused QKV, head 수의 제약.",
    "Ch3-05": "TP 의 layer 당 통신 횟수와 bytes, 그리고 TP 가 node 안에 머무는 이유.",
    "Ch4-01": "층을 나눈 naive pipeline 의 step 시간과 bubble, 두 bubble 정의의 관계.",
    "Ch4-02": "GPipe 가 micro-batch 로 bubble 을 줄이는 방법과, 그 대가인 activation 메모리.",
    "Ch4-03": "1F1B 가 같은 step 시간에 rank 마다 들고 있는 activation 을 줄이는 순서와 stage 의 메모리 예산.",
    "Ch4-04": "Rank 마다 chunk 를 여러 개 두는 interleaved 1F1B 가 bubble, 통신, 메모리를 바꾸는 방식.",
    "Ch4-05": "Backward 를 나눈 zero-bubble schedule (ZB-H1, ZB-H2, ZBV), DualPipeV, 양방향 pipeline.",
    "Ch5-01": "Mixed-precision Adam 의 parameter 당 16 bytes 와 ZeRO stage 별 rank 당 메모리.",
    "Ch5-02": "Optimizer state 를 나누는 ZeRO-1 이 data parallel 과 같은 결과, 같은 통신을 내는 이유.",
    "Ch5-03": "Gradient 까지 나누는 ZeRO-2 의 메모리와 ReduceScatter 통신.",
    "Ch5-04": "Parameter 까지 나누는 ZeRO-3 의 layer 별 AllGather 와 data parallel 의 1.5 배인 통신.",
    "Ch5-05": "PyTorch FSDP2 (fully_shard) 의 sharding, collective 횟수, 메모리를 실제로 재기.",
    "Ch5-06": "Model state 를 CPU 와 NVMe 로 내리는 ZeRO-Offload/Infinity 의 PCIe 전송과 그것이 숨는 조건.",
    "Ch6-01": "GPT layer 하나가 backward 를 위해 저장하는 activation 을 tensor 단위로 세어 식과 맞추기.",
    "Ch6-02": "Gradient checkpointing 의 메모리와 계산의 교환, Chen 2016 의 √L 분할.",
    "Ch6-03": "Megatron 의 selective recomputation 이 무엇을 다시 계산하는지와 그 이득.",
    "Ch6-04": "Sequence parallelism 이 TP 밖의 activation 을 나누면서 통신을 늘리지 않는 이유.",
    "Ch7-01": "DP × TP × PP 배치를 고르는 planner, 그 가정을 공개된 배치와 맞춰 보기, 실제 3D mesh 실행.",
    "Ch7-02": "MoE 의 router, capacity, load-balancing loss 와 expert parallel 의 AllToAll 비용.",
    "Ch7-03": "Sharded·비동기 checkpoint, 다른 배치로 읽기 (resharding), bit 단위로 같은 resume 에 필요한 state.",
    "Ch7-04": "torchrun 의 elastic restart, 실패로 잃는 계산, Young/Daly 의 checkpoint 간격.",
}

READING_CHARS_PER_MINUTE = 300  # Korean technical prose with formulas, read once with care (not studied)

_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.S | re.M)  # fences in lists are indented
_DETAILS = re.compile(r"^\?\?\?[+]? .*?(?=^\S|\Z)", re.S | re.M)


def reading_minutes(doc: Doc) -> int:
    """Minutes to read a page once: its prose (code fences and collapsed solutions left out) at
    READING_CHARS_PER_MINUTE, rounded up to 5 minutes."""
    text = (DOCS / doc.path).read_text(encoding="utf-8")
    prose = _DETAILS.sub("", _FENCE.sub("", text))
    chars = len(re.sub(r"\s+", "", prose))
    return 5 * math.ceil(chars / READING_CHARS_PER_MINUTE / 5)


def prerequisites(doc: Doc) -> list[Doc]:
    """The earlier documents a page names as its starting point: the links in its opening "이 문서의 위치" box."""
    text = (DOCS / doc.path).read_text(encoding="utf-8")
    m = re.search(r'^!!! abstract[^\n]*\n((?:    .*\n|\n)+)', text, re.M)
    order = [d.path for d in ALL_DOCS]
    out: list[Doc] = []
    for link in re.findall(r"\]\(((?:\.\./)?[a-z0-9-]*/?\d\d-[a-z0-9-]+\.md)", m.group(1) if m else ""):
        path = link.removeprefix("../")
        path = path if "/" in path else f"{doc.chapter}/{path}"
        d = doc_by_path(path)
        if d and order.index(d.path) < order.index(doc.path) and d not in out:
            out.append(d)
    return out


# The introductory tour: two pages a day, each page's prerequisites (and theirs) earlier on the tour.
# Ch7-01 also reads Ch4-04's interleaved memory and Ch6-04's sequence-parallel activations: both are on it.
TOUR: tuple[tuple[str, ...], ...] = (
    ("Ch1-01", "Ch1-03"), ("Ch1-05", "Ch2-01"), ("Ch2-02", "Ch2-03"), ("Ch3-01", "Ch3-02"),
    ("Ch3-03", "Ch3-04"), ("Ch3-05", "Ch4-01"), ("Ch4-02", "Ch4-03"), ("Ch4-04", "Ch5-01"),
    ("Ch5-02", "Ch5-03"), ("Ch5-04", "Ch5-05"), ("Ch6-01", "Ch6-02"), ("Ch6-04", "Ch7-01"),
)


# The course map (docs/course-map.md, scripts/hooks.py:_course_map) lists each chapter's assignment autograder
# command from here: chapter folder -> shell command. Empty until an autograder exists; a chapter with an entry
# gets its "과제 채점" line on the generated page, and tests/test_course_map.py checks it appears.
GRADERS: dict[str, str] = {}

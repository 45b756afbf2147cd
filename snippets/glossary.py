"""용어집: the English technical terms the book writes in English, with the Korean forms a reader searches for.

One list, three uses: the glossary page (docs/glossary.md, generated from TERMS by scripts/hooks.py), the search
index (scripts/hooks.py adds to each indexed section the Korean forms of the English terms it uses, so that "버블"
finds the pages that say "bubble"), and the consistency check (tests/test_glossary.py). Each term: the spelling
the book uses, the Korean reading(s) a reader may type (the first is the one the book prefers in Korean prose),
and a one-line gloss. A spelling variant (all-reduce, AllReduce, allreduce) is matched by `pattern`. The book's prose writes
the collectives as the syllabus does (AllReduce, AllGather, ReduceScatter, AllToAll; API names such as `all_reduce` in code) and
keeps English technical terms in English (parameter, not 파라미터): tests/test_glossary.py holds the pages to it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Term:
    en: str  # as the book writes it
    ko: tuple[str, ...]  # Korean forms a reader types; the first is the book's
    gloss: str
    also: tuple[str, ...] = ()  # other English spellings the book uses for the same thing

    @property
    def anchor(self) -> str:
        return "term-" + re.sub(r"[^a-z0-9]+", "-", self.en.lower()).strip("-")


def _t(en: str, ko: str, gloss: str, also: tuple[str, ...] = ()) -> Term:
    return Term(en, tuple(k.strip() for k in ko.split(",")), gloss, also)


TERMS: tuple[Term, ...] = (
    # collectives and networks (Ch1)
    _t("collective", "집합 통신, 콜렉티브", "모든 rank 가 함께 부르는 통신 연산 (AllReduce, AllGather …)"),
    _t("AllReduce", "올리듀스, 전체 합산", "모든 rank 의 값을 합쳐 모두에게 돌려주는 collective", ("all-reduce",)),
    _t("AllGather", "올개더, 전체 수집", "rank 마다의 조각을 모아 모두에게 전체를 돌려주는 collective", ("all-gather",)),
    _t("ReduceScatter", "리듀스 스캐터", "합친 결과를 조각으로 나눠 rank 마다 한 조각씩 주는 collective", ("reduce-scatter",)),
    _t("AllToAll", "올투올", "rank 마다 다른 조각을 다른 rank 에게 보내는 collective (MoE dispatch)", ("all-to-all",)),
    _t("broadcast", "브로드캐스트, 방송", "한 rank 의 값을 모든 rank 에게 보내기"),
    _t("rank", "랭크, 프로세스 번호", "분산 실행에서 process 하나의 번호 (0 … N−1)"),
    _t("ring", "링, 고리", "rank 를 원으로 이어 이웃에게만 보내는 collective 알고리즘"),
    _t("tree", "트리", "rank 를 나무 모양으로 이어 log 단계로 합치는 collective 알고리즘"),
    _t("bandwidth", "대역폭", "링크가 1 초에 보내는 bytes (이 책은 한 방향 값)"),
    _t("latency", "지연 시간, 레이턴시", "메시지 하나를 보내는 고정 비용 (α)"),
    _t("topology", "토폴로지, 연결 구조", "GPU 와 node 가 어떤 링크로 이어졌는지"),
    _t("node", "노드", "GPU 여러 개가 빠른 링크 (NVLink) 로 묶인 서버 한 대"),
    _t("NVLink", "엔브이링크", "node 안 GPU 사이의 빠른 링크"),
    _t("InfiniBand", "인피니밴드", "node 사이의 네트워크"),
    _t("bus bandwidth", "버스 대역폭", "nccl-tests 의 busbw: algbw 에 collective 별 계수 (AllReduce 는 2(N−1)/N) 를 곱해 rank 수와 무관하게 링크 한 방향 대역폭과 견주는 값", ("busbw",)),
    # data parallel (Ch2)
    _t("data parallel", "데이터 병렬", "rank 마다 모델 전체를 두고 batch 를 나눠 gradient 를 평균하는 방식", ("data parallelism", "DDP")),
    _t("gradient", "기울기, 그래디언트", "loss 의 parameter 에 대한 미분"),
    _t("gradient accumulation", "기울기 누적, 그래디언트 누적", "여러 micro-batch 의 gradient 를 더한 뒤 한 번 update 하기"),
    _t("bucket", "버킷", "DDP 가 gradient 를 모아 한 번에 AllReduce 하는 묶음"),
    _t("overlap", "겹치기, 중첩", "통신을 계산과 동시에 진행해 시간을 숨기기"),
    _t("parameter", "파라미터, 매개변수", "학습되는 모델의 값 (ψ 개)"),
    _t("optimizer", "옵티마이저, 최적화기", "gradient 로 parameter 를 update 하는 규칙 (SGD, Adam)"),
    _t("batch size", "배치 크기", "한 step 의 sample 수"),
    _t("critical batch size", "임계 배치 크기", "B_crit = 𝓔_min/𝒮_min: 이보다 키우면 step 수는 조금만 (최대 2 배) 더 줄고 sample 수가 빠르게 는다 (그 점에서 step 과 sample 이 모두 최소의 2 배)"),
    _t("learning rate", "학습률", "update 의 보폭"),
    _t("warm-up", "워밍업, 예열", "학습률을 작게 시작해 키우는 구간; pipeline 의 채우기 구간", ("warmup",)),
    _t("parameter server", "파라미터 서버", "parameter 를 가진 server 와 gradient 를 보내는 worker 로 나눈 구조"),
    _t("asynchronous", "비동기", "기다리지 않고 진행하는 (async)", ("async",)),
    _t("staleness", "지연도, 낡음", "비동기 update 에서 gradient 를 계산한 parameter 가 몇 step 뒤처졌는지", ("stale",)),
    # tensor parallel (Ch3)
    _t("tensor parallel", "텐서 병렬", "한 layer 의 행렬을 rank 사이에 나누는 방식", ("tensor parallelism", "TP")),
    _t("column-parallel", "열 병렬", "weight 를 출력 feature (열) 로 나누는 linear layer"),
    _t("row-parallel", "행 병렬", "weight 를 입력 feature (행) 로 나누는 linear layer"),
    _t("tensor", "텐서", "다차원 배열"),
    _t("shard", "샤드, 조각", "나눠 가진 한 조각; 나누기", ("sharded",)),
    _t("sharding", "샤딩, 분할", "값을 rank 사이에 나눠 갖기"),
    _t("attention", "어텐션", "token 사이의 가중합을 계산하는 layer"),
    _t("embedding", "임베딩", "token 번호를 벡터로 바꾸는 표"),
    _t("layer", "레이어, 층", "모델을 이루는 한 단"),
    _t("transformer", "트랜스포머", "attention 과 MLP block 을 쌓은 모델 구조"),
    _t("GEMM", "행렬곱", "일반 행렬 곱셈 (general matrix multiply)"),
    # pipeline parallel (Ch4)
    _t("pipeline", "파이프라인", "모델을 stage 로 나눠 micro-batch 를 흘려 보내는 방식", ("pipeline parallelism",)),
    _t("bubble", "버블, 유휴 시간", "pipeline 에서 stage 가 일 없이 기다리는 시간"),
    _t("stage", "스테이지, 단계", "pipeline 에서 rank 하나가 맡은 연속된 layer 묶음 (ZeRO 의 stage 1/2/3 과는 다른 말)"),
    _t("micro-batch", "마이크로배치, 마이크로 배치", "batch 를 나눈 작은 조각", ("microbatch",)),
    _t("schedule", "스케줄, 일정", "pipeline 에서 F/B 를 실행하는 순서"),
    _t("interleaved", "인터리브, 교차 배치", "rank 마다 떨어진 chunk 여러 개를 맡는 pipeline schedule"),
    _t("zero bubble", "제로 버블", "backward 를 입력 gradient 와 weight gradient 로 나눠 bubble 을 채우는 schedule"),
    _t("makespan", "총 소요 시간", "첫 연산의 시작부터 마지막 연산의 끝까지"),
    _t("steady state", "정상 상태", "warm-up 뒤 F 와 B 가 번갈아 도는 구간"),
    # ZeRO / FSDP (Ch5)
    _t("ZeRO", "제로", "optimizer state, gradient, parameter 를 data parallel rank 사이에 나누는 방법 (stage 1/2/3; pipeline 의 stage 와 다른 말)"),
    _t("ZeRO-3", "제로 3, 제로3", "parameter 까지 나누는 ZeRO 의 셋째 stage"),
    _t("FSDP", "완전 샤딩 데이터 병렬", "PyTorch 의 fully sharded data parallel (FSDP2: fully_shard)"),
    _t("optimizer state", "옵티마이저 상태", "optimizer 가 parameter 마다 갖는 값: mixed-precision Adam 이면 fp32 master 사본과 두 모멘트, 합해서 K = 12 bytes"),
    _t("mixed precision", "혼합 정밀도", "16-bit 로 계산하고 fp32 master weight 로 update 하기", ("mixed-precision",)),
    _t("master weight", "마스터 가중치", "mixed precision 에서 update 에 쓰는 fp32 사본"),
    _t("offload", "오프로드, 내려놓기", "GPU memory 의 값을 CPU 나 NVMe 로 옮기기"),
    _t("prefetch", "프리페치, 미리 가져오기", "다음에 쓸 parameter 를 미리 AllGather 하기"),
    _t("fragmentation", "단편화", "빈 memory 가 조각나 큰 할당이 실패하는 현상"),
    # activations (Ch6)
    _t("activation", "활성값, 액티베이션", "backward 를 위해 forward 에서 저장하는 중간 값"),
    _t("checkpointing", "체크포인팅", "activation 을 버리고 backward 때 다시 계산하기 (activation checkpointing); 학습 상태 저장"),
    _t("recomputation", "재계산", "버린 activation 을 backward 에서 다시 계산하기", ("recompute",)),
    _t("selective recomputation", "선택적 재계산", "저장하면 bytes 가 크고 다시 계산하기는 싼 attention core (softmax, dropout 등) 만 버렸다가 backward 에서 다시 계산하기"),
    _t("sequence parallelism", "시퀀스 병렬", "TP 구간 밖의 activation 을 sequence 차원으로 나누기", ("sequence parallel",)),
    _t("context parallelism", "컨텍스트 병렬", "긴 sequence 를 rank 사이에 나눠 attention 을 계산하기", ("context parallel",)),
    _t("dropout", "드롭아웃", "학습 중 값을 무작위로 0 으로 만드는 layer"),
    _t("LayerNorm", "레이어 정규화", "token 하나의 hidden 차원 (h 개 값) 의 평균과 분산으로 정규화", ("layer norm",)),
    # 3D, MoE, fault tolerance (Ch7)
    _t("3D parallelism", "3차원 병렬, 3D 병렬", "data, tensor, pipeline 병렬을 곱한 배치"),
    _t("device mesh", "디바이스 메시, 장치 격자", "rank 를 축마다 배열한 격자 (DeviceMesh)", ("DeviceMesh", "mesh")),
    _t("expert", "전문가, 익스퍼트", "MoE 에서 token 이 골라 가는 FFN 하나"),
    _t("mixture of experts", "전문가 혼합", "token 마다 expert 몇 개만 쓰는 모델 (MoE)", ("MoE",)),
    _t("expert parallelism", "전문가 병렬", "expert 를 rank 사이에 나누고 AllToAll 로 token 을 보내기", ("expert parallel", "EP")),
    _t("router", "라우터", "token 마다 expert 를 고르는 layer", ("routing",)),
    _t("load balancing", "부하 균형", "expert 마다 token 수를 고르게 하기 (aux loss)", ("load-balancing",)),
    _t("capacity", "용량", "expert 하나가 받는 token 수의 상한"),
    _t("checkpoint", "체크포인트", "학습을 이어 가기 위해 저장한 상태 (model, optimizer, step …)"),
    _t("resume", "재개, 이어 하기", "저장한 checkpoint 에서 학습을 다시 시작하기"),
    _t("elastic training", "탄력적 학습", "worker 가 죽거나 바뀌어도 다시 모여 계속하는 학습", ("elastic",)),
    _t("rendezvous", "랑데부, 재집결", "worker 들이 모여 rank 를 정하는 단계"),
    _t("restart", "재시작", "실패한 worker 를 멈추고 다시 띄우기"),
    _t("timeout", "타임아웃, 시간 초과", "collective 가 이 시간 안에 끝나지 않으면 실패로 보기"),
    _t("watchdog", "워치독, 감시 thread", "timeout 을 넘긴 collective 를 찾아 process 를 멈추는 thread"),
    _t("MTBF", "평균 고장 간격", "mean time between failures"),
    # general
    _t("forward", "순전파", "입력에서 loss 까지 계산하는 방향"),
    _t("backward", "역전파", "loss 에서 gradient 를 거꾸로 계산하는 방향"),
    _t("throughput", "처리량", "1 초에 처리하는 token 이나 sample 수"),
    _t("FLOPs", "연산량, 부동소수점 연산 수", "floating-point operations"),
    _t("MFU", "모델 연산 활용률", "model FLOPs utilization: 이론 최대 대비 실제 모델 연산 비율"),
    _t("memory", "메모리", "GPU 나 host 의 저장 공간"),
    _t("communication", "통신", "rank 사이에 bytes 를 보내는 일"),
)


def _words(spelling: str) -> str:
    parts = [re.escape(w) for w in re.split(r"[\s\-_]+", spelling) if w]
    return r"[\s\-_]?".join(parts)


@lru_cache(maxsize=None)
def pattern(term: Term) -> re.Pattern:
    """The English term and its spellings, whole words, any case; '-', '_', ' ' or nothing between words."""
    alts = sorted({_words(s) for s in (term.en, *term.also)}, key=len, reverse=True)
    return re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(alts) + r")(?![A-Za-z0-9])", re.I)


def terms_in(text: str) -> list[Term]:
    """The terms whose English spelling occurs in `text`, in TERMS order."""
    return [t for t in TERMS if pattern(t).search(text)]


def korean_forms(text: str) -> list[str]:
    """The Korean forms of every term used in `text` that the text does not already contain, each once."""
    out: list[str] = []
    for t in terms_in(text):
        for k in t.ko:
            if k not in text and k not in out:
                out.append(k)
    return out


@lru_cache(maxsize=None)
def _unanchored(term: Term) -> re.Pattern:
    """`pattern` without its leading look-behind: a look-behind first is tried at every position of the
    text, which made the glossary page (90 terms x 35 pages) take 2.5 s; `count` checks that side itself."""
    alts = sorted({_words(s) for s in (term.en, *term.also)}, key=len, reverse=True)
    return re.compile(r"(?:" + "|".join(alts) + r")(?![A-Za-z0-9])", re.I)


def count(term: Term, text: str) -> int:
    """How often `pattern(term)` matches `text` (the same matches; tests/test_glossary.py compares them)."""
    def starts_a_word(i: int) -> bool:
        return i == 0 or not (text[i - 1].isascii() and text[i - 1].isalnum())

    return sum(1 for m in _unanchored(term).finditer(text) if starts_a_word(m.start()))

"""The browser calculators' Python side: what each calculator computes, and its test vectors.

The calculators (docs/assets/calc/*.js) are plain JavaScript ports of the book's formula modules. This
module is their reference: every function below only *composes* the shared modules (no formula is
written here a second time), and `vectors()` evaluates them on a grid of inputs. The vectors are
written at build (the calculators page embeds them and the browser re-checks them) and by
tests/calc/test_calc_vectors.py, which runs the JavaScript on them with Node and fails on any
difference beyond floating-point rounding (relative 1e-9).

    memory      zero_memory.zero_memory_breakdown (Ch5) of the ψ/t parameters a TP rank owns, sharded
                over N data-parallel ranks at ZeRO stage 0–3 (FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2);
                activations: L × activation_memory.layer_bytes (Ch6, Korthikanti 2022 terms).
    pipeline    pipeline_sim.simulate (Ch4): makespan, per-rank busy time, both bubble definitions,
                peak in-flight micro-batches per rank, every action's start and end.
    planner     planner_3d.plan (Ch7), only when that module exists (it is written on another branch).
"""
from __future__ import annotations

import importlib.util
import json

import numpy as np

from snippets.common import activation_memory as am
from snippets.common import pipeline_sim as ps
from snippets.common import zero_memory as zm

VECTORS_VERSION = 2
VECTOR_KINDS = ("memory", "pipeline", "pipeline_view", "planner", "planner_dropped")
PIPE_SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "looped_bfs", "zb_h1", "zbv")
CLOSED_FORM = ("gpipe", "1f1b", "interleaved")


# --8<-- [start:memory]
def gpt_shape(h: int, a: int, kv_heads: int = 0, ffn: int = 0, swiglu: bool = False, dropout: bool = True) -> bool:
    """Korthikanti's layer: multi-head attention, a GELU FFN of width 4h, dropout (Ch6's exact terms apply)."""
    return kv_heads in (0, a) and ffn in (0, 4 * h) and not swiglu and dropout


def layer_activation(s: int, b: int, h: int, a: int, t: int, sp: bool, recompute: str, act_bytes: int = 2,
                     mask_bytes: int = 1, kv_heads: int = 0, ffn: int = 0, swiglu: bool = False,
                     dropout: bool = True) -> float:
    """Bytes one layer keeps for one micro-batch on one TP rank. GPT shape: activation_memory.layer_bytes (Ch6,
    every option). Other shapes (GQA, SwiGLU, f ≠ 4h, no dropout): planner_3d.layer_activation_bytes (Ch7-01),
    which assumes what Megatron does with those models: 16-bit activations, 1-byte masks, SP whenever t > 1."""
    if gpt_shape(h, a, kv_heads, ffn, swiglu, dropout):
        return am.layer_bytes(s, b, h, a, t=t, sp=sp, recompute=recompute, act_bytes=act_bytes, mask_bytes=mask_bytes)
    if (t > 1 and not sp) or act_bytes != 2 or mask_bytes != 1:
        raise ValueError("GQA/SwiGLU layers: only 16-bit activations, 1-byte masks and SP (t > 1) are modelled")
    from snippets.common import planner_3d as pl
    model = pl.Model(layers=1, hidden=h, heads=a, seq=s, vocab=0, psi=0.0, ffn=ffn, kv_heads=kv_heads,
                     swiglu=swiglu, dropout=dropout)
    return float(pl.layer_activation_bytes(model, b, t, recompute, pl.Assumptions()))


def stage_parameters(psi: float, p: int, rank: int, vocab: int = 0, h: int = 0) -> float:
    """Parameters on pipeline rank r (before TP): ψ counts an input embedding and an untied LM head (V·h each,
    as Llama 3 and Mixtral ship them); the layers' ψ − 2Vh is split evenly over p ranks; the embedding sits on
    rank 0 and the LM head on rank p − 1 (planner_3d's placement). V = 0: ψ/p, no embedding modelled."""
    emb = vocab * h
    return (psi - 2 * emb) / p + (emb if rank == 0 else 0) + (emb if rank == p - 1 else 0)


def inflight_units(schedule: str, p: int, m: int, v: int, rank: int) -> float:
    """Micro-batches of activations (in units of A = one micro-batch through the rank's L/p layers) that pipeline
    rank r holds at its peak (Ch4): GPipe m; 1F1B min(p − r, m); interleaved 1F1B (v chunks of A/v each)
    2(p−1−r) + (v−1)p + 1 chunks, capped at m·v: rank 0's pA(1 + (p−1)/(pv)) of Ch4-04."""
    if schedule == "gpipe":
        return float(ps.gpipe_peak_inflight(p, m, rank))
    if schedule == "1f1b":
        return float(ps.one_f_one_b_peak_inflight(p, m, rank))
    if schedule == "interleaved":
        return float(ps.interleaved_peak_chunks(p, m, v, rank)) / v
    raise ValueError(f"schedule must be 'gpipe', '1f1b' or 'interleaved', not {schedule!r}")


def memory_estimate(psi: float, n: int, stage: int, k: float, t: int, sp: bool, recompute: str,
                    s: int, b: int, layers: int, h: int, a: int, act_bytes: int = 2, mask_bytes: int = 1,
                    capacity_gib: float = 80.0, p: int = 1, schedule: str = "1f1b", m: int = 1, v: int = 1,
                    vocab: int = 0, kv_heads: int = 0, ffn: int = 0, swiglu: bool = False, dropout: bool = True,
                    grad_bytes: int = 2, with_activations: bool = True) -> dict:
    """Per-GPU bytes on the fullest pipeline rank: model states of the parameters one (TP, PP) rank owns
    (ZeRO over N data-parallel ranks; gradients of `grad_bytes` each: 4 = Megatron's distributed optimizer,
    fp32 main gradients) plus, unless left out, the activations its schedule keeps in flight (L/p layers ×
    `inflight_units`) and, on the last rank, the fp32 logits b·s·V/t (planner_3d's logits_bytes)."""
    from snippets.common import planner_3d as pl
    per_layer = layer_activation(s, b, h, a, t, sp, recompute, act_bytes, mask_bytes, kv_heads, ffn, swiglu, dropout)
    ranks = []
    for r in range(p):
        st = zm.zero_memory_breakdown(stage_parameters(psi, p, r, vocab, h) / t, n, stage, k)
        st["grads"] *= grad_bytes / zm.GRAD_BYTES
        units = inflight_units(schedule, p, m, v, r)
        act = per_layer * layers / p * units if with_activations else 0.0
        logits = b * s * vocab / t * pl.Assumptions().logits_bytes if (with_activations and r == p - 1) else 0.0
        states = st["params"] + st["grads"] + st["optimizer"]
        ranks.append({**st, "model_states": states, "activations": act, "logits": logits,
                      "total": states + act + logits, "inflight": units})
    worst = max(range(p), key=lambda r: (ranks[r]["total"], -r))     # ties: the first rank
    w = ranks[worst]
    return {**w, "total_gb": w["total"] / zm.GB, "total_gib": w["total"] / zm.GIB,
            "fits": bool(w["total"] <= capacity_gib * zm.GIB), "rank": worst, "per_layer": per_layer,
            "layers_per_rank": layers / p, "rank_totals": [x["total"] for x in ranks]}
# --8<-- [end:memory]


# --8<-- [start:pipeline]
def pipeline_summary(schedule: str, p: int, m: int, v: int = 1, t_f: float = 1.0, t_b: float = 1.0,
                     t_w: float = 1.0, t_comm: float = 0.0) -> dict:
    """What the pipeline visualiser shows: the simulated timeline and its summary numbers."""
    tl = ps.simulate(schedule, p, m, v, t_f, t_b, t_w, t_comm)
    rows = ps.timeline_rows(tl)
    # Ch4's closed form (p−1)/(v·m), relative to ideal time: GPipe and 1F1B (v = 1), interleaved (v), no transfer time
    closed = (float(ps.interleaved_bubble_relative(p, m, v if schedule == "interleaved" else 1))
              if schedule in CLOSED_FORM and t_comm == 0 else None)
    return {"makespan": tl.makespan, "busy": [float(x) for x in tl.busy()],
            "bubble_fraction": tl.bubble_fraction(), "bubble_relative": tl.bubble_relative(),
            "closed_relative": closed, "inflight": [int(x) for x in tl.inflight("B")],
            "inflight_stage": stage_inflight(tl), "inflight_w": [int(x) for x in tl.inflight("W")],
            "actions": [[[a["op"], a["mb"], a["chunk"], a["stage"], a["start"], a["end"]] for a in r]
                        for r in rows]}
# --8<-- [end:pipeline]


def pipeline_view(schedule: str, p: int, m: int, v: int = 1, t_f: float = 1.0, t_b: float = 2.0,
                  t_w: float = 1.0, t_comm: float = 0.0) -> dict:
    """The pipeline calculator's inputs as a reader means them, mapped onto pipeline_sim.simulate.

    t_f, t_b: forward and *whole* backward (input-grad + weight-grad) of one micro-batch through one rank's
    L/p layers, the unit of 1F1B; t_w: the weight-grad part of t_b, split off only by the zero-bubble
    schedules (ZB-H1, ZB-V), whose B is then t_b − t_w. A rank with v chunks (interleaved, looped BFS;
    ZB-V: 2) holds v smaller stages of L/(pv) layers, so each chunk takes 1/v of each time: Ch4-04's model
    (d04_interleaved_1f1b.interleaved). Equal inputs then compare schedules for the same model."""
    split = schedule in ps.SPLIT_BACKWARD
    chunks = 2 if schedule == "zbv" else v if schedule in ("interleaved", "looped_bfs") else 1
    b_in, w = (t_b - t_w, t_w) if split else (t_b, 0.0)
    out = pipeline_summary(schedule, p, m, v, t_f / chunks, b_in / chunks, w / chunks, t_comm)
    return {**out, "chunks": chunks, "chunk_t": [t_f / chunks, b_in / chunks, w / chunks]}


def stage_inflight(tl: ps.Timeline) -> list[int]:
    """Peak micro-batches in flight per *stage* (a rank holds v stages): Timeline.inflight's walk
    (+1 at a forward, −1 at the end of its backward), restricted to one stage's actions."""
    peaks = []
    for st in range(tl.p * tl.v):
        idx = np.flatnonzero(tl.stage == st)
        idx = idx[np.argsort(tl.start[idx], kind="stable")]
        step = np.where(tl.op[idx] == ps.OP_CODE["F"], 1, np.where(tl.op[idx] == ps.OP_CODE["B"], -1, 0))
        peaks.append(int(np.cumsum(step).max()) if len(idx) else 0)
    return peaks


def planner_available() -> bool:
    return importlib.util.find_spec("snippets.common.planner_3d") is not None


MEMORY_CASES = [
    # (psi, n, stage, k, t, sp, recompute, s, b, L, h, a, act_bytes, mask_bytes, capacity_gib)
    (175e9, 64, st, 12, t, sp, rc, 2048, 1, 96, 12288, 96, 2, 1, 80.0)
    for st in (0, 1, 2, 3) for t, sp in ((1, False), (8, False), (8, True))
    for rc in ("none", "selective", "full")
] + [
    (7e9, 8, 3, 12, 1, False, "none", 4096, 1, 32, 4096, 32, 2, 1, 80.0),
    (7e9, 8, 2, 12, 2, True, "selective", 4096, 2, 32, 4096, 32, 2, 2, 40.0),
    (70e9, 16, 3, 12, 8, True, "full", 4096, 1, 80, 8192, 64, 2, 1, 80.0),
    (1.3e9, 1, 0, 12, 1, False, "none", 1024, 8, 24, 2048, 16, 4, 1, 24.0),
    (13e9, 16, 1, 8, 4, False, "none", 2048, 4, 40, 5120, 40, 2, 1, 80.0),
    (1e6, 3, 3, 12, 1, False, "selective", 7, 3, 2, 64, 4, 2, 1, 1.0),
]

PIPE_CASES = [
    (sch, p, m, v, tf, tb, tw, tc)
    for sch in PIPE_SCHEDULES
    for p, m, v in ((2, 4, 2), (4, 8, 2), (4, 4, 1), (3, 6, 3))
    if not (sch == "interleaved" and m % p)
    for tf, tb, tw, tc in ((1.0, 1.0, 1.0, 0.0), (1.0, 2.0, 1.0, 0.1))
]

# The memory calculator with pipeline ranks, real shapes (Llama 3 70B: GQA 8 KV heads, SwiGLU 28672, V 128256,
# no dropout), fp32 gradients and activations left out: (p, schedule, m, v, model, extra)
_LLAMA70 = dict(psi=70.55e9, layers=80, h=8192, a=64, s=8192, kv_heads=8, ffn=28672, swiglu=True, dropout=False,
                vocab=128256)
_GPT3 = dict(psi=175e9, layers=96, h=12288, a=96, s=2048)
MEMORY_PP_CASES = [
    dict(model, p=p, schedule=sch, m=m, v=v, **extra)
    for model in (_GPT3, _LLAMA70)
    for p, sch, m, v in ((4, "1f1b", 8, 1), (8, "1f1b", 4, 1), (8, "interleaved", 16, 2), (4, "interleaved", 4, 3),
                         (4, "gpipe", 8, 1), (2, "1f1b", 1, 1), (16, "interleaved", 32, 5))
    if model["layers"] % (p * v) == 0
    for extra in ({}, {"grad_bytes": 4, "stage": 1}, {"with_activations": False}, {"recompute": "full", "b": 2})
] + [
    dict(_GPT3, vocab=50257, p=1), dict(_GPT3, vocab=50257, p=3, m=6),
    dict(_LLAMA70, p=1, t=1, sp=False, n=8, stage=3),
    dict(psi=8.03e9, layers=32, h=4096, a=32, s=8192, kv_heads=8, ffn=14336, swiglu=True, dropout=False,
         vocab=128256, p=2, m=8, t=2, recompute="none"),
]
_MEM_BASE = dict(n=64, stage=1, k=12, t=8, sp=True, recompute="selective", b=1, act_bytes=2, mask_bytes=1,
                 capacity_gib=80.0)

# The pipeline calculator's reader inputs (t_b = the whole backward, t_w its weight-grad part, per rank)
PIPE_VIEW_CASES = [
    (sch, p, m, v, tf, tb, tw, tc)
    for sch in PIPE_SCHEDULES
    for p, m, v in ((4, 8, 2), (2, 4, 3))
    for tf, tb, tw, tc in ((1.0, 2.0, 1.0, 0.0), (1.0, 2.5, 0.5, 0.05))
]


def vectors() -> dict:
    """Inputs -> outputs for every calculator (the 3D planner only where its module exists)."""
    keys = ("psi", "n", "stage", "k", "t", "sp", "recompute", "s", "b", "layers", "h", "a",
            "act_bytes", "mask_bytes", "capacity_gib")
    out = {"version": VECTORS_VERSION, "generator": "snippets/calc.py (python -m snippets.calc)",
           "memory": [], "pipeline": [], "pipeline_view": []}
    for case in MEMORY_CASES:
        inp = dict(zip(keys, case))
        out["memory"].append({"in": inp, "out": memory_estimate(**inp)})
    for case in MEMORY_PP_CASES:
        inp = {**_MEM_BASE, **case}
        out["memory"].append({"in": inp, "out": memory_estimate(**inp)})
    pkeys = ("schedule", "p", "m", "v", "t_f", "t_b", "t_w", "t_comm")
    for case in PIPE_CASES:
        inp = dict(zip(pkeys, case))
        out["pipeline"].append({"in": inp, "out": pipeline_summary(**inp)})
    for case in PIPE_VIEW_CASES:
        inp = dict(zip(pkeys, case))
        res = pipeline_view(**inp)
        res.pop("actions")
        out["pipeline_view"].append({"in": inp, "out": res})
    if planner_available():
        out["planner"] = planner_vectors()
        out["planner_dropped"] = planner_dropped_vectors()
    return out


def planner_dropped_vectors() -> list[dict]:
    """planner_3d.dropped_pipeline_degrees: the p values the planner page says it left out, and why."""
    from dataclasses import asdict, replace

    from snippets.common import planner_3d as pl

    l405 = pl.Model(layers=126, hidden=16384, heads=128, seq=8192, vocab=128256, psi=405.85e9, ffn=53248,
                    kv_heads=8, swiglu=True, dropout=False)
    A = pl.Assumptions()
    cases = [(pl.LLAMA70B, pl.H100_64, pl.BATCH_4M, A), (pl.LLAMA70B, replace(pl.H100_64, gpus=96), pl.BATCH_4M, A),
             (l405, replace(pl.H100_64, gpus=128), pl.BATCH_4M, A),
             (l405, replace(pl.H100_64, gpus=128), pl.BATCH_4M, replace(A, uneven_stages=True)),
             (pl.LLAMA70B, pl.H100_64, replace(pl.BATCH_4M, global_batch=24), replace(A, interleave=4))]
    return [{"in": {"model": asdict(mo), "cluster": asdict(c), "batch": asdict(b), "assume": asdict(a)},
             "out": pl.dropped_pipeline_degrees(mo, c, b, assume=a)} for mo, c, b, a in cases]


def planner_vectors() -> list[dict]:
    """planner_3d.plan on its own presets, variations, and every Assumptions field moved once (only called
    when the module exists)."""
    from dataclasses import asdict, replace

    from snippets.common import planner_3d as pl

    A = pl.Assumptions()
    cases = [(pl.LLAMA70B, pl.H100_64, pl.BATCH_4M, zs, rc, A) for zs in (1, 3) for rc in ("selective", "full")]
    cases.append((pl.LLAMA70B, replace(pl.H100_64, gpus=32), replace(pl.BATCH_4M, global_batch=256), 1, "none", A))
    for a in (pl.LEGACY, replace(A, tp_overlap=0.7), replace(A, mfu_curve=pl.halving_curve(8192, 0.1)),
              replace(A, interleave=2), replace(A, shapes=False), replace(A, embeddings=False),
              replace(A, uneven_stages=True), replace(A, grad_bytes=2),
              replace(A, uneven_stages=True, edge_layers_less=1)):
        cases.append((pl.LLAMA70B, pl.H100_64, pl.BATCH_4M, 1, "selective", a))
    cases.append((replace(pl.LLAMA70B, swiglu=False, ffn=0, kv_heads=0, dropout=True), pl.H100_64,
                  replace(pl.BATCH_4M, micro_batch=2), 0, "none", replace(A, interleave=2)))
    out = []
    for model, cluster, batch, zs, rc, a in cases:
        rows = pl.plan(model, cluster, batch, zero_stage=zs, recompute=rc, assume=a)
        out.append({"in": {"model": asdict(model), "cluster": asdict(cluster), "batch": asdict(batch),
                           "zero_stage": zs, "recompute": rc, "assume": asdict(a)}, "out": rows})
    return out


def browser_vectors_html() -> str:
    """The vectors the calculators page embeds for the in-browser check: every memory case, every
    pipeline summary (the per-action times stay in the Node test, to keep the page light) and, where
    the Ch7 module exists, the planner's rankings."""
    vec = vectors()
    for c in vec["pipeline"]:
        c["out"].pop("actions")
    n = sum(len(vec.get(k, [])) for k in VECTOR_KINDS)
    data = json.dumps(vec, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return (f'<script type="application/json" id="calc-vectors">{data}</script>\n'
            f'<p>Python 이 만든 벡터: 메모리 {len(vec["memory"])}개, 파이프라인 {len(vec["pipeline"])}개 '
            f'(계산기 입력 단위 {len(vec["pipeline_view"])}개), '
            f'{"3D planner " + str(len(vec["planner"])) + "개와 제외된 p " + str(len(vec["planner_dropped"])) + "개, " if "planner" in vec else ""}'
            f'(모두 {n}개 입력).</p>')


def vectors_json() -> str:
    return json.dumps(vectors(), ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":  # python -m snippets.calc > vectors.json
    print(vectors_json())

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

VECTORS_VERSION = 1
PIPE_SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "looped_bfs", "zb_h1", "zbv")
CLOSED_FORM = ("gpipe", "1f1b", "interleaved")


# --8<-- [start:memory]
def memory_estimate(psi: float, n: int, stage: int, k: float, t: int, sp: bool, recompute: str,
                    s: int, b: int, layers: int, h: int, a: int, act_bytes: int = 2, mask_bytes: int = 1,
                    capacity_gib: float = 80.0) -> dict:
    """Per-GPU bytes: model states of the ψ/t parameters one TP rank owns (ZeRO over N ranks) plus the
    activations of L layers for one micro-batch of b sequences of length s."""
    states = zm.zero_memory_breakdown(psi / t, n, stage, k)
    act = am.layer_bytes(s, b, h, a, t=t, sp=sp, recompute=recompute,
                         act_bytes=act_bytes, mask_bytes=mask_bytes) * layers
    total = states["params"] + states["grads"] + states["optimizer"] + act
    return {**states, "activations": act, "total": total, "total_gb": total / zm.GB,
            "total_gib": total / zm.GIB, "fits": bool(total <= capacity_gib * zm.GIB)}
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


def vectors() -> dict:
    """Inputs -> outputs for every calculator (the 3D planner only where its module exists)."""
    keys = ("psi", "n", "stage", "k", "t", "sp", "recompute", "s", "b", "layers", "h", "a",
            "act_bytes", "mask_bytes", "capacity_gib")
    out = {"version": VECTORS_VERSION, "generator": "snippets/calc.py (python -m snippets.calc)",
           "memory": [], "pipeline": []}
    for case in MEMORY_CASES:
        inp = dict(zip(keys, case))
        out["memory"].append({"in": inp, "out": memory_estimate(**inp)})
    pkeys = ("schedule", "p", "m", "v", "t_f", "t_b", "t_w", "t_comm")
    for case in PIPE_CASES:
        inp = dict(zip(pkeys, case))
        out["pipeline"].append({"in": inp, "out": pipeline_summary(**inp)})
    if planner_available():
        out["planner"] = planner_vectors()
    return out


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
    n = len(vec["memory"]) + len(vec["pipeline"]) + len(vec.get("planner", []))
    data = json.dumps(vec, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return (f'<script type="application/json" id="calc-vectors">{data}</script>\n'
            f'<p>Python 이 만든 벡터: 메모리 {len(vec["memory"])}개, 파이프라인 {len(vec["pipeline"])}개 '
            f'{"3D planner " + str(len(vec["planner"])) + "개, " if "planner" in vec else ""}'
            f'(모두 {n}개 입력).</p>')


def vectors_json() -> str:
    return json.dumps(vectors(), ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":  # python -m snippets.calc > vectors.json
    print(vectors_json())

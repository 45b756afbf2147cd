"""Ch6-01 Activation Memory 의 크기: the code the page runs and the tests import.

Measures the bytes a real GPT block (snippets/common/gpt_block.py) saves for backward, by two
routes (saved_tensors_hooks, and a walk over the autograd graph's ``_saved_*`` attributes), and
compares them with Korthikanti 2022 §4.1 / Table 2 (snippets/common/activation_memory.py).
"""
from __future__ import annotations

import torch

from snippets import results
from snippets.common import activation_memory as am
from snippets.common.gpt_block import block_params, make_block, one_thread
from snippets.common.saved_tensors import SavedTensorCounter, graph_saved_tensors, unique_bytes

CONFIGS = [(16, 2, 32, 4), (64, 1, 64, 8), (128, 2, 64, 2), (256, 1, 128, 4), (96, 3, 96, 12)]


# --8<-- [start:measure]
def measure(s: int, b: int, h: int, a: int, *, dtype=torch.bfloat16, device="cpu", p_drop: float = 0.1):
    """One forward of a GPT block on x: [s, b, h]; returns the saved-tensor counts of both routes.

    x itself is counted (LayerNorm 1 saves it: the paper's "LN1 input"); parameters are not.
    """
    block = make_block(h, a, dtype=dtype, device=device, p_drop=p_drop)
    x = torch.randn(s, b, h, dtype=dtype, device=device, requires_grad=True)
    with one_thread(), SavedTensorCounter(block) as counter:
        y = block(x)
    rows = graph_saved_tensors(y, exclude=list(block.parameters()))
    return {"hook_bytes": counter.total_bytes, "graph_bytes": unique_bytes(rows), "rows": rows,
            "entries": list(counter.entries.values())}
# --8<-- [end:measure]


# Which Korthikanti term group each saved tensor belongs to, recognised by the autograd node that saves it.
GROUPS = ["LayerNorm inputs", "linear inputs (QKV, proj, fc1)", "Q, K, V (one QKV storage)", "softmax output",
          "attention dropout mask", "attention dropout output", "GeLU input", "fc2 input",
          "sbh dropout masks (2)", "LayerNorm mean/rstd"]


def classify(row: dict, s: int, b: int, h: int, a: int) -> str:
    node, attr, n = row["node"], row["attr"], 1
    for d in row["shape"]:
        n *= d
    if node == "NativeLayerNormBackward0":
        return "LayerNorm inputs" if attr == "_saved_input" else "LayerNorm mean/rstd"
    if node == "AddmmBackward0":
        return "fc2 input" if n == 4 * s * b * h else "linear inputs (QKV, proj, fc1)"
    if node == "BaddbmmBackward0" or (node == "BmmBackward0" and attr == "_saved_mat2"):
        return "Q, K, V (one QKV storage)"
    if node == "BmmBackward0":
        return "attention dropout output"
    if node == "SoftmaxBackward0":
        return "softmax output"
    if node == "GeluBackward0":
        return "GeLU input"
    if node == "MulBackward0":
        return "attention dropout mask" if n == a * s * s * b else "sbh dropout masks (2)"
    raise ValueError(f"unexpected saved tensor {row}")


def paper_groups(s: int, b: int, h: int, a: int, mask_bytes: int) -> dict[str, float]:
    """The same groups summed from activation_memory.layer_terms (no TP)."""
    terms = am.layer_terms(s, b, h, a, mask_bytes=mask_bytes)
    g = dict.fromkeys(GROUPS, 0.0)
    where = {"LN1 input": 0, "LN2 input": 0, "QKV linear input (LN1 output)": 1, "output projection input": 1,
             "fc1 input (LN2 output)": 1, "Q (QKᵀ input)": 2, "K (QKᵀ input)": 2, "V (·V input)": 2,
             "softmax output": 3, "attention dropout mask": 4, "attention dropout output (·V input)": 5,
             "GeLU input (fc1 output)": 6, "fc2 input (GeLU output)": 7, "attention-out dropout mask": 8,
             "MLP dropout mask": 8}
    for name, v in terms.items():
        g[GROUPS[where[name]]] += v
    return g


# --8<-- [start:groups]
def term_table(s: int, b: int, h: int, a: int):
    """Rows (group, Korthikanti with 1-byte masks, with 2-byte masks, measured) in bytes."""
    m = measure(s, b, h, a)
    got = dict.fromkeys(GROUPS, 0)
    for key, row in {r["key"]: r for r in m["rows"]}.items():  # each storage once
        got[classify(row, s, b, h, a)] += row["bytes"]
    p1, p2 = paper_groups(s, b, h, a, 1), paper_groups(s, b, h, a, 2)
    return [(g, p1[g], p2[g], got[g]) for g in GROUPS], m
# --8<-- [end:groups]


def sweep(configs=CONFIGS):
    """Measured totals against the paper (m = 1), the m = 2 closed form and the LayerNorm statistics."""
    out = []
    for s, b, h, a in configs:
        m = measure(s, b, h, a)
        stats = 2 * 2 * s * b * 2  # two LayerNorms × (mean, rstd) × sb tokens × 2 bytes (bf16 on CPU)
        out.append({"s": s, "b": b, "h": h, "a": a, "hook": m["hook_bytes"], "graph": m["graph_bytes"],
                    "paper": am.no_parallel(s, b, h, a), "m2": am.closed_form(s, b, h, a, mask_bytes=2),
                    "stats": stats})
    return out


def s2_share_table(h: int = 64, a: int = 4, b: int = 1, seqs=(32, 64, 128, 256, 512)):
    """Measured share of the as²b tensors in the saved bytes, against as²b(4+m) / total."""
    rows = []
    for s in seqs:
        table, m = term_table(s, b, h, a)
        s2 = sum(v for g, _, _, v in table if g in GROUPS[3:6])
        rows.append({"s": s, "measured": s2 / m["hook_bytes"], "formula_m2": am.s2_share(s, b, h, a, mask_bytes=2),
                     "formula_m1": am.s2_share(s, b, h, a, mask_bytes=1)})
    return rows


def gpt3_summary(r: results.Result):
    """Experiment 4: the GPT-3 layer traced on meta by gpu_runs/checkpoint_bench.py, against the formulas."""
    m = r.measurements["gpt3_meta"]
    s, b, h, a = m["s"], m["b"], m["h"], m["a"]
    L = am.GPT3["L"]
    stats_meta = 2 * 2 * s * b * 4  # on meta (as on CUDA) the LayerNorm statistics are fp32
    return {"measured_layer": m["saved_bytes"], "paper_layer": am.no_parallel(s, b, h, a),
            "m2_layer": am.closed_form(s, b, h, a, mask_bytes=2), "stats": stats_meta,
            "paper_model": L * am.no_parallel(s, b, h, a), "weights_bf16": 2 * am.GPT3["params"],
            "block_weights": 2 * block_params(h), "b_for_13TB": am.batch_for_total(13e12, s, h, a, L),
            "s2_share": am.s2_share(s, b, h, a)}


def stack_layer(r: results.Result) -> dict:
    """One results file's real stack (checkpoint_bench, mode "none"): the bytes alive after forward, per layer,
    against Theorem 6.1.3 with the width this device gives the dropout masks and the LayerNorm statistics
    (d02_gradient_checkpointing.layer_sizes: CPU bf16 noise and bf16 statistics, CUDA bool masks and fp32).
    On CPU the bytes come from MemTracker, on CUDA from the caching allocator (the file's memory_source)."""
    from snippets.ch6_activation_memory.d02_gradient_checkpointing import layer_sizes

    p, gpu = r.params, r.hardware["kind"] == "gpu"
    none = next(m for m in r.measurements["modes"] if m["mode"] == "none")
    A, _ = layer_sizes(p, gpu)
    return {"L": p["layers"], "s": p["s"], "b": p["b"], "h": p["h"], "a": p["a"], "mask_bytes": 1 if gpu else 2,
            "measured": none["act_after_forward"] / p["layers"], "model": A,
            "paper": am.no_parallel(p["s"], p["b"], p["h"], p["a"]), "source": none["memory_source"]}

"""The model presets of the calculators (docs/assets/calc/presets.js) against their sources.

The numbers were read from meta-llama/llama-models (models/sku_list.py: dim, n_layers, n_heads, n_kv_heads,
vocab_size, ffn_dim_multiplier, multiple_of) and the Llama 3 paper's Table 3; here each preset is recomputed the
way the released code builds the model: the FFN width by Llama's rule, ψ by counting the weights of the shapes."""
from __future__ import annotations

import json
import re

import pytest

from snippets import book, calc

PRESETS = book.ROOT / "docs" / "assets" / "calc" / "presets.js"
# models/sku_list.py model_args: (dim, n_layers, n_heads, n_kv_heads, ffn_dim_multiplier, multiple_of), VOCAB_SIZE
SKU = {"llama3_8b": (4096, 32, 32, 8, 1.3, 1024), "llama3_70b": (8192, 80, 64, 8, 1.3, 4096),
       "llama3_405b": (16384, 126, 128, 8, 1.2, 4096)}
VOCAB_SIZE = 128256


def models() -> dict:
    text = PRESETS.read_text(encoding="utf-8")
    body = re.search(r"/\* JSON \*/\s*export const MODELS = (\{.*?\});\s*/\* /JSON \*/", text, re.S).group(1)
    return json.loads(body)


def llama_ffn(dim: int, mult: float, multiple_of: int) -> int:
    """models/llama3/reference_impl/model.py FeedForward, called with hidden_dim = 4·dim."""
    hidden = int(2 * (4 * dim) / 3)
    hidden = int(mult * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def weights(m: dict) -> int:
    """Every weight of a Llama model: per layer Q, O (h²), K, V (h·kv·h/a), w1, w2, w3 (h·f), two RMSNorms (h);
    the embedding and the untied output (V·h each) and the final norm (h)."""
    h, a, kv, f, L, V = m["h"], m["a"], m["kv_heads"], m["ffn"], m["layers"], m["vocab"]
    return L * (2 * h * h + 2 * h * kv * (h // a) + 3 * h * f + 2 * h) + 2 * V * h + h


@pytest.mark.parametrize("key", sorted(SKU))
def test_llama3_presets_are_the_released_configs(key):
    m = models()[key]
    dim, L, a, kv, mult, mo = SKU[key]
    assert (m["h"], m["layers"], m["a"], m["kv_heads"], m["vocab"]) == (dim, L, a, kv, VOCAB_SIZE)
    assert m["ffn"] == llama_ffn(dim, mult, mo)               # 14336, 28672, 53248 (paper Table 3)
    assert m["swiglu"] == 1 and m["dropout"] is False and m["s"] == 8192
    assert float(m["psi"]) == weights(m)


def test_the_405b_preset_is_the_one_ch7_validates_and_llama2_70b_the_planners_default():
    from snippets.ch7_3d_parallelism import d01_3d_parallelism as d01
    from snippets.common import planner_3d as pl

    m = models()
    L, h, a, kv, f, V = d01.LLAMA3_405B
    assert (m["llama3_405b"]["layers"], m["llama3_405b"]["h"], m["llama3_405b"]["a"], m["llama3_405b"]["kv_heads"],
            m["llama3_405b"]["ffn"], m["llama3_405b"]["vocab"]) == (L, h, a, kv, f, V)
    l2, ref = m["llama2_70b"], pl.LLAMA70B
    assert (l2["layers"], l2["h"], l2["a"], l2["kv_heads"], l2["ffn"], l2["vocab"], l2["s"], float(l2["psi"])) == \
        (ref.layers, ref.hidden, ref.heads, ref.kv_heads, ref.ffn, ref.vocab, ref.seq, ref.psi)


def test_presets_are_inputs_the_memory_formulas_accept():
    """Every preset goes through calc.memory_estimate (the shape path it selects) without a refused combination,
    and GPT-3 is Brown et al.'s Table 2.1 shape with the GPT layer (Korthikanti's terms)."""
    for key, m in models().items():
        kw = {k: m[k] for k in ("layers", "h", "a", "s", "vocab", "kv_heads", "ffn")}
        out = calc.memory_estimate(psi=float(m["psi"]), n=8, stage=1, k=12, t=8, sp=True, recompute="selective",
                                   b=1, swiglu=bool(m["swiglu"]), dropout=m["dropout"], p=2, m=4, **kw)
        assert out["total"] > 0, key
    g = models()["gpt3"]
    assert (g["layers"], g["h"], g["a"], g["s"]) == (96, 12288, 96, 2048)
    assert calc.gpt_shape(g["h"], g["a"], g["kv_heads"], g["ffn"], bool(g["swiglu"]), g["dropout"])

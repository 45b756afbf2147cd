// Model presets shared by the memory calculator and the 3D planner. The object between the JSON markers is
// strict JSON: tests/calc/test_calc_presets.py reads it and checks every number against the sources below
// (ψ recounted from the shapes, f from Llama's FFN rule).
//
// GPT-3 175B: Brown et al. 2020 (arXiv:2005.14165) Table 2.1: L 96, h 12288, a 96 (head 128), context 2048;
//   the paper gives no vocabulary size, so V = 0 (embedding not placed on a stage). ψ = 175e9 as published.
// Llama 3 / 3.1: meta-llama/llama-models, models/sku_list.py (model_args: dim, n_layers, n_heads, n_kv_heads 8,
//   vocab_size 128256 (VOCAB_SIZE), ffn_dim_multiplier 1.3 / 1.3 / 1.2, multiple_of 1024 / 4096 / 4096) and
//   models/llama3/reference_impl/model.py (FeedForward: f = multiple_of·⌈int(mult·int(2·4·dim/3))/multiple_of⌉
//   -> 14336, 28672, 53248; three matrices w1, w2, w3 = SwiGLU; tie_word_embeddings false). The same numbers are
//   Table 3 of the Llama 3 paper (Dubey et al. 2024, arXiv:2407.21783: layers 32/80/126, model dimension
//   4096/8192/16384, FFN 14336/28672/53248, heads 32/64/128, KV heads 8, SwiGLU, vocabulary "128,000" = the 128256
//   rows of the released embedding). Pre-training sequence length 8192 (§3.4.1, before long-context training).
//   No dropout. ψ counted from the shapes: L·(2h² + 2h·kv·h/a + 3hf + 2h) + 2Vh + h
//   = 8,030,261,248 / 70,553,706,496 / 405,853,388,800.
// Llama 2 70B (the planner's default, planner_3d.LLAMA70B): Touvron et al. 2023 and its released config:
//   L 80, h 8192, a 64, kv 8, f 28672, V 32000, context 4096.
// Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, h 4096, 32 heads, 8 KV heads, f 14336,
//   8 experts, top-2, V 32000) is NOT a preset: neither the memory formulas nor the planner model experts.
/* JSON */
export const MODELS = {
  "gpt3": {"label": "GPT-3 175B", "psi": "175e9", "layers": 96, "h": 12288, "a": 96, "kv_heads": 96, "ffn": 49152,
           "swiglu": 0, "dropout": true, "vocab": 0, "s": 2048},
  "llama3_8b": {"label": "Llama 3 8B", "psi": "8030261248", "layers": 32, "h": 4096, "a": 32, "kv_heads": 8,
                "ffn": 14336, "swiglu": 1, "dropout": false, "vocab": 128256, "s": 8192},
  "llama3_70b": {"label": "Llama 3 70B", "psi": "70553706496", "layers": 80, "h": 8192, "a": 64, "kv_heads": 8,
                 "ffn": 28672, "swiglu": 1, "dropout": false, "vocab": 128256, "s": 8192},
  "llama3_405b": {"label": "Llama 3 405B", "psi": "405853388800", "layers": 126, "h": 16384, "a": 128, "kv_heads": 8,
                  "ffn": 53248, "swiglu": 1, "dropout": false, "vocab": 128256, "s": 8192},
  "llama2_70b": {"label": "Llama 2 70B", "psi": "70e9", "layers": 80, "h": 8192, "a": 64, "kv_heads": 8, "ffn": 28672,
                 "swiglu": 1, "dropout": false, "vocab": 32000, "s": 4096}
};
/* /JSON */
export const MOE_NOTE = "Mixtral 8x7B 같은 MoE 는 프리셋에 없습니다: 이 계산기의 공식은 expert (expert 별 FFN, expert parallel 의 " +
  "all-to-all buffer) 를 세지 않으므로, 숫자를 만들지 않습니다.";

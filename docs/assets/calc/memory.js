// Memory calculator logic: a line-by-line port of snippets/common/zero_memory.py (Ch5) and
// snippets/common/activation_memory.py (Ch6), composed as snippets/calc.py:memory_estimate with the pipeline
// in-flight counts of pipeline_sim (Ch4) and the GQA/SwiGLU layer of planner_3d (Ch7-01).
// tests/calc/test_calc_vectors.py runs this file with Node on vectors written by Python.
import { gpipePeakInflight, interleavedPeakChunks, oneFOneBPeakInflight } from "./pipeline.js";
import { layerActivationBytes } from "./planner.js";

export const PARAM_BYTES = 2, GRAD_BYTES = 2, K_ADAM = 12, GB = 1e9, GIB = 2 ** 30;

export function zeroMemoryBreakdown(psi, n, stage, k = K_ADAM) {
  if (![0, 1, 2, 3].includes(stage)) throw new Error(`ZeRO stage must be 0, 1, 2 or 3, not ${stage}`);
  return {
    params: PARAM_BYTES * psi / (stage >= 3 ? n : 1),
    grads: GRAD_BYTES * psi / (stage >= 2 ? n : 1),
    optimizer: k * psi / (stage >= 1 ? n : 1),
  };
}

// Korthikanti 2022 §4.1 terms: [name, kind, coef, mask, tpSharded, coreAttention]
export const TERMS = [
  ["LN1 input", "sbh", 1, false, false, false],
  ["LN2 input", "sbh", 1, false, false, false],
  ["QKV linear input (LN1 output)", "sbh", 1, false, false, false],
  ["Q (QKᵀ input)", "sbh", 1, false, true, false],
  ["K (QKᵀ input)", "sbh", 1, false, true, false],
  ["softmax output", "as2b", 1, false, true, true],
  ["attention dropout mask", "as2b", 1, true, true, true],
  ["attention dropout output (·V input)", "as2b", 1, false, true, true],
  ["V (·V input)", "sbh", 1, false, true, false],
  ["output projection input", "sbh", 1, false, true, false],
  ["attention-out dropout mask", "sbh", 1, true, false, false],
  ["fc1 input (LN2 output)", "sbh", 1, false, false, false],
  ["GeLU input (fc1 output)", "sbh", 4, false, true, false],
  ["fc2 input (GeLU output)", "sbh", 4, false, true, false],
  ["MLP dropout mask", "sbh", 1, true, false, false],
];

export function layerBytes(s, b, h, a, { t = 1, sp = false, recompute = "none", actBytes = 2, maskBytes = 1 } = {}) {
  if (recompute === "full") return actBytes * s * b * h;
  if (recompute !== "none" && recompute !== "selective")
    throw new Error(`recompute must be 'none', 'selective' or 'full', not '${recompute}'`);
  let sum = 0;
  for (const [, kind, coef, mask, tpSharded, core] of TERMS) {
    if (recompute === "selective" && core) continue;
    const elems = coef * (kind === "sbh" ? s * b * h : a * s * s * b);
    const width = mask ? maskBytes : actBytes;
    const shard = sp || tpSharded ? t : 1;
    sum += elems * width / shard;
  }
  return sum;
}

// calc.py:gpt_shape / layer_activation: Korthikanti's exact terms for the GPT layer (MHA, GELU 4h, dropout),
// planner_3d.layer_activation_bytes (Ch7-01: GQA, SwiGLU, no dropout; 16-bit, SP when t > 1) otherwise.
export const gptShape = (h, a, kv = 0, ffn = 0, swiglu = false, dropout = true) =>
  (kv === 0 || kv === a) && (ffn === 0 || ffn === 4 * h) && !swiglu && !!dropout;

export function layerActivation(s, b, h, a, t, sp, recompute, actBytes = 2, maskBytes = 1, kv = 0, ffn = 0, swiglu = false, dropout = true) {
  if (gptShape(h, a, kv, ffn, swiglu, dropout)) return layerBytes(s, b, h, a, { t, sp, recompute, actBytes, maskBytes });
  if ((t > 1 && !sp) || actBytes !== 2 || maskBytes !== 1)
    throw new Error("GQA/SwiGLU layers: only 16-bit activations, 1-byte masks and SP (t > 1) are modelled");
  return layerActivationBytes({ hidden: h, heads: a, seq: s, ffn, kv_heads: kv, swiglu: !!swiglu, dropout: !!dropout },
    b, t, recompute, { shapes: true });
}

// calc.py:stage_parameters: the layers' ψ − 2Vh split over p ranks, the embedding on rank 0, the LM head on rank p − 1.
export function stageParameters(psi, p, rank, vocab = 0, h = 0) {
  const emb = vocab * h;
  return (psi - 2 * emb) / p + (rank === 0 ? emb : 0) + (rank === p - 1 ? emb : 0);
}

// calc.py:inflight_units (Ch4): micro-batches of activations rank r holds at its peak, in units of one micro-batch
// through the rank's L/p layers.
export function inflightUnits(schedule, p, m, v, rank) {
  if (schedule === "gpipe") return gpipePeakInflight(p, m, rank);
  if (schedule === "1f1b") return oneFOneBPeakInflight(p, m, rank);
  if (schedule === "interleaved") return interleavedPeakChunks(p, m, v, rank) / v;
  throw new Error(`schedule must be 'gpipe', '1f1b' or 'interleaved', not '${schedule}'`);
}

const LOGITS_BYTES = 4;  // planner_3d.Assumptions.logits_bytes: fp32 logits for the loss

// calc.py:memory_estimate: the fullest pipeline rank's bytes per GPU.
export function memoryEstimate({ psi, n, stage, k, t, sp, recompute, s, b, layers, h, a,
  act_bytes = 2, mask_bytes = 1, capacity_gib = 80, p = 1, schedule = "1f1b", m = 1, v = 1, vocab = 0,
  kv_heads = 0, ffn = 0, swiglu = false, dropout = true, grad_bytes = 2, with_activations = true }) {
  const perLayer = layerActivation(s, b, h, a, t, sp, recompute, act_bytes, mask_bytes, kv_heads, ffn, swiglu, dropout);
  const ranks = [];
  for (let r = 0; r < p; r++) {
    const st = zeroMemoryBreakdown(stageParameters(psi, p, r, vocab, h) / t, n, stage, k);
    st.grads *= grad_bytes / GRAD_BYTES;
    const units = inflightUnits(schedule, p, m, v, r);
    const act = with_activations ? perLayer * layers / p * units : 0;
    const logits = with_activations && r === p - 1 ? b * s * vocab / t * LOGITS_BYTES : 0;
    const states = st.params + st.grads + st.optimizer;
    ranks.push({ ...st, model_states: states, activations: act, logits, total: states + act + logits, inflight: units });
  }
  let worst = 0;
  for (let r = 1; r < p; r++) if (ranks[r].total > ranks[worst].total) worst = r;
  const w = ranks[worst];
  return { ...w, total_gb: w.total / GB, total_gib: w.total / GIB, fits: w.total <= capacity_gib * GIB, rank: worst,
    per_layer: perLayer, layers_per_rank: layers / p, rank_totals: ranks.map(x => x.total) };
}

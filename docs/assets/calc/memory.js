// Memory calculator logic: a line-by-line port of snippets/common/zero_memory.py (Ch5) and
// snippets/common/activation_memory.py (Ch6), composed as snippets/calc.py:memory_estimate.
// tests/calc/test_calc_vectors.py runs this file with Node on vectors written by Python.
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

export function memoryEstimate({ psi, n, stage, k, t, sp, recompute, s, b, layers, h, a,
  act_bytes = 2, mask_bytes = 1, capacity_gib = 80 }) {
  const st = zeroMemoryBreakdown(psi / t, n, stage, k);
  const act = layerBytes(s, b, h, a, { t, sp, recompute, actBytes: act_bytes, maskBytes: mask_bytes }) * layers;
  const total = st.params + st.grads + st.optimizer + act;
  return { ...st, activations: act, total, total_gb: total / GB, total_gib: total / GIB,
    fits: total <= capacity_gib * GIB };
}

// 3D layout planner: a port of snippets/common/planner_3d.py (Ch7-01) and the cost functions it
// imports (alphabeta.ring_allreduce_time, tp_cost, pipeline_sim's 1F1B closed forms), on top of
// memory.js (Ch5 model states, Ch6 activations). plan(...) returns the same rows, in the same order.
import { GRAD_BYTES, PARAM_BYTES, layerBytes, zeroMemoryBreakdown } from "./memory.js";

const E_16BIT = 2;
export const ringAllreduceTime = (n, S, alpha, beta) => 2 * (n - 1) * alpha + 2 * (n - 1) / n * S * beta;
const ringAllgatherTime = (t, S, alpha, beta) => 0.5 * ringAllreduceTime(t, S, alpha, beta);
const tpAllreducesPerLayer = recompute => (recompute === "full" ? 6 : 4);
function tpCommTimePerLayer(t, b, s, h, alpha, beta, recompute, sp) {
  const S = b * s * h * E_16BIT, n = tpAllreducesPerLayer(recompute);
  return sp ? n * 2 * ringAllgatherTime(t, S, alpha, beta) : n * ringAllreduceTime(t, S, alpha, beta);
}
export const layerFlops = (b, s, h) => 3.0 * (24 * b * s * h * h + 4 * b * s * s * h);

export const divisors = n => { const out = []; for (let k = 1; k <= n; k++) if (n % k === 0) out.push(k); return out; };
export function factorisations(n) {
  const out = [];
  for (const t of divisors(n)) for (const p of divisors(n / t)) out.push([n / (t * p), t, p]);
  return out;
}
const axisLink = (stride, degree, g) => (degree === 1 || stride * degree <= g ? "intra" : "inter");

export function evaluate(model, cluster, batch, d, t, p, zeroStage = 1, recompute = "selective") {
  const L = model.layers, h = model.hidden, a = model.heads, s = model.seq, b = batch.micro_batch;
  const m = Math.floor(batch.global_batch / (d * b)), g = cluster.gpus_per_node;
  const links = { tp: axisLink(1, t, g), pp: axisLink(t, p, g), dp: axisLink(t * p, d, g) };
  const ab = { intra: [cluster.alpha_intra, 1 / cluster.intra_bw], inter: [cluster.alpha_inter, 1 / cluster.inter_bw] };
  const psiRank = model.psi / (t * p);
  const states = zeroMemoryBreakdown(psiRank, d, zeroStage);
  const inflight = Math.min(p - 0, m);
  const act = layerBytes(s, b, h, a, { t, sp: t > 1, recompute }) * (L / p) * inflight;
  let [al, be] = ab[links.tp];
  const tpS = t > 1 ? tpCommTimePerLayer(t, b, s, h, al, be, recompute, true) * (L / p) * m : 0.0;
  [al, be] = ab[links.pp];
  const ppS = p > 1 ? 2 * m * (al + b * s * h * E_16BIT / t * be) : 0.0;
  [al, be] = ab[links.dp];
  let dpS = d > 1 ? ringAllreduceTime(d, GRAD_BYTES * psiRank, al, be) : 0.0;
  if (zeroStage === 3 && d > 1) dpS += ringAllgatherTime(d, PARAM_BYTES * psiRank, al, be);
  const extra = recompute === "full" ? 1 / 3 : 0.0;
  const computeS = layerFlops(b, s, h) * (1 + extra) / (t * cluster.flops * cluster.mfu) * (L / p) * m;
  const bubble = (p - 1) / m;
  const stepS = (computeS + tpS + ppS) * (1 + bubble) + dpS;
  const mem = states.params + states.grads + states.optimizer + act;
  return { d, t, p, m, links, mem: { ...states, activations: act, total: mem },
    comm_s: { tp: tpS, pp: ppS, dp: dpS }, compute_s: computeS, bubble, step_s: stepS,
    fits: mem <= cluster.mem_bytes, tokens_per_s: batch.global_batch * s / stepS };
}

// Every valid layout, feasible ones first, each group fastest first (t | heads, p | layers,
// d·b | global batch, t ≤ max_t = GPUs per node unless given).
export function plan({ model, cluster, batch, zero_stage = 1, recompute = "selective", max_t = null }) {
  const maxT = max_t || cluster.gpus_per_node, rows = [];
  for (const [d, t, p] of factorisations(cluster.gpus)) {
    if (model.heads % t || model.layers % p || batch.global_batch % (d * batch.micro_batch) || t > maxT) continue;
    rows.push(evaluate(model, cluster, batch, d, t, p, zero_stage, recompute));
  }
  return rows.map((r, i) => [r, i]).sort((x, y) => (x[0].fits === y[0].fits ? x[0].step_s - y[0].step_s : x[0].fits ? -1 : 1) || x[1] - y[1])
    .map(x => x[0]);
}

// 3D layout planner: a port of snippets/common/planner_3d.py (Ch7-01) and the cost functions it
// imports (alphabeta.ring_allreduce_time, tp_cost, pipeline_sim's 1F1B / interleaved closed forms), on top
// of memory.js (Ch5 model states, Ch6 activations). plan(...) returns the same rows, in the same order.
import { PARAM_BYTES, layerBytes } from "./memory.js";

const E_16BIT = 2, K_ADAM = 12;
export const ringAllreduceTime = (n, S, alpha, beta) => 2 * (n - 1) * alpha + 2 * (n - 1) / n * S * beta;
const ringAllgatherTime = (t, S, alpha, beta) => 0.5 * ringAllreduceTime(t, S, alpha, beta);
const tpAllreducesPerLayer = recompute => (recompute === "full" ? 6 : 4);
function tpCommTimePerLayer(t, b, s, h, alpha, beta, recompute, sp) {
  const S = b * s * h * E_16BIT, n = tpAllreducesPerLayer(recompute);
  return sp ? n * 2 * ringAllgatherTime(t, S, alpha, beta) : n * ringAllreduceTime(t, S, alpha, beta);
}
export const layerFlopsLegacy = (b, s, h) => 3.0 * (24 * b * s * h * h + 4 * b * s * s * h);

// planner_3d.Assumptions (defaults) and LEGACY
export const ASSUMPTIONS = { tp_overlap: 0.0, mfu_curve: [], grad_bytes: 4, shapes: true, embeddings: true,
  interleave: 1, logits_bytes: 4, uneven_stages: false, edge_layers_less: 0 };
export const LEGACY = { ...ASSUMPTIONS, grad_bytes: 2, shapes: false, embeddings: false };

export const divisors = n => { const out = []; for (let k = 1; k <= n; k++) if (n % k === 0) out.push(k); return out; };
export function factorisations(n) {
  const out = [];
  for (const t of divisors(n)) for (const p of divisors(n / t)) out.push([n / (t * p), t, p]);
  return out;
}
const axisLink = (stride, degree, g) => (degree === 1 || stride * degree <= g ? "intra" : "inter");
const ffnWidth = model => model.ffn || 4 * model.hidden;
const kvRatio = model => (model.kv_heads || model.heads) / model.heads;

export function layerParams(model, A) {
  if (!A.shapes) return model.psi / model.layers;
  const h = model.hidden, f = ffnWidth(model), r = kvRatio(model);
  return h * h * (2 + 2 * r) + (model.swiglu ? 3 : 2) * h * f;
}
function layerFlops(model, b, A) {
  const s = model.seq, h = model.hidden;
  if (!A.shapes) return layerFlopsLegacy(b, s, h);
  return 3.0 * (2 * b * s * layerParams(model, A) + 4 * b * s * s * h);
}
export function layerActivationBytes(model, b, t, recompute, A) {
  const s = model.seq, h = model.hidden, a = model.heads, sbh = s * b * h;
  if (recompute === "full") return 2.0 * sbh;
  if (!A.shapes) return layerBytes(s, b, h, a, { t, sp: t > 1, recompute });
  const f = ffnWidth(model), r = kvRatio(model), drop = model.dropout === undefined ? 1 : Number(model.dropout);
  const act = 2 * sbh * (2 + 1 + 1 + 2 * r + 1 + 1 + (model.swiglu ? 4 : 2) * f / h);
  const masks = sbh * (drop ? 2 : 0);
  const core = recompute === "selective" ? 0.0 : a * s * s * b * (2 + 2 * drop + 1 * drop);
  return (act + masks + core) / t;
}
export function mfuAt(cluster, model, t, A) {
  const pts = [...(A.mfu_curve || [])].sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  if (!pts.length) return cluster.mfu;
  const eta = w => {
    if (w <= pts[0][0]) return pts[0][1];
    if (w >= pts[pts.length - 1][0]) return pts[pts.length - 1][1];
    for (let i = 0; i + 1 < pts.length; i++) {
      const [w0, e0] = pts[i], [w1, e1] = pts[i + 1];
      if (w0 <= w && w <= w1) return e0 + (Math.log(w) - Math.log(w0)) / (Math.log(w1) - Math.log(w0)) * (e1 - e0);
    }
    return pts[pts.length - 1][1];
  };
  return cluster.mfu * eta(model.hidden / t) / eta(model.hidden);
}
const interleavedFirstRankMemory = (p, v) => (2 * (p - 1) + (v - 1) * p + 1) / v;

export function evaluate(model, cluster, batch, d, t, p, zeroStage = 1, recompute = "selective", assume = ASSUMPTIONS) {
  const A = { ...ASSUMPTIONS, ...assume };
  const L = model.layers, h = model.hidden, s = model.seq, b = batch.micro_batch, V = model.vocab, v = A.interleave;
  const m = Math.floor(batch.global_batch / (d * b)), g = cluster.gpus_per_node;
  const links = { tp: axisLink(1, t, g), pp: axisLink(t, p, g), dp: axisLink(t * p, d, g) };
  const ab = { intra: [cluster.alpha_intra, 1 / cluster.intra_bw], inter: [cluster.alpha_inter, 1 / cluster.inter_bw] };
  const k = v === 1 && p > 2 ? A.edge_layers_less : 0;
  const stageLayers = Math.ceil((L + 2 * k) / p), edgeLayers = stageLayers - k, embed = A.embeddings;
  let first = (edgeLayers * layerParams(model, A) + (embed ? V * h : 0)) / t;
  let last = first;
  const middle = stageLayers * layerParams(model, A) / t;
  if (p === 1) first = last = (L * layerParams(model, A) + (embed ? 2 * V * h : 0)) / t;
  const states = n => ({ params: PARAM_BYTES * n / (zeroStage >= 3 ? d : 1), grads: A.grad_bytes * n / (zeroStage >= 2 ? d : 1),
    optimizer: K_ADAM * n / (zeroStage >= 1 ? d : 1) });
  const sum = o => o.params + o.grads + o.optimizer;
  const perLayer = layerActivationBytes(model, b, t, recompute, A);
  const chunksFirst = v > 1 ? Math.min(interleavedFirstRankMemory(p, v), m) : Math.min(p, m);
  const inflightLast = Math.min(1, m);
  const logits = embed ? b * s * V / t * A.logits_bytes : 0.0;
  const cand = { first: [first, edgeLayers * chunksFirst], last: [last, edgeLayers * inflightLast] };
  if (k) cand.second = [middle, stageLayers * Math.min(p - 1, m)];
  const memOf = {};
  for (const [name, [n, units]] of Object.entries(cand))
    memOf[name] = sum(states(n)) + perLayer * units + (name === "last" || (name === "first" && p === 1) ? logits : 0.0);
  let worst = "first";
  for (const name of Object.keys(memOf)) if (memOf[name] > memOf[worst]) worst = name;
  const st = states(cand[worst][0]);
  const act = perLayer * cand[worst][1];
  let [al, be] = ab[links.tp];
  const tpFull = t > 1 ? tpCommTimePerLayer(t, b, s, h, al, be, recompute, true) * stageLayers * m : 0.0;
  const tpS = tpFull * (1 - A.tp_overlap);
  [al, be] = ab[links.pp];
  const ppS = p > 1 ? 2 * m * v * (al + b * s * h * E_16BIT / t * be) : 0.0;
  [al, be] = ab[links.dp];
  const shard = Math.max(first, last, middle);
  let dpS = 0.0;   // ZeRO 0: all-reduce; ZeRO >= 1: reduce-scatter gradients + all-gather 16-bit parameters
  if (d > 1 && zeroStage === 0) dpS = ringAllreduceTime(d, A.grad_bytes * shard, al, be);
  else if (d > 1) {
    dpS = ringAllgatherTime(d, A.grad_bytes * shard, al, be) + ringAllgatherTime(d, PARAM_BYTES * shard, al, be);
    if (zeroStage === 3) dpS += ringAllgatherTime(d, PARAM_BYTES * shard, al, be);  // gathered again for the backward
  }
  const extra = recompute === "full" ? 1 / 3 : 0.0;
  const rate = t * cluster.flops * mfuAt(cluster, model, t, A);
  const head = embed ? 3.0 * 2 * b * s * h * V : 0.0;
  const lf = layerFlops(model, b, A) * (1 + extra);
  const stageFlops = p === 1 ? lf * stageLayers + head : Math.max(lf * stageLayers, lf * edgeLayers + head);
  const computeS = stageFlops / rate * m;
  const bubble = (p - 1) / (v * m);
  const stepS = (computeS + tpS + ppS) * (1 + bubble) + dpS;
  const mem = memOf[worst];
  return { d, t, p, m, links, mem: { ...st, activations: act, total: mem, stage: worst },
    comm_s: { tp: tpS, tp_hidden: tpFull - tpS, pp: ppS, dp: dpS }, compute_s: computeS, bubble, step_s: stepS,
    fits: mem <= cluster.mem_bytes, tokens_per_s: batch.global_batch * s / stepS };
}

export function valid(model, batch, d, t, p, assume = ASSUMPTIONS) {
  const A = { ...ASSUMPTIONS, ...assume }, kv = model.kv_heads || model.heads;
  if (model.heads % t || (A.shapes && kv % t && t % kv)) return false;
  if (A.uneven_stages ? p > model.layers : model.layers % p) return false;
  if (batch.global_batch % (d * batch.micro_batch)) return false;
  const m = Math.floor(batch.global_batch / (d * batch.micro_batch)), v = A.interleave;
  return v === 1 || p === 1 || (m % p === 0 && v * p <= model.layers);
}

// Every valid layout, feasible ones first, each group fastest first (t ≤ max_t = GPUs per node unless given).
export function plan({ model, cluster, batch, zero_stage = 1, recompute = "selective", max_t = null, assume = ASSUMPTIONS }) {
  const maxT = max_t || cluster.gpus_per_node, rows = [];
  for (const [d, t, p] of factorisations(cluster.gpus)) {
    if (t > maxT || !valid(model, batch, d, t, p, assume)) continue;
    rows.push(evaluate(model, cluster, batch, d, t, p, zero_stage, recompute, assume));
  }
  return rows.map((r, i) => [r, i]).sort((x, y) => (x[0].fits === y[0].fits ? x[0].step_s - y[0].step_s : x[0].fits ? -1 : 1) || x[1] - y[1])
    .map(x => x[0]);
}

// planner_3d.rejection: the first rule of valid() a layout breaks (t > max_t first), or null when plan() keeps it.
export function rejection(model, batch, d, t, p, assume = ASSUMPTIONS, maxT = null) {
  const A = { ...ASSUMPTIONS, ...assume }, kv = model.kv_heads || model.heads;
  if (maxT !== null && t > maxT) return "t_max";
  if (model.heads % t) return "t_heads";
  if (A.shapes && kv % t && t % kv) return "t_kv";
  if (A.uneven_stages ? p > model.layers : model.layers % p) return "p_layers";
  if (batch.global_batch % (d * batch.micro_batch)) return "batch";
  const m = Math.floor(batch.global_batch / (d * batch.micro_batch)), v = A.interleave;
  if (v > 1 && p > 1 && m % p) return "interleave_m";
  if (v > 1 && p > 1 && v * p > model.layers) return "interleave_layers";
  return null;
}

// planner_3d.dropped_pipeline_degrees: the p values with no layout left, and the reasons (t_max only when alone).
export function droppedPipelineDegrees({ model, cluster, batch, max_t = null, assume = ASSUMPTIONS }) {
  const maxT = max_t || cluster.gpus_per_node, byP = new Map(), kept = new Set();
  for (const [d, t, p] of factorisations(cluster.gpus)) {
    const why = rejection(model, batch, d, t, p, assume, maxT);
    if (why === null) kept.add(p);
    else { if (!byP.has(p)) byP.set(p, new Set()); byP.get(p).add(why); }
  }
  return [...byP.keys()].sort((x, y) => x - y).filter(p => !kept.has(p)).map(p => {
    const all = byP.get(p), other = [...all].filter(r => r !== "t_max");
    if (all.has("p_layers")) return { p, reasons: ["p_layers"] };  // p ∤ L rules out every (d, t)
    return { p, reasons: (other.length ? other : [...all]).sort() };
  });
}

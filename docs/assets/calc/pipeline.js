// Pipeline schedule logic: a port of snippets/common/pipeline_sim.py (Ch4): per-rank action orders,
// earliest-start timeline, both bubble definitions, peak in-flight micro-batches per rank.
// Actions are [op, micro-batch, chunk], op in "F" | "B" | "W". tests/calc/test_calc_vectors.py
// compares this file with the Python simulator on vectors written by snippets/calc.py.
export const SCHEDULES = ["naive", "gpipe", "1f1b", "interleaved", "looped_bfs", "zb_h1", "zbv"];
export const SPLIT_BACKWARD = new Set(["zb_h1", "zbv"]);

export function stageOf(schedule, rank, chunk, p) {
  if (schedule === "zbv") return chunk === 0 ? rank : 2 * p - 1 - rank;
  return chunk * p + rank;
}

function mbChunk(k, p, v, backward) {
  let chunk = Math.floor(k / p) % v;
  if (backward) chunk = v - 1 - chunk;
  return [Math.floor(k / (p * v)) * p + (k % p), chunk];
}

export function rankOrder(schedule, r, p, m, v = 1) {
  const out = [];
  if (schedule === "naive") return [["F", 0, 0], ["B", 0, 0]];
  if (schedule === "gpipe") {
    for (let i = 0; i < m; i++) out.push(["F", i, 0]);
    for (let i = 0; i < m; i++) out.push(["B", i, 0]);
    return out;
  }
  if (schedule === "1f1b") {
    const w = Math.min(p - 1 - r, m);
    for (let i = 0; i < w; i++) out.push(["F", i, 0]);
    for (let i = 0; i < m - w; i++) out.push(["F", w + i, 0], ["B", i, 0]);
    for (let i = m - w; i < m; i++) out.push(["B", i, 0]);
    return out;
  }
  if (schedule === "interleaved") {
    if (m % p) throw new Error("interleaved 1F1B (Megatron order) needs m to be a multiple of p");
    const total = m * v, w = Math.min(2 * (p - 1 - r) + (v - 1) * p, total);
    for (let k = 0; k < w; k++) out.push(["F", ...mbChunk(k, p, v, false)]);
    for (let k = 0; k < total - w; k++) out.push(["F", ...mbChunk(w + k, p, v, false)], ["B", ...mbChunk(k, p, v, true)]);
    for (let k = total - w; k < total; k++) out.push(["B", ...mbChunk(k, p, v, true)]);
    return out;
  }
  if (schedule === "looped_bfs") {
    for (let c = 0; c < v; c++) for (let i = 0; i < m; i++) out.push(["F", i, c]);
    for (let c = v - 1; c >= 0; c--) for (let i = m - 1; i >= 0; i--) out.push(["B", i, c]);
    return out;
  }
  if (schedule === "zb_h1") {
    const w = Math.min(p - 1 - r, m), pending = [];
    for (let i = 0; i < w; i++) out.push(["F", i, 0]);
    for (let i = 0; i < m - w; i++) {
      out.push(["F", w + i, 0], ["B", i, 0]);
      pending.push(i);
      if (i >= r) out.push(["W", pending.shift(), 0]);
    }
    for (let i = m - w; i < m; i++) {
      out.push(["B", i, 0]);
      pending.push(i);
      if (i >= r) out.push(["W", pending.shift(), 0]);
    }
    for (const i of pending) out.push(["W", i, 0]);
    return out;
  }
  if (schedule === "zbv") return zbvOrder(r, p, m);
  throw new Error(`unknown schedule '${schedule}'`);
}

function zbvOrder(r, p, m) {
  const n = Math.max(m, 2 * p - 1), out = [], cnt = { F0: 0, F1: 0, B0: 0, B1: 0 };
  const act = (op, c) => { out.push([op, cnt[op + c], c]); cnt[op + c] += 1; };
  for (let i = 0; i < 2 * (p - r) - 1; i++) act("F", 0);
  for (let i = 0; i < r; i++) { act("F", 1); act("F", 0); }
  for (let i = 0; i < p - r; i++) { act("F", 1); act("B", 1); out.push(["W", cnt.B1 - 1, 1]); }
  while (cnt.F1 < cnt.F0 || cnt.F0 < n) {
    if (cnt.F0 < n) act("F", 0);
    act("B", 0); out.push(["W", cnt.B0 - 1, 0]);
    act("F", 1); act("B", 1); out.push(["W", cnt.B1 - 1, 1]);
  }
  let w0 = cnt.B0;
  const w1 = cnt.B1;
  for (let i = 0; i < r; i++) { act("B", 0); act("B", 1); }
  for (let i = 0; i < p - r; i++) { act("B", 0); out.push(["W", w0, 0]); w0 += 1; }
  for (let i = w1; i < cnt.B1; i++) out.push(["W", i, 1]);
  for (let i = w0; i < cnt.B0; i++) out.push(["W", i, 0]);
  return out.filter(a => a[1] < m);
}

// Earliest start of every action given each rank's order (the longest-path fixed point of
// pipeline_sim.simulate). Returns per-rank lists of {op, mb, chunk, stage, start, end}.
export function simulate(schedule, p, m, v = 1, tF = 1, tB = 1, tW = 1, tComm = 0) {
  if (schedule === "zbv") v = 2;
  else if (["naive", "gpipe", "1f1b", "zb_h1"].includes(schedule)) v = 1;
  if (schedule === "naive") m = 1;
  const split = SPLIT_BACKWARD.has(schedule);
  const dur = { F: tF, B: split ? tB : tB + tW, W: tW };
  const ranks = [];
  const where = new Map();  // "op,stage,mb" -> [rank, index]
  for (let r = 0; r < p; r++) {
    ranks.push(rankOrder(schedule, r, p, m, v).map(([op, mb, chunk], i) => {
      const a = { op, mb, chunk, stage: stageOf(schedule, r, chunk, p), start: 0, end: 0, rank: r };
      where.set(`${op},${a.stage},${mb}`, a);
      return a;
    }));
  }
  const nSt = p * v;
  for (const acts of ranks) for (const a of acts) {
    a.deps = [];
    if (a.op === "F" && a.stage > 0) a.deps.push(where.get(`F,${a.stage - 1},${a.mb}`));
    if (a.op === "B" && a.stage < nSt - 1) a.deps.push(where.get(`B,${a.stage + 1},${a.mb}`));
    if (a.op === "B") a.deps.push(where.get(`F,${a.stage},${a.mb}`));
    if (a.op === "W") a.deps.push(where.get(`B,${a.stage},${a.mb}`));
    if (a.deps.some(d => d === undefined)) throw new Error(`${schedule}: an action's producer is missing`);
  }
  const total = ranks.reduce((n, acts) => n + acts.length, 0);
  for (let sweep = 0; ; sweep++) {
    if (sweep > total + 2) throw new Error(`${schedule}: the per-rank orders deadlock (p=${p}, m=${m}, v=${v})`);
    let changed = false;
    for (const acts of ranks) {
      let free = 0;
      for (const a of acts) {
        let ready = free;
        for (const d of a.deps) ready = Math.max(ready, d.end + (d.rank !== a.rank ? tComm : 0));
        const end = ready + dur[a.op];
        if (end !== a.end) { a.end = end; changed = true; }
        a.start = ready;
        free = end;
      }
    }
    if (!changed) break;
  }
  for (const acts of ranks) for (const a of acts) delete a.deps;
  return ranks;
}

export function summary(ranks, schedule) {
  const busy = ranks.map(acts => acts.reduce((t, a) => t + (a.end - a.start), 0));
  const makespan = Math.max(...ranks.flat().map(a => a.end)) - Math.min(0, ...ranks.flat().map(a => a.start));
  const p = ranks.length, sumBusy = busy.reduce((x, y) => x + y, 0), ideal = Math.max(...busy);
  const peak = until => ranks.map(acts => {
    const close = until === "W" && SPLIT_BACKWARD.has(schedule) ? "W" : "B";
    let n = 0, best = 0;
    for (const a of acts) { n += a.op === "F" ? 1 : a.op === close ? -1 : 0; best = Math.max(best, n); }
    return best;
  });
  const nSt = Math.max(...ranks.flat().map(a => a.stage)) + 1, stage = new Array(nSt).fill(0), live = new Array(nSt).fill(0);
  for (const a of ranks.flat().sort((x, y) => x.start - y.start)) {  // stable: a stage's actions stay in rank order
    live[a.stage] += a.op === "F" ? 1 : a.op === "B" ? -1 : 0;
    stage[a.stage] = Math.max(stage[a.stage], live[a.stage]);
  }
  return { makespan, busy, bubble_fraction: 1 - sumBusy / (p * makespan),
    bubble_relative: makespan / ideal - 1, inflight: peak("B"), inflight_w: peak("W"), inflight_stage: stage };
}

// Ch4's closed form, relative to ideal time: (p−1)/(v·m) for GPipe and 1F1B (v = 1) and interleaved 1F1B,
// uniform stages and no transfer time (pipeline_sim.interleaved_bubble_relative); null where it does not apply.
export function closedFormRelative(schedule, p, m, v, tComm) {
  if (!["gpipe", "1f1b", "interleaved"].includes(schedule) || tComm !== 0) return null;
  return (p - 1) / ((schedule === "interleaved" ? v : 1) * m);
}

// pipeline_sim's peak in-flight closed forms (Ch4), used by the memory calculator.
export const oneFOneBPeakInflight = (p, m, rank) => Math.min(p - rank, m);
export const gpipePeakInflight = (p, m) => m;
export const interleavedPeakChunks = (p, m, v, rank = 0) => Math.min(2 * (p - 1 - rank) + (v - 1) * p + 1, m * v);

// calc.py:pipeline_view: the calculator's inputs as the reader means them. tF, tB: forward and whole backward
// (input-grad + weight-grad) of one micro-batch through one rank's L/p layers; tW: the weight-grad part of tB,
// split off only by ZB-H1 / ZB-V. A rank with v chunks (interleaved, looped BFS; ZB-V 2) runs each in 1/v of the time.
export function viewTimes(schedule, v, tF, tB, tW) {
  const split = SPLIT_BACKWARD.has(schedule);
  const chunks = schedule === "zbv" ? 2 : ["interleaved", "looped_bfs"].includes(schedule) ? v : 1;
  const [bIn, w] = split ? [tB - tW, tW] : [tB, 0];
  return { chunks, chunk_t: [tF / chunks, bIn / chunks, w / chunks] };
}

export function pipelineView(schedule, p, m, v, tF, tB, tW, tComm) {
  const { chunks, chunk_t } = viewTimes(schedule, v, tF, tB, tW);
  const ranks = simulate(schedule, p, m, v, chunk_t[0], chunk_t[1], chunk_t[2], tComm);
  const s = summary(ranks, schedule);
  s.closed_relative = closedFormRelative(schedule, p, m, v, tComm);
  return { ranks, out: { ...s, chunks, chunk_t } };
}

// Runs the browser calculators' JavaScript on test vectors written by Python (snippets/calc.py) and
// prints {"checked": n, "mismatches": [...]} as JSON. Usage: node run_vectors.mjs vectors.json
// A number matches when |js − py| ≤ 1e-9·max(1, |py|) (floating-point rounding, nothing more).
import { readFileSync } from "node:fs";
import { memoryEstimate } from "../../docs/assets/calc/memory.js";
import { closedFormRelative, pipelineView, simulate, summary } from "../../docs/assets/calc/pipeline.js";

const vec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const mismatches = [];
let checked = 0;

function same(py, js, path) {
  if (typeof py === "number") {
    checked++;
    if (!(typeof js === "number" && Math.abs(js - py) <= 1e-9 * Math.max(1, Math.abs(py))))
      mismatches.push({ path, py, js });
  } else if (Array.isArray(py)) {
    if (!Array.isArray(js) || js.length !== py.length) { mismatches.push({ path, py: `len ${py.length}`, js: String(js && js.length) }); return; }
    py.forEach((x, i) => same(x, js[i], `${path}[${i}]`));
  } else if (py !== null && typeof py === "object") {
    for (const k of Object.keys(py)) same(py[k], js == null ? undefined : js[k], `${path}.${k}`);
  } else {
    checked++;
    if (py !== js) mismatches.push({ path, py, js });
  }
}

vec.memory.forEach((c, i) => same(c.out, memoryEstimate(c.in), `memory[${i}]`));
vec.pipeline.forEach((c, i) => {
  const { schedule, p, m, v, t_f, t_b, t_w, t_comm } = c.in;
  const ranks = simulate(schedule, p, m, v, t_f, t_b, t_w, t_comm);
  const s = summary(ranks, schedule);
  s.closed_relative = closedFormRelative(schedule, p, m, v, t_comm);
  s.actions = ranks.map(acts => acts.map(a => [a.op, a.mb, a.chunk, a.stage, a.start, a.end]));
  same(c.out, s, `pipeline[${i}](${schedule},p=${p},m=${m},v=${v})`);
});
(vec.pipeline_view || []).forEach((c, i) => {
  const { schedule, p, m, v, t_f, t_b, t_w, t_comm } = c.in;
  same(c.out, pipelineView(schedule, p, m, v, t_f, t_b, t_w, t_comm).out, `pipeline_view[${i}](${schedule})`);
});
if (vec.planner) {
  const { plan } = await import("../../docs/assets/calc/planner.js");
  vec.planner.forEach((c, i) => same(c.out, plan(c.in), `planner[${i}]`));
}
if (vec.planner_dropped) {
  const { droppedPipelineDegrees } = await import("../../docs/assets/calc/planner.js");
  vec.planner_dropped.forEach((c, i) => same(c.out, droppedPipelineDegrees(c.in), `planner_dropped[${i}]`));
}
process.stdout.write(JSON.stringify({ checked, mismatches: mismatches.slice(0, 20), n_mismatches: mismatches.length }) + "\n");

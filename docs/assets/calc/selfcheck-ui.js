// In-browser check: the served JavaScript recomputes the vectors Python embedded at build.
import { memoryEstimate } from "./memory.js";
import { closedFormRelative, pipelineView, simulate, summary } from "./pipeline.js";

function diff(py, js, path, bad) {
  if (typeof py === "number") {
    if (!(typeof js === "number" && Math.abs(js - py) <= 1e-9 * Math.max(1, Math.abs(py)))) bad.push(path);
  } else if (Array.isArray(py)) py.forEach((x, i) => diff(x, js && js[i], `${path}[${i}]`, bad));
  else if (py && typeof py === "object") for (const k of Object.keys(py)) diff(py[k], js && js[k], `${path}.${k}`, bad);
  else if (py !== js) bad.push(path);
}

export async function mount(root) {
  const src = document.getElementById("calc-vectors");
  const out = document.createElement("p");
  out.setAttribute("role", "status");
  root.append(out);
  if (!src) { out.textContent = "검증 벡터가 이 페이지에 없습니다."; return; }
  const vec = JSON.parse(src.textContent), bad = [];
  vec.memory.forEach((c, i) => diff(c.out, memoryEstimate(c.in), `memory[${i}]`, bad));
  vec.pipeline.forEach((c, i) => {
    const x = c.in;
    const got = summary(simulate(x.schedule, x.p, x.m, x.v, x.t_f, x.t_b, x.t_w, x.t_comm), x.schedule);
    got.closed_relative = closedFormRelative(x.schedule, x.p, x.m, x.v, x.t_comm);
    diff(c.out, got, `pipeline[${i}]`, bad);
  });
  (vec.pipeline_view || []).forEach((c, i) => {
    const x = c.in;
    diff(c.out, pipelineView(x.schedule, x.p, x.m, x.v, x.t_f, x.t_b, x.t_w, x.t_comm).out, `pipeline_view[${i}]`, bad);
  });
  if (vec.planner) {
    const { droppedPipelineDegrees, plan } = await import("./planner.js");
    vec.planner.forEach((c, i) => diff(c.out, plan(c.in), `planner[${i}]`, bad));
    (vec.planner_dropped || []).forEach((c, i) => diff(c.out, droppedPipelineDegrees(c.in), `planner_dropped[${i}]`, bad));
  }
  const n = ["memory", "pipeline", "pipeline_view", "planner", "planner_dropped"].reduce((s, k) => s + (vec[k] ? vec[k].length : 0), 0);
  root.dataset.checked = String(n);
  root.dataset.mismatches = String(bad.length);
  out.className = bad.length ? "calc-bad" : "calc-ok";
  out.textContent = bad.length
    ? `불일치 ${bad.length}건: ${bad.slice(0, 5).join(", ")}`
    : `이 브라우저의 JavaScript 가 Python 벡터 ${n}개를 모두 같은 값으로 계산했습니다.`;
  if (bad.length) console.error("calculator self-check failed", bad);
}

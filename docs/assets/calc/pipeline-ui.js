// The pipeline schedule visualiser (Ch4): Gantt chart drawn client-side from pipeline.js's simulator.
import { closedFormRelative, simulate, summary, SPLIT_BACKWARD } from "./pipeline.js";
import { Form, h, fmt, pct } from "./ui.js";

const NAMES = { naive: "naive (micro-batch 없음)", gpipe: "GPipe", "1f1b": "1F1B (PipeDream-Flush)",
  interleaved: "interleaved 1F1B (Megatron)", looped_bfs: "looped BFS", zb_h1: "ZB-H1", zbv: "ZB-V" };
const SPECS = [
  { key: "schedule", label: "schedule", kind: "select", def: "1f1b", options: Object.entries(NAMES) },
  { key: "p", label: "pipeline 랭크 p", kind: "int", def: 4, min: 1, max: 32 },
  { key: "m", label: "micro-batch m", kind: "int", def: 8, min: 1, max: 128 },
  { key: "v", label: "랭크당 chunk v", kind: "int", def: 2, min: 1, max: 8, help: "interleaved, looped BFS 만 사용 (ZB-V 는 2 고정)" },
  { key: "t_f", label: "T_F (forward)", kind: "num", def: 1, min: 0.001, max: 1000 },
  { key: "t_b", label: "T_B (backward)", kind: "num", def: 1, min: 0.001, max: 1000 },
  { key: "t_w", label: "T_W (weight grad)", kind: "num", def: 1, min: 0, max: 1000, help: "ZB 계열이 아니면 backward 에 합쳐짐" },
  { key: "t_comm", label: "랭크 간 전송 시간", kind: "num", def: 0, min: 0, max: 1000 },
];
const COL = { F: "#4C72B0", B: "#DD8452", W: "#55A868" };

export function mount(root) {
  root.classList.add("calc");
  const out = h("div", { class: "calc-out", role: "status", "aria-live": "polite" });
  const form = new Form(root, root.dataset.prefix || "p", SPECS, render);
  root.append(out);

  function render() {
    const [v, errs] = form.read();
    if (!errs.m && !errs.p && v.schedule === "interleaved" && v.m % v.p)
      errs.m = `interleaved 1F1B 는 m 이 p = ${v.p} 의 배수여야 합니다`;
    if (!errs.m && !errs.p && v.schedule !== "naive" && v.m * v.p * (v.schedule === "zbv" ? 2 : ["interleaved", "looped_bfs"].includes(v.schedule) ? v.v : 1) > 4096)
      errs.m = "그리기에는 너무 큽니다: p·m·v ≤ 4096";
    form.show(errs);
    out.replaceChildren();
    if (Object.keys(errs).length) {
      out.append(h("p", { class: "calc-error", text: "입력을 고치면 결과가 나옵니다: " +
        Object.keys(errs).map(k => SPECS.find(s => s.key === k).label).join(", ") }));
      return;
    }
    const ranks = simulate(v.schedule, v.p, v.m, v.v, v.t_f, v.t_b, v.t_w, v.t_comm), s = summary(ranks, v.schedule);
    const split = SPLIT_BACKWARD.has(v.schedule);
    const tbl = h("table", { class: "calc-table" });
    tbl.append(h("thead", {}, h("tr", {}, ...["rank", "busy", "idle", split ? "최대 in-flight (B 까지 / W 까지)" : "최대 in-flight"].map(t => h("th", { text: t })))));
    const body = h("tbody");
    ranks.forEach((_, r) => body.append(h("tr", { "data-rank": r }, h("td", { text: String(r) }), h("td", { text: fmt(s.busy[r], 3) }),
      h("td", { text: fmt(s.makespan - s.busy[r], 3) }), h("td", { class: "calc-inflight", text: split ? `${s.inflight[r]} / ${s.inflight_w[r]}` : String(s.inflight[r]) }))));
    tbl.append(body);
    out.append(gantt(ranks, s.makespan, v),
      h("dl", { class: "calc-summary" },
        h("dt", { text: "makespan (한 step)" }), h("dd", { "data-out": "makespan", text: fmt(s.makespan, 3) }),
        h("dt", { text: "bubble, 전체 시간 대비 (GPipe 의 정의)" }), h("dd", { "data-out": "bubble_fraction", text: pct(s.bubble_fraction) }),
        h("dt", { text: "bubble, 이상적 시간 대비 (Megatron 의 정의)" }), h("dd", { "data-out": "bubble_relative", text: pct(s.bubble_relative) })),
      tbl,
      h("p", { class: "calc-note", "data-out": "inflight_stage",
        text: `stage 별 최대 in-flight micro-batch (stage 0 부터, ${s.inflight_stage.length}개): ${s.inflight_stage.join(", ")}` }),
      ...closedLine(v, s),
      h("p", { class: "calc-note", text: "in-flight: 한 랭크가 forward 를 시작했지만 backward 가 끝나지 않은 (micro-batch, chunk) 의 최대 개수. " +
        "시간 단위는 입력한 T 값과 같습니다. 시뮬레이터는 Ch4 의 pipeline_sim.simulate 와 같은 규칙입니다." }));
  }
  render();
}

function gantt(ranks, makespan, v) {
  const ns = "http://www.w3.org/2000/svg", left = 52, row = 22, W = 760, H = ranks.length * row + 24;
  const sx = (W - left - 8) / makespan;
  const svg = document.createElementNS(ns, "svg");
  const el = (tag, attrs, text) => { const e = document.createElementNS(ns, tag);
    for (const [k, val] of Object.entries(attrs)) e.setAttribute(k, val); if (text !== undefined) e.textContent = text; return e; };
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${NAMES[v.schedule]} schedule, p = ${v.p}, m = ${v.m}: 랭크별 Gantt chart, makespan ${fmt(makespan, 3)}`);
  const defs = el("defs", {});
  const pat = el("pattern", { id: "calc-hatch", width: 4, height: 4, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
  pat.append(el("rect", { width: 2, height: 4, fill: "rgba(255,255,255,.45)" }));
  defs.append(pat);
  svg.append(defs);
  ranks.forEach((acts, r) => {
    const y = r * row + 2;
    svg.append(el("text", { x: 4, y: y + row / 2 + 2, fill: "currentColor", "font-size": 11 }, `rank ${r}`));
    for (const a of acts) {
      const x = left + a.start * sx, w = (a.end - a.start) * sx;
      const g = el("g", { class: "calc-act", "data-op": a.op, "data-rank": r });
      const t = el("title", {}, `${a.op} micro-batch ${a.mb}, chunk ${a.chunk} (stage ${a.stage}): ${fmt(a.start, 3)}–${fmt(a.end, 3)}`);
      g.append(t, el("rect", { x, y, width: Math.max(w - 0.5, 0.5), height: row - 4, fill: COL[a.op] }));
      if (a.chunk > 0) g.append(el("rect", { x, y, width: Math.max(w - 0.5, 0.5), height: row - 4, fill: "url(#calc-hatch)" }));
      if (w > 12) g.append(el("text", { x: x + w / 2, y: y + row / 2 + 1, fill: "#fff", "font-size": 10, "text-anchor": "middle" }, String(a.mb)));
      svg.append(g);
    }
  });
  svg.append(el("line", { x1: left, x2: W - 8, y1: H - 18, y2: H - 18, stroke: "currentColor", "stroke-width": 0.5 }));
  svg.append(el("text", { x: W - 8, y: H - 4, fill: "currentColor", "font-size": 10, "text-anchor": "end" }, `t = ${fmt(makespan, 3)}`));
  svg.append(el("text", { x: left, y: H - 4, fill: "currentColor", "font-size": 10 }, "0"));
  const legend = h("div", { class: "calc-legend" }, ...[["F", "forward"], ["B", "backward"], ["W", "weight grad"]]
    .map(([k, lab]) => h("span", {}, h("i", { style: `background:${COL[k]}` }), lab)), h("span", { text: "빗금: 두 번째 이후 chunk · 숫자: micro-batch" }));
  return h("figure", { class: "calc-figure calc-gantt" }, svg, legend);
}

function closedLine(v, s) {
  const rel = closedFormRelative(v.schedule, v.p, v.m, v.v, v.t_comm);
  if (rel === null) return [];
  const vv = v.schedule === "interleaved" ? "v·" : "";
  return [h("p", { class: "calc-note", "data-out": "closed_relative", "data-value": String(rel),
    text: `Ch4 의 닫힌 식 (전송 시간 0): 이상적 시간 대비 (p−1)/(${vv}m) = ${pct(rel)}, 전체 시간 대비 ${pct(rel / (1 + rel))}; ` +
      `시뮬레이션과의 차이 ${pct(Math.abs(rel - s.bubble_relative))}.` })];
}

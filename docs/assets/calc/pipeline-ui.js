// The pipeline schedule visualiser (Ch4): Gantt chart drawn client-side from pipeline.js's simulator.
import { pipelineView, SPLIT_BACKWARD } from "./pipeline.js";
import { Form, errorLine, h, fmt, pct, scrollBox } from "./ui.js";

const NAMES = { naive: "naive (micro-batch 없음)", gpipe: "GPipe", "1f1b": "1F1B (PipeDream-Flush)",
  interleaved: "interleaved 1F1B (Megatron)", looped_bfs: "looped BFS", zb_h1: "ZB-H1", zbv: "ZB-V" };
// Times are per micro-batch through one rank's L/p layers (the unit of 1F1B), whatever the schedule: a rank with
// v chunks runs each chunk in 1/v of them (calc.py:pipeline_view), so equal inputs compare the same model.
const SPECS = [
  { key: "schedule", label: "schedule", kind: "select", def: "1f1b", options: Object.entries(NAMES) },
  { key: "p", label: "pipeline rank p", kind: "int", def: 4, min: 1, max: 32 },
  { key: "m", label: "micro-batch m", kind: "int", def: 8, min: 1, max: 128 },
  { key: "v", label: "rank 당 chunk v", kind: "int", def: 2, min: 1, max: 8, help: "interleaved, looped BFS 만 사용 (ZB-V 는 2 고정)" },
  { key: "t_f", label: "forward 시간 T_F", kind: "num", def: 1, min: 0.001, max: 1000,
    help: "micro-batch 하나가 한 rank 의 layer (L/p 개) 를 지나는 forward 시간" },
  { key: "t_bwd", label: "backward 시간 T_B (input-grad + weight-grad 합)", kind: "num", def: 2, min: 0.001, max: 1000,
    help: "같은 layer 의 backward 전체. 흔히 forward 의 2 배" },
  { key: "t_w", label: "그중 weight-grad 시간 T_W (ZB 계열만 분리)", kind: "num", def: 1, min: 0, max: 1000,
    help: "ZB-H1, ZB-V 는 backward 를 input-grad (T_B − T_W) 와 weight-grad (T_W) 로 나눠 배치합니다. 다른 schedule 은 T_B 를 한 덩어리로 씁니다" },
  { key: "t_comm", label: "rank 간 전송 시간", kind: "num", def: 0, min: 0, max: 1000 },
];
const COL = { F: "#4C72B0", B: "#DD8452", W: "#55A868" };

export function mount(root) {
  root.classList.add("calc");
  const out = h("div", { class: "calc-out", role: "status", "aria-live": "polite" });
  const form = new Form(root, root.dataset.prefix || "p", SPECS, render);
  root.append(out);

  function render() {
    const [v, errs] = form.read();
    const split = !errs.schedule && SPLIT_BACKWARD.has(v.schedule);
    if (!errs.m && !errs.p && v.schedule === "interleaved" && v.m % v.p)
      errs.m = `interleaved 1F1B 는 m 이 p = ${v.p} 의 배수여야 합니다`;
    if (!errs.m && !errs.p && v.schedule !== "naive" && v.m * v.p * (v.schedule === "zbv" ? 2 : ["interleaved", "looped_bfs"].includes(v.schedule) ? v.v : 1) > 4096)
      errs.m = "그리기에는 너무 큽니다: p·m·v ≤ 4096";
    if (split && !errs.t_w && !errs.t_bwd && v.t_w >= v.t_bwd)
      errs.t_w = `T_W 는 T_B = ${v.t_bwd} 보다 작아야 합니다 (input-grad 시간 T_B − T_W > 0)`;
    form.show(errs);
    out.replaceChildren();
    if (Object.keys(errs).length) { out.append(errorLine(SPECS, errs)); return; }
    const { ranks, out: s } = pipelineView(v.schedule, v.p, v.m, v.v, v.t_f, v.t_bwd, v.t_w, v.t_comm);
    const tbl = h("table", { class: "calc-table" });
    tbl.append(h("thead", {}, h("tr", {}, ...["rank", "busy", "idle", split ? "최대 in-flight (B 까지 / W 까지)" : "최대 in-flight"].map(t => h("th", { text: t })))));
    const body = h("tbody");
    ranks.forEach((_, r) => body.append(h("tr", { "data-rank": r }, h("td", { text: String(r) }), h("td", { text: fmt(s.busy[r], 3) }),
      h("td", { text: fmt(s.makespan - s.busy[r], 3) }), h("td", { class: "calc-inflight", text: split ? `${s.inflight[r]} / ${s.inflight_w[r]}` : String(s.inflight[r]) }))));
    tbl.append(body);
    const [cf, cb, cw] = s.chunk_t;
    const unit = s.chunks > 1
      ? `한 rank 의 layer 를 chunk ${s.chunks} 개로 나누므로 chunk 하나는 forward ${fmt(cf, 3)}, ` +
        (split ? `input-grad ${fmt(cb, 3)}, weight-grad ${fmt(cw, 3)}` : `backward ${fmt(cb, 3)}`) + ` (입력한 시간의 1/${s.chunks}). `
      : split ? `backward T_B = ${fmt(v.t_bwd, 3)} 를 input-grad ${fmt(cb, 3)} 와 weight-grad ${fmt(cw, 3)} 로 나눠 배치합니다. `
        : `backward 는 T_B = ${fmt(v.t_bwd, 3)} 한 덩어리 (weight-grad 를 나누지 않음). `;
    out.append(gantt(ranks, s.makespan, v),
      h("p", { class: "calc-note", "data-out": "units", text: "시간 단위: micro-batch 하나가 한 rank 의 layer (L/p 개) 를 지나는 시간 (1F1B 의 stage 단위). " + unit }),
      h("dl", { class: "calc-summary" },
        h("dt", { text: "makespan (한 step)" }), h("dd", { "data-out": "makespan", text: fmt(s.makespan, 3) }),
        h("dt", { text: "bubble, 전체 시간 대비 (GPipe 의 정의)" }), h("dd", { "data-out": "bubble_fraction", text: pct(s.bubble_fraction) }),
        h("dt", { text: "bubble, 이상적 시간 대비 (Megatron 의 정의)" }), h("dd", { "data-out": "bubble_relative", text: pct(s.bubble_relative) })),
      scrollBox(tbl),
      h("p", { class: "calc-note", "data-out": "inflight_stage",
        text: `stage 별 최대 in-flight micro-batch (stage 0 부터, ${s.inflight_stage.length}개): ${s.inflight_stage.join(", ")}` }),
      ...closedLine(v, s),
      h("p", { class: "calc-note", text: "in-flight: 한 rank 가 forward 를 시작했지만 backward 가 끝나지 않은 (micro-batch, chunk) 의 최대 개수. " +
        "시뮬레이터는 Ch4 의 pipeline_sim.simulate 와 같은 규칙입니다." }));
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
  svg.setAttribute("aria-label", `${NAMES[v.schedule]} schedule, p = ${v.p}, m = ${v.m}: rank 별 Gantt chart, makespan ${fmt(makespan, 3)}`);
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
  const rel = s.closed_relative;
  if (rel === null) return [];
  const vv = v.schedule === "interleaved" ? "v·" : "";
  return [h("p", { class: "calc-note", "data-out": "closed_relative", "data-value": String(rel),
    text: `Ch4 의 닫힌 식 (전송 시간 0): 이상적 시간 대비 (p−1)/(${vv}m) = ${pct(rel)}, 전체 시간 대비 ${pct(rel / (1 + rel))}; ` +
      `시뮬레이션과의 차이 ${pct(Math.abs(rel - s.bubble_relative))}.` })];
}

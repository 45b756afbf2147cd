// The memory calculator widget (Ch5 model states + Ch6 activations), logic in memory.js.
import { GB, GIB, memoryEstimate } from "./memory.js";
import { Form, h, fmt, fmtBytes } from "./ui.js";

const PRESETS = {  // model shapes: GPT-3 175B (Brown et al. 2020 Table 2.1), Llama-2 7B / 70B (Touvron et al. 2023)
  gpt3: { psi: "175e9", layers: 96, h: 12288, a: 96, s: 2048 },
  llama7b: { psi: "7e9", layers: 32, h: 4096, a: 32, s: 4096 },
  llama70b: { psi: "70e9", layers: 80, h: 8192, a: 64, s: 4096 },
};
const SPECS = [
  { key: "psi", label: "파라미터 수 ψ", kind: "num", def: "175e9", min: 1, help: "7e9, 70B 처럼 입력" },
  { key: "layers", label: "레이어 수 L", kind: "int", def: 96, min: 1, max: 100000 },
  { key: "h", label: "hidden h", kind: "int", def: 12288, min: 1 },
  { key: "a", label: "attention head 수 a", kind: "int", def: 96, min: 1 },
  { key: "s", label: "시퀀스 길이 s", kind: "int", def: 2048, min: 1 },
  { key: "b", label: "micro-batch b", kind: "int", def: 1, min: 1 },
  { key: "n", label: "data-parallel 랭크 수 N", kind: "int", def: 64, min: 1 },
  { key: "stage", label: "ZeRO stage / FSDP", kind: "select", numeric: true, def: 1, options: [
    ["0", "0 — DDP (공유 없음)"], ["1", "1 — optimizer state 분할"], ["2", "2 — + gradient (FSDP SHARD_GRAD_OP)"],
    ["3", "3 — + parameter (FSDP FULL_SHARD)"]] },
  { key: "k", label: "optimizer state K (B/파라미터)", kind: "num", def: 12, min: 0, max: 1000, help: "mixed-precision Adam: 12" },
  { key: "t", label: "tensor-parallel t", kind: "int", def: 8, min: 1, max: 1024 },
  { key: "sp", label: "sequence parallelism", kind: "check", def: true },
  { key: "recompute", label: "재계산", kind: "select", def: "selective", options: [
    ["none", "없음"], ["selective", "selective (attention core)"], ["full", "full (레이어 입력만 저장)"]] },
  { key: "act_bytes", label: "activation 정밀도", kind: "select", numeric: true, def: 2, options: [["2", "16-bit (2 B)"], ["4", "fp32 (4 B)"]] },
  { key: "mask_bytes", label: "dropout mask", kind: "select", numeric: true, def: 1, options: [["1", "1 B (CUDA bool)"], ["2", "2 B (CPU, bf16)"]] },
  { key: "capacity_gib", label: "GPU 메모리 (GiB)", kind: "num", def: 80, min: 0.001 },
];
const PARTS = [["params", "파라미터", "#4C72B0"], ["grads", "그래디언트", "#DD8452"],
  ["optimizer", "optimizer state", "#55A868"], ["activations", "activation", "#C44E52"]];

export function mount(root) {
  root.classList.add("calc");
  const presetSel = h("select", { id: "calc-mem-preset-" + Math.random().toString(36).slice(2, 8) });
  for (const [v, lab] of [["", "모델 형태 선택…"], ["gpt3", "GPT-3 175B"], ["llama7b", "Llama-2 7B 형태"], ["llama70b", "Llama-2 70B 형태"]])
    presetSel.append(h("option", { value: v, text: lab }));
  root.append(h("div", { class: "calc-field calc-preset" }, h("label", { for: presetSel.id, text: "프리셋" }), presetSel));
  const out = h("div", { class: "calc-out", role: "status", "aria-live": "polite" });
  const form = new Form(root, root.dataset.prefix || "m", SPECS, render);
  presetSel.addEventListener("change", () => { if (PRESETS[presetSel.value]) form.set(PRESETS[presetSel.value]); });
  root.append(out);

  function render() {
    const [v, errs] = form.read();
    if (!errs.t && !errs.a && v.a % v.t) errs.t = `t 는 head 수 a = ${v.a} 의 약수여야 합니다`;
    if (!errs.h && !errs.a && v.h % v.a) errs.a = `a 는 hidden h = ${v.h} 의 약수여야 합니다`;
    form.show(errs);
    out.replaceChildren();
    if (Object.keys(errs).length) {
      out.append(h("p", { class: "calc-error", text: "입력을 고치면 결과가 나옵니다: " +
        Object.keys(errs).map(k => SPECS.find(s => s.key === k).label).join(", ") }));
      return;
    }
    const r = memoryEstimate(v);
    const tbl = h("table", { class: "calc-table" });
    tbl.append(h("thead", {}, h("tr", {}, ...["항목", "bytes / GPU", "GB", "GiB"].map(t => h("th", { text: t })))));
    const body = h("tbody");
    for (const [key, lab] of [...PARTS, ["total", "합계"]])
      body.append(h("tr", { "data-part": key }, h("td", { text: lab }), h("td", { text: fmtBytes(r[key]) }),
        h("td", { text: fmt(r[key] / GB) }), h("td", { text: fmt(r[key] / GIB) })));
    tbl.append(body);
    const verdict = r.fits
      ? `${fmt(v.capacity_gib, 0)} GiB 에 들어갑니다 (여유 ${fmt(v.capacity_gib - r.total_gib)} GiB)`
      : `${fmt(v.capacity_gib, 0)} GiB 에 들어가지 않습니다 (${fmt(r.total_gib - v.capacity_gib)} GiB 초과)`;
    out.append(h("p", { class: "calc-verdict " + (r.fits ? "calc-ok" : "calc-bad"), "data-fits": String(r.fits), text: verdict }),
      bar(r, v.capacity_gib * GIB), tbl,
      h("p", { class: "calc-note", text: `모델 상태: ψ/t = ${fmt(v.psi / v.t / 1e9, 3)}B 파라미터를 N = ${v.n} 랭크가 ZeRO stage ${v.stage} 로 나눔. ` +
        `activation: L = ${v.layers} 레이어 × 한 micro-batch (Korthikanti 2022 항별 합; 임베딩·출력층, ZeRO-3 의 일시적 all-gather buffer, allocator 여유분은 빠짐). GB = 10⁹ B, GiB = 2³⁰ B.` }));
  }
  render();
}

function bar(r, cap) {
  const W = 600, H = 56, max = Math.max(r.total, cap), ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "calc-bar");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "GPU 당 메모리 막대: " + PARTS.map(([k, lab]) => `${lab} ${fmt(r[k] / GIB)} GiB`).join(", ") + `, 용량 ${fmt(cap / GIB)} GiB`);
  let x = 0;
  const rect = (x, w, fill, y = 4, hh = 28) => { const e = document.createElementNS(ns, "rect");
    for (const [k, val] of Object.entries({ x, y, width: Math.max(w, 0), height: hh, fill })) e.setAttribute(k, val); return e; };
  for (const [k, , col] of PARTS) { const w = r[k] / max * W; const e = rect(x, w, col); e.dataset.part = k; svg.append(e); x += w; }
  const cx = Math.min(cap / max * W, W - 1);
  const line = rect(cx - 1, 2, "currentColor", 0, 36); line.setAttribute("class", "calc-cap"); svg.append(line);
  const t = document.createElementNS(ns, "text");
  t.setAttribute("x", Math.min(Math.max(cx, 60), W - 60)); t.setAttribute("y", 50); t.setAttribute("text-anchor", "middle");
  t.setAttribute("fill", "currentColor"); t.setAttribute("font-size", "12"); t.textContent = `용량 ${fmt(cap / GIB, 0)} GiB`;
  svg.append(t);
  const legend = h("div", { class: "calc-legend" }, ...PARTS.map(([, lab, col]) => h("span", {}, h("i", { style: `background:${col}` }), lab)));
  return h("figure", { class: "calc-figure" }, svg, legend);
}

// The memory calculator widget (Ch5 model states + Ch6 activations + Ch4 pipeline ranks), logic in memory.js.
import { GB, GIB, gptShape, memoryEstimate } from "./memory.js";
import { MODELS, MOE_NOTE } from "./presets.js";
import { Form, errorLine, h, fmt, fmtBytes, scrollBox } from "./ui.js";

const G_MODEL = "모델", G_PAR = "병렬화와 schedule", G_PREC = "정밀도와 재계산", G_GPU = "GPU";
const SPECS = [
  { key: "psi", label: "parameter 수 ψ", kind: "num", def: "175e9", min: 1e3, max: 1e14, help: "7e9, 70B 처럼 입력 (embedding 포함)", group: G_MODEL },
  { key: "layers", label: "layer 수 L", kind: "int", def: 96, min: 1, max: 10000, group: G_MODEL },
  { key: "h", label: "hidden h", kind: "int", def: 12288, min: 1, max: 1048576, group: G_MODEL },
  { key: "a", label: "attention head 수 a", kind: "int", def: 96, min: 1, max: 65536, group: G_MODEL },
  { key: "kv_heads", label: "KV head 수 (GQA)", kind: "int", def: 96, min: 1, max: 65536, help: "a 와 같으면 multi-head attention", group: G_MODEL },
  { key: "ffn", label: "FFN 폭 f", kind: "int", def: 49152, min: 1, max: 4194304, help: "GPT: 4h", group: G_MODEL },
  { key: "swiglu", label: "FFN 종류", kind: "select", numeric: true, def: 0, options: [["0", "GELU (행렬 2 개)"], ["1", "SwiGLU (행렬 3 개)"]], group: G_MODEL },
  { key: "dropout", label: "dropout mask 저장", kind: "check", def: true, group: G_MODEL },
  { key: "vocab", label: "어휘 크기 V (0: embedding 제외)", kind: "int", def: 0, min: 0, max: 10000000, group: G_MODEL },
  { key: "s", label: "시퀀스 길이 s", kind: "int", def: 2048, min: 1, max: 10000000, group: G_MODEL },
  { key: "b", label: "micro-batch b", kind: "int", def: 1, min: 1, max: 65536, group: G_PAR },
  { key: "t", label: "tensor-parallel t", kind: "int", def: 8, min: 1, max: 1024, group: G_PAR },
  { key: "sp", label: "sequence parallelism", kind: "check", def: true, group: G_PAR },
  { key: "p", label: "pipeline-parallel p", kind: "int", def: 1, min: 1, max: 1024, help: "rank 마다 L/p layer", group: G_PAR },
  { key: "schedule", label: "pipeline schedule", kind: "select", def: "1f1b", group: G_PAR, options: [
    ["1f1b", "1F1B: rank r 가 min(p − r, m) micro-batch"], ["interleaved", "interleaved 1F1B (v chunk)"], ["gpipe", "GPipe: m micro-batch 모두"]] },
  { key: "m", label: "step 당 micro-batch m", kind: "int", def: 8, min: 1, max: 100000, group: G_PAR },
  { key: "v", label: "rank 당 chunk v (interleaved)", kind: "int", def: 2, min: 1, max: 64, group: G_PAR },
  { key: "n", label: "data-parallel rank 수 N", kind: "int", def: 64, min: 1, max: 1000000, group: G_PAR },
  { key: "stage", label: "ZeRO stage / FSDP", kind: "select", numeric: true, def: 1, group: G_PAR, options: [
    ["0", "0 — DDP (공유 없음)"], ["1", "1 — optimizer state 분할"], ["2", "2 — + gradient (FSDP SHARD_GRAD_OP)"],
    ["3", "3 — + parameter (FSDP FULL_SHARD)"]] },
  { key: "grad_bytes", label: "gradient 정밀도", kind: "select", numeric: true, def: 2, group: G_PREC, options: [
    ["2", "16-bit (2 B)"], ["4", "fp32 (4 B): Megatron distributed optimizer"]],
    help: "Megatron 의 distributed optimizer = ZeRO stage 1 + fp32 main gradient" },
  { key: "k", label: "optimizer state K (B/parameter)", kind: "num", def: 12, min: 0, max: 64, help: "mixed-precision Adam: 12", group: G_PREC },
  { key: "recompute", label: "재계산", kind: "select", def: "selective", group: G_PREC, options: [
    ["none", "없음"], ["selective", "selective (attention core)"], ["full", "full (layer 입력만 저장)"]] },
  { key: "act_bytes", label: "activation 정밀도", kind: "select", numeric: true, def: 2, options: [["2", "16-bit (2 B)"], ["4", "fp32 (4 B)"]], group: G_PREC },
  { key: "mask_bytes", label: "dropout mask", kind: "select", numeric: true, def: 1, options: [["1", "1 B (CUDA bool)"], ["2", "2 B (CPU, bf16)"]], group: G_PREC },
  { key: "with_activations", label: "activation 포함 (끄면 모델 상태만)", kind: "check", def: true, group: G_PREC },
  { key: "capacity_gib", label: "GPU 메모리 (GiB)", kind: "num", def: 80, min: 0.001, max: 100000, help: "GiB = 2³⁰ B. H100 \"80GB\" 는 약 80 GiB", group: G_GPU },
];
const PARTS = [["params", "parameter", "#4C72B0"], ["grads", "gradient", "#DD8452"],
  ["optimizer", "optimizer state", "#55A868"], ["activations", "activation", "#C44E52"], ["logits", "logits (fp32)", "#8172B3"]];
const MODEL_KEYS = ["psi", "layers", "h", "a", "kv_heads", "ffn", "swiglu", "dropout", "vocab", "s"];

export function mount(root) {
  root.classList.add("calc");
  const presetSel = h("select", { id: "calc-mem-preset-" + Math.random().toString(36).slice(2, 8), name: "preset" });
  presetSel.append(h("option", { value: "", text: "모델 형태 선택…" }));
  for (const key of ["gpt3", "llama3_8b", "llama3_70b", "llama3_405b"]) presetSel.append(h("option", { value: key, text: MODELS[key].label }));
  presetSel.append(h("option", { value: "moe", text: "Mixtral 8x7B (MoE): 지원하지 않음", disabled: "" }));
  root.append(h("div", { class: "calc-field calc-preset" }, h("label", { for: presetSel.id, text: "프리셋" }), presetSel),
    h("p", { class: "calc-note", text: MOE_NOTE }));
  const out = h("div", { class: "calc-out", role: "status", "aria-live": "polite" });
  const form = new Form(root, root.dataset.prefix || "m", SPECS, render);
  presetSel.addEventListener("change", () => {
    const mo = MODELS[presetSel.value];
    if (mo) form.set(Object.fromEntries(MODEL_KEYS.map(k => [k, mo[k]])));
  });
  root.append(out);

  function render() {
    const [v, errs] = form.read();
    const ok = (...ks) => ks.every(k => !errs[k]);
    if (ok("t", "a") && v.a % v.t) errs.t = `t 는 head 수 a = ${v.a} 의 약수여야 합니다`;
    if (ok("h", "a") && v.h % v.a) errs.a = `a 는 hidden h = ${v.h} 의 약수여야 합니다`;
    if (ok("a", "kv_heads") && v.a % v.kv_heads) errs.kv_heads = `KV head 수는 a = ${v.a} 의 약수여야 합니다`;
    if (ok("p", "layers") && v.layers % v.p) errs.p = `p 는 L = ${v.layers} 의 약수여야 합니다 (rank 마다 L/p layer)`;
    if (ok("p", "layers", "v", "schedule") && !errs.p && v.schedule === "interleaved" && v.layers % (v.p * v.v))
      errs.v = `interleaved 는 p·v = ${v.p * v.v} 가 L = ${v.layers} 의 약수여야 합니다`;
    if (ok("p", "m", "schedule") && v.schedule === "interleaved" && v.m % v.p)
      errs.m = `interleaved 1F1B 는 m 이 p = ${v.p} 의 배수여야 합니다`;
    if (ok("psi", "vocab", "h") && 2 * v.vocab * v.h >= v.psi)
      errs.vocab = `embedding 과 LM head 2·V·h = ${fmt(2 * v.vocab * v.h / 1e9, 3)}B 가 ψ 보다 큽니다`;
    const shaped = ok("h", "a", "kv_heads", "ffn") && !gptShape(v.h, v.a, v.kv_heads, v.ffn, !!v.swiglu, v.dropout);
    if (shaped) {  // Ch7-01's GQA/SwiGLU layer is modelled with SP, 16-bit activations and 1-byte masks only
      const why = "GQA·SwiGLU 모양 (Ch7-01 의 식) 은 ";
      if (v.t > 1 && !v.sp) errs.sp = why + "t > 1 이면 sequence parallelism 을 켠 경우만 다룹니다";
      if (v.act_bytes !== 2) errs.act_bytes = why + "16-bit activation 만 다룹니다";
      if (v.mask_bytes !== 1) errs.mask_bytes = why + "1 B mask 만 다룹니다";
    }
    form.show(errs);
    out.replaceChildren();
    if (Object.keys(errs).length) { out.append(errorLine(SPECS, errs)); return; }
    const r = memoryEstimate({ ...v, swiglu: !!v.swiglu });
    const cap = v.capacity_gib;
    const where = v.p === 1 ? "" : `가장 많이 쓰는 rank ${r.rank} (${r.rank === 0 ? "첫" : r.rank === v.p - 1 ? "마지막" : "중간"} stage) 기준: `;
    const what = v.with_activations ? "" : "모델 상태만 (activation 제외): ";
    const verdict = r.fits
      ? `${where}${what}${fmt(cap, 0)} GiB 에 들어갑니다 (여유 ${fmt(cap - r.total_gib)} GiB)`
      : `${where}${what}${fmt(cap, 0)} GiB 에 들어가지 않습니다 (${fmt(r.total_gib - cap)} GiB 초과)`;
    const tbl = h("table", { class: "calc-table" });
    tbl.append(h("thead", {}, h("tr", {}, ...["항목", "bytes / GPU", "GB", "GiB"].map(t => h("th", { text: t })))));
    const body = h("tbody");
    const rows = [...PARTS.slice(0, 3), ["model_states", "모델 상태 소계"], PARTS[3]];
    if (v.vocab > 0) rows.push(PARTS[4]);
    rows.push(["total", "합계"]);
    for (const [key, lab] of rows)
      body.append(h("tr", { "data-part": key, class: key === "model_states" || key === "total" ? "calc-sum" : undefined },
        h("td", { text: lab }), h("td", { text: fmtBytes(r[key]) }), h("td", { text: fmt(r[key] / GB) }), h("td", { text: fmt(r[key] / GIB) })));
    tbl.append(body);
    const perLayer = h("p", { class: "calc-note", "data-out": "per_layer", "data-value": String(r.per_layer),
      text: `activation, layer 하나 × micro-batch 하나: ${fmtBytes(r.per_layer)} B = ${fmt(r.per_layer / GIB, 3)} GiB. ` +
        `이 rank 는 layer ${fmt(r.layers_per_rank, 0)} 개의 activation 을 micro-batch ${fmt(r.inflight, Number.isInteger(r.inflight) ? 0 : 3)} 개 분량 들고 있습니다` +
        (v.schedule === "interleaved" ? ` (chunk ${fmt(r.inflight * v.v, 0)} 개 × 1/v; rank 0 은 p(1 + (p−1)/(pv)) = ${fmt(v.p * (1 + (v.p - 1) / (v.p * v.v)), 3)}, Ch4-04)` : "") +
        (v.with_activations ? "." : " (activation 포함을 끄면 합계에서 빠짐).") +
        (gptShape(v.h, v.a, v.kv_heads, v.ffn, !!v.swiglu, v.dropout) ? " layer 식: Korthikanti 2022 항별 합 (Ch6)." : " layer 식: GQA·SwiGLU 모양의 항 (Ch7-01).") });
    const extras = [perLayer];
    if (v.p > 1) {
      const show = r.rank_totals.map((x, i) => [i, x]).filter(([i]) => v.p <= 12 || i < 4 || i >= v.p - 2);
      extras.push(h("p", { class: "calc-note", "data-out": "rank_totals",
        text: "rank 별 합계 (GiB): " + show.map(([i, x], j) => (j && i - show[j - 1][0] > 1 ? "… " : "") + `${i}: ${fmt(x / GIB)}`).join(" · ") +
          ". 첫 rank 는 embedding 과 가장 많은 in-flight micro-batch, 마지막 rank 는 LM head 와 logits 를 가집니다." }));
    }
    out.append(h("p", { class: "calc-verdict " + (r.fits ? "calc-ok" : "calc-bad"), "data-fits": String(r.fits), "data-rank": String(r.rank), text: verdict }),
      bar(r, cap * GIB), scrollBox(tbl), ...extras,
      h("p", { class: "calc-note", text: `모델 상태: rank 하나의 parameter (ψ − 2Vh)/p + embedding (첫 rank) 또는 LM head (마지막 rank), 그 1/t 을 ` +
        `N = ${v.n} rank 가 ZeRO stage ${v.stage} 로 나눔. embedding 과 LM head 는 따로 (tie 하지 않은) 셉니다. ZeRO-3 의 일시적 all-gather buffer, ` +
        "NCCL buffer, allocator 여유분은 빠져 있으므로 \"들어갑니다\" 는 그 여유를 따로 확인해야 합니다. 용량과 판정은 GiB (2³⁰ B), GB = 10⁹ B." }));
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

// The 3D layout planner widget (Ch7): ranked d×t×p factorisations, logic in planner.js.
import { droppedPipelineDegrees, plan } from "./planner.js";
import { MODELS, MOE_NOTE } from "./presets.js";
import { Form, errorLine, h, fmt, pct, scrollBox } from "./ui.js";

// Defaults: Llama-2-70B's shape (GQA 8 KV heads, SwiGLU 28672, V 32000, no dropout) on 8 nodes × 8 H100
// (planner_3d.py's presets LLAMA70B, H100_64, BATCH_4M, and Assumptions()'s defaults). Capacity in GiB, as in
// every calculator: H100_64's 72e9 B budget is 67.06 GiB (80 GB card less ~10 %, Ch7-01's assumption).
const GM = "모델", GC = "클러스터", GB_ = "batch 와 가정";
const SPECS = [
  { key: "psi", label: "parameter 수 ψ", kind: "num", def: "70e9", min: 1e3, max: 1e14, group: GM, help: "표시용: 메모리와 FLOPs 는 모양에서 셉니다" },
  { key: "layers", label: "layer 수 L", kind: "int", def: 80, min: 1, max: 10000, group: GM },
  { key: "hidden", label: "hidden h", kind: "int", def: 8192, min: 1, max: 1048576, group: GM },
  { key: "heads", label: "head 수 a", kind: "int", def: 64, min: 1, max: 65536, group: GM },
  { key: "seq", label: "시퀀스 길이 s", kind: "int", def: 4096, min: 1, max: 10000000, group: GM },
  { key: "ffn", label: "FFN 폭 f", kind: "int", def: 28672, min: 1, max: 4194304, group: GM },
  { key: "kv_heads", label: "KV head 수 (GQA)", kind: "int", def: 8, min: 1, max: 65536, group: GM },
  { key: "vocab", label: "어휘 크기 V", kind: "int", def: 32000, min: 0, max: 10000000, group: GM },
  { key: "swiglu", label: "FFN", kind: "select", numeric: true, def: 1, options: [["1", "SwiGLU (행렬 3 개)"], ["0", "GELU (행렬 2 개)"]], group: GM },
  { key: "dropout", label: "dropout", kind: "select", numeric: true, def: 0, options: [["0", "없음"], ["1", "있음"]], group: GM },
  { key: "gpus", label: "GPU 수 N", kind: "int", def: 64, min: 1, max: 65536, group: GC },
  { key: "gpus_per_node", label: "노드당 GPU", kind: "int", def: 8, min: 1, max: 1024, group: GC },
  { key: "mem_gib", label: "GPU 당 가용 메모리 (GiB)", kind: "num", def: 67.06, min: 0.001, max: 100000, group: GC,
    help: "GiB = 2³⁰ B. 기본값 67.06 GiB = 72 GB: 80 GB 카드에서 CUDA context, NCCL buffer, 단편화 몫 ~10 % 를 뺀 Ch7-01 의 가정" },
  { key: "intra_gbs", label: "노드 내 대역폭 (GB/s, 한 방향)", kind: "num", def: 450, min: 0.001, max: 1e6, group: GC },
  { key: "inter_gbs", label: "노드 간 대역폭 (GB/s, GPU 당 한 방향)", kind: "num", def: 50, min: 0.001, max: 1e6, group: GC },
  { key: "tflops", label: "peak 16-bit TFLOP/s", kind: "num", def: 989, min: 0.001, max: 1e6, group: GC },
  { key: "mfu", label: "MFU", kind: "num", def: 0.4, min: 0.001, max: 1, group: GC },
  { key: "global_batch", label: "global batch B (sequence)", kind: "int", def: 1024, min: 1, max: 10000000, group: GB_ },
  { key: "micro_batch", label: "micro-batch b", kind: "int", def: 1, min: 1, max: 65536, group: GB_ },
  { key: "interleave", label: "interleave v (model chunk)", kind: "int", def: 1, min: 1, max: 64, group: GB_ },
  { key: "uneven", label: "p ∤ L 허용 (stage 당 ⌈L/p⌉ layer)", kind: "check", def: false, group: GB_ },
  { key: "tp_overlap", label: "TP 통신이 계산에 숨는 비율", kind: "num", def: 0, min: 0, max: 1, group: GB_ },
  { key: "grad_bytes", label: "gradient bytes", kind: "select", numeric: true, def: 4, group: GB_,
    options: [["4", "4: fp32 (Megatron distributed optimizer)"], ["2", "2: 16-bit"]] },
  { key: "zero_stage", label: "ZeRO stage", kind: "select", numeric: true, def: 1, options: [["0", "0"], ["1", "1"], ["2", "2"], ["3", "3"]], group: GB_ },
  { key: "recompute", label: "재계산", kind: "select", def: "selective", options: [["none", "없음"], ["selective", "selective"], ["full", "full"]], group: GB_ },
];
const GIB = 2 ** 30;
const REASONS = {
  p_layers: (v, uneven) => uneven ? `p > L = ${v.layers}` : `L = ${v.layers} 을 나누지 않음`,
  t_max: v => `t 가 노드당 GPU ${v.gpus_per_node} 를 넘는 배치만 남음`,
  t_heads: v => `가능한 t 가 head 수 a = ${v.heads} 를 나누지 않음`,
  t_kv: v => `가능한 t 와 KV head 수 ${v.kv_heads} 가 서로 나누지 않음`,
  batch: v => `d·b 가 B = ${v.global_batch} 를 나누지 않음`,
  interleave_m: () => "interleave: m 이 p 의 배수가 아님",
  interleave_layers: v => `interleave: v·p > L = ${v.layers}`,
};
// [[reason text, [p, …]], …]: the dropped degrees that share a reason, named once.
function groupByReason(dropped, v) {
  const groups = new Map();
  for (const x of dropped) {
    const why = x.reasons.map(c => REASONS[c](v, v.uneven)).join("; ");
    if (!groups.has(why)) groups.set(why, []);
    groups.get(why).push(x.p);
  }
  return [...groups];
}
const PLANNER_PRESETS = ["llama2_70b", "llama3_8b", "llama3_70b", "llama3_405b"];
const FROM_PRESET = { psi: "psi", layers: "layers", h: "hidden", a: "heads", s: "seq", ffn: "ffn", kv_heads: "kv_heads",
  vocab: "vocab", swiglu: "swiglu" };

const SHOW = 12;

export function mount(root) {
  root.classList.add("calc");
  const presetSel = h("select", { id: "calc-plan-preset-" + Math.random().toString(36).slice(2, 8), name: "preset" });
  presetSel.append(h("option", { value: "", text: "모델 형태 선택…" }));
  for (const key of PLANNER_PRESETS) presetSel.append(h("option", { value: key, text: MODELS[key].label }));
  presetSel.append(h("option", { value: "moe", text: "Mixtral 8x7B (MoE): 지원하지 않음", disabled: "" }));
  root.append(h("div", { class: "calc-field calc-preset" }, h("label", { for: presetSel.id, text: "프리셋" }), presetSel),
    h("p", { class: "calc-note", text: MOE_NOTE }));
  const out = h("div", { class: "calc-out", role: "status", "aria-live": "polite" });
  const form = new Form(root, root.dataset.prefix || "d", SPECS, render);
  presetSel.addEventListener("change", () => {
    const mo = MODELS[presetSel.value];
    if (!mo) return;
    const vals = Object.fromEntries(Object.entries(FROM_PRESET).map(([k, key]) => [key, mo[k]]));
    vals.dropout = mo.dropout ? 1 : 0;
    form.set(vals);
  });
  root.append(out);

  function render() {
    const [v, errs] = form.read();
    if (!errs.hidden && !errs.heads && v.hidden % v.heads) errs.heads = `a 는 hidden h = ${v.hidden} 의 약수여야 합니다`;
    if (!errs.heads && !errs.kv_heads && v.heads % v.kv_heads) errs.kv_heads = `KV head 수는 a = ${v.heads} 의 약수여야 합니다`;
    form.show(errs);
    out.replaceChildren();
    if (Object.keys(errs).length) { out.append(errorLine(SPECS, errs)); return; }
    const args = {
      model: { layers: v.layers, hidden: v.hidden, heads: v.heads, seq: v.seq, vocab: v.vocab, psi: v.psi,
        ffn: v.ffn, kv_heads: v.kv_heads, swiglu: Boolean(v.swiglu), dropout: Boolean(v.dropout) },
      cluster: { gpus: v.gpus, gpus_per_node: v.gpus_per_node, mem_bytes: v.mem_gib * GIB, intra_bw: v.intra_gbs * 1e9,
        inter_bw: v.inter_gbs * 1e9, alpha_intra: 5e-6, alpha_inter: 10e-6, flops: v.tflops * 1e12, mfu: v.mfu },
      batch: { global_batch: v.global_batch, micro_batch: v.micro_batch }, zero_stage: v.zero_stage, recompute: v.recompute,
      assume: { tp_overlap: v.tp_overlap, grad_bytes: v.grad_bytes, interleave: v.interleave, uneven_stages: v.uneven } };
    const rows = plan(args), dropped = droppedPipelineDegrees(args);
    const droppedLine = dropped.length ? [h("p", { class: "calc-note calc-dropped", "data-out": "dropped",
      "data-p": dropped.map(x => x.p).join(","),
      text: `제외한 pipeline 차수 (N = ${v.gpus} 의 약수 중 배치가 하나도 남지 않은 p): ` +
        groupByReason(dropped, v).map(([why, ps]) => `p = ${ps.join(", ")} (${why})`).join("; ") +
        (dropped.some(x => x.reasons.includes("p_layers")) && !v.uneven ? ". \"p ∤ L 허용\" 을 켜면 stage 당 ⌈L/p⌉ layer 로 셉니다." : ".") })] : [];
    if (!rows.length) {
      out.append(h("p", { class: "calc-error", text: "가능한 배치가 없습니다: t 가 head 수를, p 가 layer 수를, d·b 가 B 를 나누는 d·t·p = N 이 없습니다." }), ...droppedLine);
      return;
    }
    const fit = rows.filter(r => r.fits).length;
    out.append(h("p", { class: "calc-verdict " + (fit ? "calc-ok" : "calc-bad"), "data-layouts": String(rows.length), "data-fit": String(fit),
      text: `가능한 배치 ${rows.length}개 중 ${fit}개가 ${fmt(v.mem_gib)} GiB 에 들어갑니다` + (fit ? `; 가장 빠른 추정: d×t×p = ${rows[0].d}×${rows[0].t}×${rows[0].p}` : "") }));
    const tbl = h("table", { class: "calc-table" });
    tbl.append(h("thead", {}, h("tr", {}, ...["순위", "d×t×p", "m", "메모리/GPU (GiB)", "들어감", "TP 통신 (s)", "PP 통신 (s)", "DP 통신 (s)", "계산 (s)", "bubble (이상 시간 대비)", "step 추정 (s)"]
      .map(t => h("th", { text: t })))));
    const body = h("tbody");
    rows.slice(0, SHOW).forEach((r, i) => body.append(h("tr", { "data-layout": `${r.d}x${r.t}x${r.p}` },
      ...[String(i + 1), `${r.d}×${r.t}×${r.p}`, String(r.m), fmt(r.mem.total / GIB, 1), r.fits ? "예" : "아니오",
        fmt(r.comm_s.tp, 3), fmt(r.comm_s.pp, 3), fmt(r.comm_s.dp, 3), fmt(r.compute_s, 3), pct(r.bubble), fmt(r.step_s, 3)]
        .map(t => h("td", { text: t })))));
    tbl.append(body);
    out.append(scrollBox(tbl), ...droppedLine, h("p", { class: "calc-note", text: `상위 ${Math.min(SHOW, rows.length)}개. 링크: TP 가 가장 안쪽, 그다음 PP, DP 가 가장 바깥 (한 노드 안에 들어가는 축은 노드 내 대역폭). ` +
      "α 는 노드 내 5 µs, 노드 간 10 µs. 메모리는 첫 stage (1F1B 의 in-flight activation, embedding) 와 마지막 stage (LM head, logits) 중 큰 쪽의 activation 과 ZeRO 로 나눈 모델 상태의 합입니다 (GiB = 2³⁰ B). 가정 (TP overlap, fp32 gradient, interleave) 은 Ch7-01 의 민감도 표를 보세요." }));
  }
  render();
}

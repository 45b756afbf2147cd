// The 3D layout planner widget (Ch7): ranked d×t×p factorisations, logic in planner.js.
import { plan } from "./planner.js";
import { Form, h, fmt, pct } from "./ui.js";

// Defaults: Llama-2-70B's shape (GQA 8 KV heads, SwiGLU 28672, V 32000, no dropout) on 8 nodes × 8 H100
// (planner_3d.py's presets LLAMA70B, H100_64, BATCH_4M, and Assumptions()'s defaults).
const SPECS = [
  { key: "psi", label: "파라미터 수 ψ", kind: "num", def: "70e9", min: 1 },
  { key: "layers", label: "레이어 수 L", kind: "int", def: 80, min: 1, max: 100000 },
  { key: "hidden", label: "hidden h", kind: "int", def: 8192, min: 1 },
  { key: "heads", label: "head 수 a", kind: "int", def: 64, min: 1 },
  { key: "seq", label: "시퀀스 길이 s", kind: "int", def: 4096, min: 1 },
  { key: "ffn", label: "FFN 폭 f", kind: "int", def: 28672, min: 1 },
  { key: "kv_heads", label: "KV head 수 (GQA)", kind: "int", def: 8, min: 1 },
  { key: "vocab", label: "어휘 크기 V", kind: "int", def: 32000, min: 0 },
  { key: "swiglu", label: "FFN", kind: "select", numeric: true, def: 1, options: [["1", "SwiGLU (행렬 3 개)"], ["0", "GELU (행렬 2 개)"]] },
  { key: "dropout", label: "dropout", kind: "select", numeric: true, def: 0, options: [["0", "없음"], ["1", "있음"]] },
  { key: "gpus", label: "GPU 수 N", kind: "int", def: 64, min: 1, max: 65536 },
  { key: "gpus_per_node", label: "노드당 GPU", kind: "int", def: 8, min: 1, max: 1024 },
  { key: "mem_gb", label: "GPU 당 가용 메모리 (GB)", kind: "num", def: 72, min: 0.001 },
  { key: "intra_gbs", label: "노드 내 대역폭 (GB/s, 한 방향)", kind: "num", def: 450, min: 0.001 },
  { key: "inter_gbs", label: "노드 간 대역폭 (GB/s, GPU 당 한 방향)", kind: "num", def: 50, min: 0.001 },
  { key: "tflops", label: "peak 16-bit TFLOP/s", kind: "num", def: 989, min: 0.001 },
  { key: "mfu", label: "MFU", kind: "num", def: 0.4, min: 0.001, max: 1 },
  { key: "global_batch", label: "global batch B (sequence)", kind: "int", def: 1024, min: 1 },
  { key: "micro_batch", label: "micro-batch b", kind: "int", def: 1, min: 1 },
  { key: "interleave", label: "interleave v (model chunk)", kind: "int", def: 1, min: 1, max: 64 },
  { key: "tp_overlap", label: "TP 통신이 계산에 숨는 비율", kind: "num", def: 0, min: 0, max: 1 },
  { key: "grad_bytes", label: "그래디언트 bytes (distributed optimizer: fp32 = 4)", kind: "select", numeric: true, def: 4, options: [["4", "4 (fp32)"], ["2", "2 (16-bit)"]] },
  { key: "zero_stage", label: "ZeRO stage", kind: "select", numeric: true, def: 1, options: [["0", "0"], ["1", "1"], ["2", "2"], ["3", "3"]] },
  { key: "recompute", label: "재계산", kind: "select", def: "selective", options: [["none", "없음"], ["selective", "selective"], ["full", "full"]] },
];
const SHOW = 12;

export function mount(root) {
  root.classList.add("calc");
  const out = h("div", { class: "calc-out", role: "status", "aria-live": "polite" });
  const form = new Form(root, root.dataset.prefix || "d", SPECS, render);
  root.append(out);

  function render() {
    const [v, errs] = form.read();
    if (!errs.hidden && !errs.heads && v.hidden % v.heads) errs.heads = `a 는 hidden h = ${v.hidden} 의 약수여야 합니다`;
    if (!errs.heads && !errs.kv_heads && v.heads % v.kv_heads) errs.kv_heads = `KV head 수는 a = ${v.heads} 의 약수여야 합니다`;
    form.show(errs);
    out.replaceChildren();
    if (Object.keys(errs).length) {
      out.append(h("p", { class: "calc-error", text: "입력을 고치면 결과가 나옵니다: " +
        Object.keys(errs).map(k => SPECS.find(s => s.key === k).label).join(", ") }));
      return;
    }
    const rows = plan({
      model: { layers: v.layers, hidden: v.hidden, heads: v.heads, seq: v.seq, vocab: v.vocab, psi: v.psi,
        ffn: v.ffn, kv_heads: v.kv_heads, swiglu: Boolean(v.swiglu), dropout: Boolean(v.dropout) },
      cluster: { gpus: v.gpus, gpus_per_node: v.gpus_per_node, mem_bytes: v.mem_gb * 1e9, intra_bw: v.intra_gbs * 1e9,
        inter_bw: v.inter_gbs * 1e9, alpha_intra: 5e-6, alpha_inter: 10e-6, flops: v.tflops * 1e12, mfu: v.mfu },
      batch: { global_batch: v.global_batch, micro_batch: v.micro_batch }, zero_stage: v.zero_stage, recompute: v.recompute,
      assume: { tp_overlap: v.tp_overlap, grad_bytes: v.grad_bytes, interleave: v.interleave } });
    if (!rows.length) {
      out.append(h("p", { class: "calc-error", text: "가능한 배치가 없습니다: t 가 head 수를, p 가 레이어 수를, d·b 가 B 를 나누는 d·t·p = N 이 없습니다." }));
      return;
    }
    const fit = rows.filter(r => r.fits).length;
    out.append(h("p", { class: "calc-verdict " + (fit ? "calc-ok" : "calc-bad"), "data-layouts": String(rows.length), "data-fit": String(fit),
      text: `가능한 배치 ${rows.length}개 중 ${fit}개가 메모리에 들어갑니다` + (fit ? `; 가장 빠른 추정: d×t×p = ${rows[0].d}×${rows[0].t}×${rows[0].p}` : "") }));
    const tbl = h("table", { class: "calc-table" });
    tbl.append(h("thead", {}, h("tr", {}, ...["순위", "d×t×p", "m", "메모리/GPU (GB)", "들어감", "TP 통신 (s)", "PP 통신 (s)", "DP 통신 (s)", "계산 (s)", "bubble (이상 시간 대비)", "step 추정 (s)"]
      .map(t => h("th", { text: t })))));
    const body = h("tbody");
    rows.slice(0, SHOW).forEach((r, i) => body.append(h("tr", { "data-layout": `${r.d}x${r.t}x${r.p}` },
      ...[String(i + 1), `${r.d}×${r.t}×${r.p}`, String(r.m), fmt(r.mem.total / 1e9, 1), r.fits ? "예" : "아니오",
        fmt(r.comm_s.tp, 3), fmt(r.comm_s.pp, 3), fmt(r.comm_s.dp, 3), fmt(r.compute_s, 3), pct(r.bubble), fmt(r.step_s, 3)]
        .map(t => h("td", { text: t })))));
    tbl.append(body);
    out.append(tbl, h("p", { class: "calc-note", text: `상위 ${Math.min(SHOW, rows.length)}개. 링크: TP 가 가장 안쪽, 그다음 PP, DP 가 가장 바깥 (한 노드 안에 들어가는 축은 노드 내 대역폭). ` +
      "α 는 노드 내 5 µs, 노드 간 10 µs. 메모리는 첫 stage (1F1B 의 in-flight activation, embedding) 와 마지막 stage (LM head, logits) 중 큰 쪽의 activation 과 ZeRO 로 나눈 모델 상태의 합입니다. 가정 (TP overlap, fp32 그래디언트, interleave) 은 Ch7-01 의 민감도 표를 보세요." }));
  }
  render();
}

// Shared UI plumbing of the calculators: fields bound to the query string, Korean validation
// messages (no NaN, no silent clamping), number formatting. No framework, no network.
const NUM = /^\s*(-?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBtT]?)\s*$/;
const SUFFIX = { "": 1, k: 1e3, m: 1e6, b: 1e9, t: 1e12 };

export function parseNumber(text) {
  const m = NUM.exec(String(text));
  return m ? Number(m[1]) * SUFFIX[m[2].toLowerCase()] : NaN;
}

let uid = 0;
const h = (tag, attrs = {}, ...kids) => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") el.textContent = v; else if (v !== undefined && v !== null) el.setAttribute(k, v);
  }
  for (const kid of kids) el.append(kid);
  return el;
};
export { h };

// spec: {key, label, kind: "int" | "num" | "select" | "check", def, min, max, options: [[value, label]], help}
export class Form {
  constructor(root, prefix, specs, onChange) {
    const defs = JSON.parse(root.dataset.defaults || "{}");  // a page may change the defaults of its widget
    this.root = root; this.prefix = prefix; this.onChange = onChange; this.inputs = {};
    this.specs = specs.map(sp => (sp.key in defs ? { ...sp, def: defs[sp.key] } : sp));
    const q = new URLSearchParams(location.search);
    const grids = new Map();  // one fieldset per spec.group, in order of first appearance
    const gridOf = name => {
      if (!grids.has(name)) {
        const grid = h("div", { class: "calc-grid" });
        grids.set(name, grid);
        root.append(name ? h("fieldset", { class: "calc-group" }, h("legend", { text: name }), grid) : grid);
      }
      return grids.get(name);
    };
    for (const sp of this.specs) {
      if ((sp.kind === "int" || sp.kind === "num") && (sp.min === undefined || sp.max === undefined))
        throw new Error(`field ${sp.key}: a number needs both min and max`);  // every input is bounded
      const id = `calc-${prefix}-${sp.key}-${++uid}`, msg = h("span", { class: "calc-msg", id: id + "-msg", "aria-live": "polite" });
      let input;
      const given = q.get(`${prefix}.${sp.key}`);
      if (sp.kind === "select") {
        input = h("select", { id, name: sp.key });
        for (const [v, lab, off] of sp.options) input.append(h("option", { value: v, text: lab, disabled: off ? "" : undefined }));
        input.value = given ?? String(sp.def);
        if (given !== null && input.value !== given) { input.dataset.bad = given; input.value = String(sp.def); }
      } else if (sp.kind === "check") {
        input = h("input", { id, name: sp.key, type: "checkbox" });
        input.checked = given !== null ? given === "1" : !!sp.def;
        if (given !== null && given !== "0" && given !== "1") input.dataset.bad = given;
      } else {
        input = h("input", { id, name: sp.key, type: "text", inputmode: sp.kind === "int" ? "numeric" : "decimal",
          autocomplete: "off", spellcheck: "false" });
        input.value = given ?? String(sp.def);
      }
      input.setAttribute("aria-describedby", msg.id);
      input.addEventListener("input", () => this.update(true));
      input.addEventListener("change", () => this.update(true));
      this.inputs[sp.key] = input;
      const lab = h("label", { for: id, text: sp.label });
      if (sp.help) lab.title = sp.help;
      if (sp.kind === "int" || sp.kind === "num") lab.title = (sp.help ? sp.help + " · " : "") + `허용 범위 ${fmtBound(sp.min)} – ${fmtBound(sp.max)}`;
      gridOf(sp.group || "").append(h("div", { class: "calc-field" + (sp.kind === "check" ? " calc-check" : ""), "data-key": sp.key }, lab, input, msg));
    }
  }

  // Returns [values, errors]: errors maps key -> Korean message.
  read() {
    const vals = {}, errs = {};
    for (const sp of this.specs) {
      const el = this.inputs[sp.key];
      if (el.dataset.bad !== undefined) {
        errs[sp.key] = `주소의 값 '${el.dataset.bad}' 은(는) 허용되지 않습니다`;
        continue;
      }
      if (sp.kind === "check") { vals[sp.key] = el.checked; continue; }
      if (sp.kind === "select") { vals[sp.key] = sp.numeric ? Number(el.value) : el.value; continue; }
      const x = parseNumber(el.value);
      if (!Number.isFinite(x)) errs[sp.key] = "숫자를 입력하세요 (예: 8, 2048, 7e9, 70B)";
      else if (sp.kind === "int" && !Number.isInteger(x)) errs[sp.key] = "정수를 입력하세요";
      else if (x < sp.min || x > sp.max) errs[sp.key] = `${fmtBound(sp.min)} 이상 ${fmtBound(sp.max)} 이하여야 합니다` +
        (x > sp.max ? ` (입력 ${fmtBound(x)})` : "");
      else vals[sp.key] = x;
    }
    return [vals, errs];
  }

  show(errs) {
    for (const sp of this.specs) {
      const el = this.inputs[sp.key], msg = document.getElementById(el.getAttribute("aria-describedby"));
      msg.textContent = errs[sp.key] || "";
      if (errs[sp.key]) el.setAttribute("aria-invalid", "true"); else el.removeAttribute("aria-invalid");
    }
  }

  writeQuery() {
    const url = new URL(location.href);
    for (const sp of this.specs) {
      const el = this.inputs[sp.key];
      const val = sp.kind === "check" ? (el.checked ? "1" : "0") : el.value.trim();
      const def = sp.kind === "check" ? (sp.def ? "1" : "0") : String(sp.def);
      if (val === def) url.searchParams.delete(`${this.prefix}.${sp.key}`);  // a link names what differs
      else url.searchParams.set(`${this.prefix}.${sp.key}`, val);
    }
    history.replaceState(history.state, "", url);
  }

  update(fromUser) {
    if (fromUser) for (const el of Object.values(this.inputs)) delete el.dataset.bad;
    if (fromUser) this.writeQuery();
    this.onChange();
  }

  set(values) {
    for (const [k, v] of Object.entries(values)) {
      const el = this.inputs[k];
      if (el.type === "checkbox") el.checked = !!v; else el.value = String(v);
    }
    this.update(true);
  }
}

// A bound as a reader reads it: 10¹⁴ for a power of ten from 10⁶ up, 65,536 otherwise.
const SUP = { "0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸", "9": "⁹", "-": "⁻" };
export function fmtBound(x) {
  if (!Number.isFinite(x)) return String(x);
  const e = Math.round(Math.log10(Math.abs(x)));
  if (Math.abs(x) >= 1e6 && Math.abs(x / 10 ** e - 1) < 1e-12) return (x < 0 ? "−" : "") + "10" + String(e).replace(/./g, c => SUP[c]);
  if (Math.abs(x) >= 1e6) return x.toExponential(3).replace(/\.?0+e/, "e").replace("e+", "e");
  return x.toLocaleString("en-US", { maximumFractionDigits: 6 });
}

// A wide table in a horizontal scroller; on a narrow screen a visible hint says that it scrolls (and how much
// is hidden), kept current as the width changes.
export function scrollBox(table) {
  const hint = h("p", { class: "calc-scroll-hint", "aria-hidden": "true", text: "표가 화면보다 넓습니다: 옆으로 밀어 나머지 열을 보세요 →" });
  const box = h("div", { class: "calc-scroll", tabindex: "0", role: "region", "aria-label": "가로로 스크롤되는 표" }, table);
  const wrap = h("div", { class: "calc-scroll-wrap" }, hint, box);
  const update = () => {
    const over = box.scrollWidth > box.clientWidth + 1;
    wrap.dataset.overflow = String(over);
    wrap.dataset.atEnd = String(box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
  };
  box.addEventListener("scroll", update, { passive: true });
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(update).observe(box);
  requestAnimationFrame(update);
  return wrap;
}

// The message above the results when any field is refused: which fields, by their labels.
export function errorLine(specs, errs) {
  return h("p", { class: "calc-error", text: "입력을 고치면 결과가 나옵니다: " +
    Object.keys(errs).map(k => (specs.find(s => s.key === k) || { label: k }).label).join(", ") });
}

export function fmtBytes(x) {
  return Math.round(x).toLocaleString("en-US");
}
export const fmt = (x, d = 2) => x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
export const pct = x => (100 * x).toFixed(2) + " %";

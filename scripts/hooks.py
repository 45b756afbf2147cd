"""MkDocs hooks for the book. Every failure names the file and the reason.

- on_config: put the repository root on sys.path; generate the nav from snippets/book.py
  (written documents and chapter labs only: no placeholder pages).
- on_pre_build: validate every results file (schema, provenance); stale ones warn (strict fails).
- on_files: serve KaTeX (CSS, fonts; JS only in browser mode) from node_modules, no CDN.
- on_page_markdown: citations [@key] -> references page; generated blocks
  <!-- book:chapter-map -->, <!-- book:theorem-index -->, <!-- book:references -->.
- on_post_page: render math with KaTeX at build time (MATH_RENDER=build, the default), so a
  KaTeX error fails the build with the page and the formula.
"""
from __future__ import annotations

import html
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

from snippets import book  # noqa: E402

log = logging.getLogger("mkdocs.plugins.book")

KATEX = ROOT / "node_modules" / "katex" / "dist"
MATH_RENDER = os.environ.get("MATH_RENDER", "build")  # "build" or "browser"
REFERENCES_YML = ROOT / "scripts" / "references.yml"
CITE = re.compile(r"(?<!`)\[@([A-Za-z0-9_:-]+(?:\s*;\s*@[A-Za-z0-9_:-]+)*)\]")
BLOCK = re.compile(
    r"^/// (definition|theorem|lemma|corollary) \| (.+?)\n\s+attrs: \{id: ([A-Za-z0-9_-]+)\}",
    re.M)
KIND_KO = {"definition": "정의", "theorem": "정리", "lemma": "보조정리", "corollary": "따름정리"}

# Author loop: BOOK_ONLY="ch2-data-parallel/*,ch1-collective/03-*" builds only those pages (and labs
# matching the globs) plus the generated pages; links to pages left out are reported at INFO level
# instead of failing the strict build. Never set in CI or `make build`.
BOOK_ONLY = [g.strip() for g in os.environ.get("BOOK_ONLY", "").split(",") if g.strip()]
_ALWAYS = {"index.md", "notation.md", "theorems.md", "references.md"}


def _selected(rel: str) -> bool:
    from fnmatch import fnmatch

    return not BOOK_ONLY or rel in _ALWAYS or not rel.startswith("ch") or any(fnmatch(rel, g) for g in BOOK_ONLY)


# ------------------------------------------------------------------ config / nav

def on_config(config, **kwargs):
    docs = Path(config["docs_dir"])
    here = lambda rel: (docs / rel).exists() and _selected(rel)  # noqa: E731
    if BOOK_ONLY:
        import logging as _logging

        for key in ("not_found", "anchors", "unrecognized_links", "absolute_links"):
            config["validation"]["links"][key] = _logging.INFO
        config["validation"]["nav"]["omitted_files"] = _logging.INFO
        log.info("BOOK_ONLY=%s: partial build for authors (links to omitted pages not checked)",
                    ",".join(BOOK_ONLY))
    nav = [{"홈": "index.md"}] + ([{"표기법": "notation.md"}] if here("notation.md") else [])
    for ch in book.CHAPTERS:
        items = [d.path for d in ch.docs if here(d.path)]
        if here(ch.lab_path):
            items.append({f"Ch{ch.number} 실습 노트북": ch.lab_path})
        if items:
            nav.append({f"Ch{ch.number} {ch.title.split(' ')[0]}": items})
    nav += [{t: f} for t, f in (("정리 색인", "theorems.md"), ("계산기", "calculators.md"), ("참고문헌", "references.md")) if here(f)]
    config["nav"] = nav
    if MATH_RENDER not in ("build", "browser"):
        raise PluginError(f"MATH_RENDER must be 'build' or 'browser', not {MATH_RENDER!r}")
    if not (KATEX / "katex.min.css").exists():
        raise PluginError(f"{KATEX}: KaTeX is missing; run `npm ci` (make venv does)")
    if MATH_RENDER == "browser":
        config["extra_javascript"] = [*config["extra_javascript"], "assets/katex/katex.min.js",
                                      "assets/katex/contrib/auto-render.min.js", "assets/katex-init.js"]
    config["extra_css"] = ["assets/katex/katex.min.css", *config["extra_css"]]
    return config


# ------------------------------------------------------------------ chapter labs, executed in parallel

_LABS: dict[str, dict] = {}


def _execute_lab(src: Path, out: Path, box: dict) -> None:
    """Execute a jupytext lab with nbclient (errors not allowed) and write the executed .ipynb."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    name = src.relative_to(ROOT).as_posix() if src.is_relative_to(ROOT) else str(src)
    try:
        nb = jupytext.read(src)
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False,
                       resources={"metadata": {"path": str(src.parent)}}).execute()
        nbformat.write(nb, out)
    except CellExecutionError as exc:
        box["error"] = f"{name}: a cell failed: {str(exc)[-1500:]}"
    except Exception as exc:  # noqa: BLE001 - reported as a build error with the lab's path
        box["error"] = f"{name}: {type(exc).__name__}: {exc}"


def _start_labs(config) -> None:
    """Start every chapter lab's kernel now, in threads: the notebooks run on the second core while
    the main thread renders the Markdown pages. The lab page then renders the executed copy."""
    import tempfile
    import threading

    tmp = Path(tempfile.mkdtemp(prefix="book-labs-"))
    for lab in sorted(Path(config["docs_dir"]).glob("ch*/lab.py")):
        rel = lab.relative_to(config["docs_dir"]).as_posix()
        if not _selected(rel):
            continue
        box = {"out": tmp / rel.replace("/", "__").replace(".py", ".ipynb")}
        box["thread"] = threading.Thread(target=_execute_lab, args=(lab, box["out"], box), daemon=True)
        box["thread"].start()
        _LABS[rel] = box


def _executed_lab(page) -> None:
    box = _LABS.get(page.file.src_uri)
    if box is None:
        raise PluginError(f"{page.file.src_uri}: lab was not started")
    box["thread"].join()
    if "error" not in box and not box["out"].exists():
        box["error"] = f"{page.file.src_uri}: the executor wrote no notebook"
    if "error" in box:
        raise PluginError(f"lab execution failed: {box['error']}")
    page.file.abs_src_path = str(box["out"])  # mkdocs-jupyter (execute: false) renders the executed copy


def on_pre_build(config, **kwargs):
    from snippets.results import ResultsError, validate_all

    _LABS.clear()
    _start_labs(config)

    try:
        validate_all()
    except ResultsError as exc:
        raise PluginError(f"malformed results file: {exc}") from exc
    _references()  # fail early on a malformed references.yml


def on_files(files, config, **kwargs):
    wanted = ["katex.min.css", *(f"fonts/{p.name}" for p in sorted((KATEX / "fonts").glob("*.woff2")))]
    if MATH_RENDER == "browser":
        wanted += ["katex.min.js", "contrib/auto-render.min.js"]
    for rel in wanted:
        files.append(File.generated(config, f"assets/katex/{rel}", abs_src_path=str(KATEX / rel)))
    if BOOK_ONLY:
        for f in [f for f in files if f.src_uri.startswith("ch") and not _selected(f.src_uri)
                  and (f.src_uri.endswith(".md") or f.src_uri.endswith("lab.py"))]:
            files.remove(f)
    return files


# ------------------------------------------------------------------ references / citations

_REFS: dict | None = None


def _references() -> dict:
    global _REFS
    if _REFS is None:
        data = yaml.safe_load(REFERENCES_YML.read_text(encoding="utf-8"))
        for key, ref in data.items():
            for field in ("authors", "year", "title", "venue"):
                if not ref.get(field):
                    raise PluginError(f"{REFERENCES_YML.relative_to(ROOT)}: entry '{key}' lacks '{field}'")
            if not (ref.get("arxiv") or ref.get("doi") or ref.get("url")):
                raise PluginError(f"{REFERENCES_YML.relative_to(ROOT)}: entry '{key}' needs arxiv, doi or url")
        _REFS = data
    return _REFS


def _short(ref: dict) -> str:
    authors = ref["authors"]
    if len(authors) == 1:
        who = authors[0].split()[-1]
    elif len(authors) == 2:
        who = f"{authors[0].split()[-1]} & {authors[1].split()[-1]}"
    else:
        who = f"{authors[0].split()[-1]} et al."
    return f"{who} {ref['year']}"


def _rel_md(page, target: str) -> str:
    """Relative link from the page's source file to another source file (mkdocs resolves it)."""
    import posixpath

    return posixpath.relpath(target, posixpath.dirname(page.file.src_uri) or ".")


def _cite(markdown: str, page) -> str:
    refs = _references()

    def sub(m):
        keys = [k.strip().lstrip("@") for k in m.group(1).split(";")]
        parts = []
        for k in keys:
            if k not in refs:
                raise PluginError(f"{page.file.src_uri}: unknown citation key '@{k}' "
                                  f"(add it to scripts/references.yml)")
            parts.append(f"[{_short(refs[k])}]({_rel_md(page, 'references.md')}#{k})")
        return "[" + "; ".join(parts) + "]"

    return CITE.sub(sub, markdown)


def _references_block() -> str:
    out = []
    for key, r in sorted(_references().items(), key=lambda kv: (kv[1]["authors"][0].split()[-1], kv[1]["year"])):
        link = (f"[arXiv:{r['arxiv']}](https://arxiv.org/abs/{r['arxiv']})" if r.get("arxiv")
                else f"[doi:{r['doi']}](https://doi.org/{r['doi']})" if r.get("doi")
                else f"[{r['url']}]({r['url']})")
        out.append(f'- <span id="{key}"></span>**[{key}]** {", ".join(r["authors"])}. '
                   f'*{r["title"]}*. {r["venue"]}, {r["year"]}. {link}')
    return "\n".join(out)


# ------------------------------------------------------------------ generated blocks

def _theorem_index() -> str:
    out = []
    for ch in book.CHAPTERS:
        rows = []
        for d in ch.docs:
            if not d.written:
                continue
            text = (book.DOCS / d.path).read_text(encoding="utf-8")
            for kind, title, anchor in BLOCK.findall(text):
                rows.append(f"| {KIND_KO[kind]} | [{title.strip()}]({d.path}#{anchor}) | "
                            f"[{d.number:02d}. {d.title}]({d.path}) | `#{anchor}` |")
        if rows:
            out.append(f"## Chapter {ch.number}: {ch.title}\n")
            out.append("| 종류 | 이름 | 문서 | anchor |\n|---|---|---|---|")
            out += rows
            out.append("")
    return "\n".join(out) or "아직 정리가 있는 문서가 없습니다."


def _chapter_map() -> str:
    out = []
    for ch in book.CHAPTERS:
        n_written = sum(d.written for d in ch.docs)
        out.append(f"### Chapter {ch.number}: {ch.title}\n")
        out.append(f"{len(ch.docs)}개 문서 중 {n_written}개 집필됨.\n")
        for d in ch.docs:
            label = f"{d.number:02d}. {d.title}"
            out.append(f"- [{label}]({d.path})" if d.written else f"- {label}")
        if (book.DOCS / ch.lab_path).exists():
            out.append(f"- [Chapter {ch.number} 실습 노트북]({ch.lab_path})")
        out.append("")
    return "\n".join(out)


GENERATED = {
    "<!-- book:chapter-map -->": _chapter_map,
    "<!-- book:theorem-index -->": _theorem_index,
    "<!-- book:references -->": _references_block,
}


def _isolate_display_math(markdown: str) -> str:
    """Give every $$…$$ display block its own paragraph (blank line before and after).

    arithmatex only sees a display block that starts a paragraph; authors naturally write
    "… 는\n$$ … $$\n이다." inside a sentence, which would otherwise leave raw $$ on the page."""
    lines, out, fence, in_math, pad_next = markdown.split("\n"), [], None, False, False
    for line in lines:
        st = line.strip()
        if pad_next:
            if st:
                out.append("")
            pad_next = False
        if not in_math and (st.startswith("```") or st.startswith("~~~")):
            mark = st[:3]
            fence = None if fence == mark else (fence or mark)
        if fence or not st.startswith("$$") and not in_math:
            out.append(line)
            continue
        if not in_math:  # an opening line
            if out and out[-1].strip():
                out.append("")
            out.append(line)
            if len(st) >= 4 and st.endswith("$$"):
                pad_next = True
            else:
                in_math = True
            continue
        out.append(line)  # inside a block
        if st.endswith("$$"):
            in_math, pad_next = False, True
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri in _LABS:
        _executed_lab(page)
        return markdown
    for marker, fn in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, fn())
    return _cite(_isolate_display_math(markdown), page)


# ------------------------------------------------------------------ math at build time

MATH = re.compile(
    r'<(span|div) class="arithmatex">(\\\(|\\\[)(.*?)(\\\)|\\\])</\1>', re.S)
_NODE_RENDER = r"""
const katex = require(process.argv[1]);
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', line => {
  const out = [];
  for (const [tex, display] of JSON.parse(line)) {
    try { out.push({html: katex.renderToString(tex, {displayMode: display, throwOnError: true, output: 'html'})}); }
    catch (e) { out.push({error: String(e.message || e)}); }
  }
  process.stdout.write(JSON.stringify(out) + '\n');
});
"""
_NODE = None


def _katex_render(items: list[tuple[str, bool]]) -> list[dict]:
    """Render with one long-lived node process (one JSON line per page, one line back)."""
    global _NODE
    if _NODE is None or _NODE.poll() is not None:
        _NODE = subprocess.Popen(["node", "-e", _NODE_RENDER, str(KATEX / "katex.js")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8")
    _NODE.stdin.write(json.dumps(items) + "\n")
    _NODE.stdin.flush()
    line = _NODE.stdout.readline()
    if not line:
        raise PluginError(f"KaTeX renderer (node) died: {_NODE.stderr.read()[:500]}")
    return json.loads(line)


def _close_katex():
    global _NODE
    if _NODE is not None:
        _NODE.stdin.close()
        _NODE.wait(timeout=10)
        _NODE = None


TOC_MATH = re.compile(r"\\\((.*?)\\\)", re.S)
ELLIPSIS = re.compile(r'(<span class="md-ellipsis">)(.*?)(</span>)', re.S)


NB_MARKDOWN = re.compile(r'(<div class="jp-RenderedHTMLCommon jp-RenderedMarkdown[^"]*"[^>]*>)(.*?)(</div>)', re.S)
NB_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$<>\n]+?)\$", re.S)


def _notebook_math(output: str) -> str:
    """Chapter labs (mkdocs-jupyter): turn $…$ / $$…$$ in markdown cells into arithmatex spans,
    and drop the empty MathJax <script src=""> of the notebook template (the site loads no MathJax)."""
    output = output.replace('<script src=""> </script>', "")

    def cell(m):
        def one(t):
            if t.group(1) is not None:
                return f'<div class="arithmatex">\\[{t.group(1)}\\]</div>'
            return f'<span class="arithmatex">\\({t.group(2)}\\)</span>'
        return m.group(1) + NB_MATH.sub(one, m.group(2)) + m.group(3)

    return NB_MARKDOWN.sub(cell, output)


def _lab_downloads(output: str, page, config) -> str:
    """Chapter labs: write <lab>.ipynb (from the jupytext source) beside the page and link both files."""
    import jupytext

    import shutil

    src = Path(config["docs_dir"]) / page.file.src_uri  # the jupytext source
    executed = Path(page.file.abs_src_path)  # the executed .ipynb rendered on the page
    dest = Path(page.file.abs_dest_path).parent
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest / src.name)
    if executed.suffix == ".ipynb":
        shutil.copyfile(executed, dest / f"{src.stem}.ipynb")
    else:
        jupytext.write(jupytext.read(src), dest / f"{src.stem}.ipynb")
    box = ('<div class="admonition tip"><p class="admonition-title">이 노트북 내려받기</p>'
           f'<p><a href="{src.stem}.ipynb" download>Jupyter 노트북 (.ipynb, 이 빌드의 실행 결과 포함)</a> · '
           f'<a href="{src.name}" download>jupytext 원본 (.py)</a>. 저장소를 clone 한 뒤 루트에서 '
           '<code>make setup</code> 으로 만든 <code>.venv</code> 의 Jupyter 로 여세요: 노트북이 <code>snippets</code> '
           '패키지를 import 합니다.</p></div>')
    return output.replace('<div class="jupyter-wrapper">', box + '<div class="jupyter-wrapper">', 1)


def on_post_page(output, page, config, **kwargs):
    """Replace every arithmatex span (and TeX left in TOC entries) with KaTeX HTML."""
    import time

    if page.file.src_uri.endswith("lab.py"):
        output = _lab_downloads(output, page, config)

    t0 = time.perf_counter()
    try:
        return _post_page(output, page)
    finally:
        _PAGE_SECONDS[page.file.src_uri + " (KaTeX)"] = time.perf_counter() - t0


def _post_page(output, page):
    if page.file.src_uri.endswith(".py"):
        output = _notebook_math(output)
    if MATH_RENDER != "build":
        return output
    found = list(MATH.finditer(output))
    toc = [m for m in ELLIPSIS.finditer(output) if "\\(" in m.group(2)]
    items = [(html.unescape(m.group(3)), m.group(2) == "\\[") for m in found]
    toc_items = [(html.unescape(t.group(1)), False) for m in toc for t in TOC_MATH.finditer(m.group(2))]
    if not items and not toc_items:
        return output
    rendered = iter(_katex_render(items + toc_items))

    def checked(tex):
        r = next(rendered)
        if "error" in r:
            raise PluginError(f"{page.file.src_uri}: KaTeX cannot render {tex[:80]!r}: {r['error']}")
        return r["html"]

    spans = {}
    for m, (tex, display) in zip(found, items):
        tag = "div" if display else "span"
        spans[m.span()] = f'<{tag} class="arithmatex">{checked(tex)}</{tag}>'
    for m in toc:
        inner = TOC_MATH.sub(lambda t: checked(html.unescape(t.group(1))), m.group(2))
        spans[m.span()] = m.group(1) + inner + m.group(3)
    pieces, last = [], 0
    for (a, b), new in sorted(spans.items()):
        pieces.append(output[last:a])
        pieces.append(new)
        last = b
    pieces.append(output[last:])
    return "".join(pieces)


_PAGE_T0: dict[str, float] = {}
_PAGE_SECONDS: dict[str, float] = {}


def on_pre_page(page, config, files, **kwargs):
    import time

    _PAGE_T0[page.file.src_uri] = time.perf_counter()
    return page


def on_page_content(html_, page, config, files, **kwargs):
    import time

    _PAGE_SECONDS[page.file.src_uri] = time.perf_counter() - _PAGE_T0.get(page.file.src_uri, time.perf_counter())
    return html_


def on_post_build(config, **kwargs):
    """Search shows plain text: drop TeX delimiters from the search index (math stays readable).
    With BOOK_TIMING=1, print the seconds each page took to render (cells, notebooks, math)."""
    _close_katex()
    if os.environ.get("BOOK_TIMING"):
        for uri, sec in sorted(_PAGE_SECONDS.items(), key=lambda kv: -kv[1]):
            log.info("page time %6.2f s  %s", sec, uri)
    index = Path(config["site_dir"]) / "search" / "search_index.json"
    if index.exists():
        text = index.read_text(encoding="utf-8")
        for d in ("\\\\(", "\\\\)", "\\\\[", "\\\\]"):
            text = text.replace(d, "")
        index.write_text(text, encoding="utf-8")

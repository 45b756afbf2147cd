"""Print the book on paper: one PDF per chapter and one for the whole book, in two editions.

    python scripts/pdf.py SITE [-o OUT] [--chapters ch6-activation-memory,…] [--editions student,instructor]
                               [--no-book] [--no-chapters]

SITE is a built site (`mkdocs build --strict -d SITE`); OUT defaults to SITE/pdf, so that the PDFs are published
beside the pages. `make pdf` builds the site and runs this on it.

For each chapter the pages' ``<article>`` contents (and the chapter lab's) are put into one print document, after a
cover (book title, chapter, edition, git commit and date of the print) and a table of contents (the pages and their
``##`` sections as links inside the PDF, with the page on which each starts). The document uses the site's own
stylesheets and KaTeX fonts: a local HTTP server on 127.0.0.1 serves the built site, and the print document from
memory beside it, so every relative asset resolves. Chromium (the one the browser tests drive through Playwright)
prints it to A4 with page numbers in the footer. The whole book is every chapter in one document, so its page
numbers run on; the notation table, glossary and references follow as appendices.

Editions
    student      exercise solutions left out: the collapsible blocks (``??? success "해설"``, a ``<details>``
                 in the built HTML) that follow each "문제 N (…)." in the "🤔 생각해볼 문제" section are removed
                 from the document, so their text is not in the PDF at all (not merely hidden)
    instructor   the same blocks kept and opened

On paper nothing can be clicked, so the other collapsible blocks (provenance boxes, implementation notes, examples)
are printed open, except the code folded away because it only draws a figure or shapes a table (its title line is
printed, the code is on the site); tabbed blocks print every tab (Material's print stylesheet). Interactive
calculators become a line naming the site page that has them. Before printing, anything still wider than the
page (a long formula, a table whose cells cannot wrap) is scaled down to the page width; an element that still
reaches past the right edge after that (by more than 8 px, a fifth of the margin) fails the run, naming the page and the element.

Each run writes OUT/manifest.json: per PDF its pages, bytes, sha256, edition, chapters, and the commit, date and
Chromium version it was printed with.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from snippets import book  # noqa: E402

EDITIONS = {"student": "학생용 — 해설 제외", "instructor": "강사용 — 해설 포함"}
APPENDICES = (("notation/", "부록 A"), ("glossary/", "부록 B"), ("references/", "부록 C"))
SOLUTIONS_H2 = "생각해볼-문제"  # the id of "## 🤔 생각해볼 문제" (snippets.slugs)
CHROME_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--font-render-hinting=none"]
MARGIN = {"top": "14mm", "bottom": "16mm", "left": "14mm", "right": "14mm"}
CONTENT_WIDTH_PX = round((210 - 28) / 25.4 * 96)  # A4 less the side margins, in CSS px (688)
FOLDED_CODE = re.compile(r"코드|plumbing")  # "표를 만드는 코드 (접어 둠)", "그림을 그리는 코드": prints its title only
SOLUTION_MARK = "book-solution:{}"  # a comment in the article HTML where a solution was


def chromium() -> str:
    """Debian's chromium (the tests' browser); CHROMIUM=path overrides, e.g. google-chrome on a CI runner."""
    for c in (os.environ.get("CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"),
              shutil.which("google-chrome"), "/usr/bin/chromium"):
        if c and Path(c).exists():
            return c
    raise SystemExit("pdf: no Chromium found (install Debian's chromium, or set CHROMIUM=/path/to/chrome)")


# ------------------------------------------------------------------------------------------ reading the site

@dataclass
class Section:
    """One site page made ready for print: its article HTML (ids prefixed), its title and ## sections."""
    url: str  # site-relative, e.g. "ch6-activation-memory/01-activation-size/"
    pid: str  # id prefix inside the print document, e.g. "ch6-01"
    label: str  # "Ch6-01", "실습", "부록 A"
    title: str
    h2: list[tuple[str, str]]  # (id in the print document, text)
    body: str  # article HTML with SOLUTION_MARK placeholders
    solutions: list[str] = field(default_factory=list)  # the solution blocks' HTML, opened


def _soup(text: str):
    from bs4 import BeautifulSoup

    return BeautifulSoup(text, "html.parser")


_HEAVY = re.compile(r'<span class="katex(?:-display)?">|<svg\b|<pre\b')
_NEST = {"span": re.compile(r"<span\b|</span>"), "svg": re.compile(r"<svg\b|</svg>"),
         "pre": re.compile(r"<pre\b|</pre>")}
_LINE_ANCHOR = re.compile(r'<a id="__codelineno-[^"]*" name="[^"]*" href="[^"]*"></a>')  # a code line's own link
_STASHED = re.compile(r"<!--book-stash:(\d+)-->")


def _stash(text: str) -> tuple[str, list[str]]:
    """Typeset math, SVG figures and code blocks set aside as comments: most of a page's markup, and nothing in them
    changes for print (math has no ids or links, an SVG's own ids stay as they are, a code line's anchor to itself
    is dropped), so the HTML parser skips them."""
    text = _LINE_ANCHOR.sub("", text)
    out, saved, pos = [], [], 0
    while (m := _HEAVY.search(text, pos)) is not None:
        nest = _NEST[m.group(0)[1:4] if m.group(0)[1:4] in ("svg", "pre") else "span"]
        depth, end = 0, m.start()
        for t in nest.finditer(text, m.start()):
            depth += -1 if t.group(0).startswith("</") else 1
            if depth == 0:
                end = t.end()
                break
        else:
            raise SystemExit(f"pdf: unbalanced {m.group(0)} at {m.start()}")
        out += [text[pos:m.start()], f"<!--book-stash:{len(saved)}-->"]
        saved.append(text[m.start():end])
        pos = end
    out.append(text[pos:])
    return "".join(out), saved


def _unstash(text: str, saved: list[str]) -> str:
    return _STASHED.sub(lambda m: saved[int(m.group(1))], text)


def _text(tag) -> str:
    """A heading's text (its permalink is already gone; stashed math is left out)."""
    return " ".join(tag.get_text(" ").split())


def site_info(site: Path) -> dict:
    """Book title, stylesheets (root-absolute), body attributes, published address, from the landing page."""
    soup = _soup((site / "index.html").read_text(encoding="utf-8"))
    title = (soup.title.string or "").strip()
    css = [urljoin("/", ln["href"]) for ln in soup.find_all("link", rel="stylesheet")]
    body = {k: v for k, v in soup.body.attrs.items() if k.startswith("data-md-color") or k == "dir"}
    canonical = soup.find("link", rel="canonical")
    site_url = canonical["href"] if canonical else None
    repo = soup.select_one("a.md-source")
    return {"title": title, "css": css, "body": body, "site_url": site_url,
            "repo_url": repo["href"] if repo else None}


def read_section(site: Path, url: str, pid: str, label: str, targets: dict[str, str], site_url: str | None
                 ) -> Section:
    """The page's article, rewritten for a print document in which `targets` maps site pages to their pid."""
    path = site / url / "index.html"
    if not path.exists():
        raise SystemExit(f"pdf: {path} is missing: build the site first (mkdocs build --strict -d {site})")
    page_html = path.read_text(encoding="utf-8")
    start, end = page_html.find("<article"), page_html.rfind("</article>")
    if start < 0 or end < 0:
        raise SystemExit(f"pdf: {path} has no <article>")
    light, saved = _stash(page_html[start:end + len("</article>")])
    soup = _soup(light)
    art = soup.find("article")
    if art is None:
        raise SystemExit(f"pdf: {path} has no <article>")
    page_abs = "/" + url

    def pref(v: str) -> str:
        return f"{pid}-{v}"

    # one pass over the elements (math, SVG and code are stashed away, see _stash): drop what paper cannot use,
    # prefix every id (headings, anchors, tab inputs) so that pages do not collide, point links into the document
    for tag in art.find_all(True):
        if tag.decomposed:
            continue
        cls = tag.get("class") or []
        if tag.name in ("script", "noscript") or (tag.name == "a" and ("headerlink" in cls or "anchor-link" in cls)) \
                or "md-source-file" in cls or "md-content__button" in cls or "md-feedback" in cls:
            tag.decompose()
            continue
        if "calc-widget" in cls:
            note = soup.new_tag("p", attrs={"class": "book-print-note"})
            where = site_url + url if site_url else f"사이트의 {url} 페이지"
            note.string = f"[대화형 계산기: {where} 에서 입력을 바꿔 가며 계산할 수 있습니다.]"
            tag.replace_with(note)
            continue
        if tag.get("id"):
            tag["id"] = pref(tag["id"])
        if tag.name == "label" and tag.get("for"):
            tag["for"] = pref(tag["for"])
        if tag.name == "input" and tag.get("name"):
            tag["name"] = pref(tag["name"])
        for attr in ("href", "src"):
            v = tag.get(attr)
            if v is None:
                continue
            tag[attr] = _rewrite(v, attr, page_abs, pid, targets, site_url)
            if tag[attr] is None:  # a site page outside this PDF, and no published address to point at
                del tag[attr]
                if tag.name == "a":
                    tag.unwrap()
                break

    h1 = art.find("h1")
    title = _text(h1) if h1 else url
    if h1 is not None:
        h1["id"] = pid  # the page's own anchor (its heading id was prefixed above; links use the pid)
    h2 = [(t["id"], _text(t)) for t in art.find_all("h2") if t.get("id")]

    # solutions: the <details> that follow the problems in "🤔 생각해볼 문제", up to the next h2
    solutions = []
    head = art.find("h2", id=pref(SOLUTIONS_H2))
    if head is not None:
        for sib in list(head.find_next_siblings()):
            if sib.name == "h2":
                break
            if sib.name == "details":
                sib["open"] = ""
                sib["class"] = sib.get("class", []) + ["book-solution"]
                solutions.append(str(sib))
                sib.replace_with(soup.new_string(SOLUTION_MARK.format(len(solutions) - 1), _comment_type()))
    for d in art.find_all("details"):  # paper cannot be clicked: the other collapsible blocks print open, except
        summary = d.find("summary")      # the code folded away because it only shapes a table or figure
        if summary is None or not FOLDED_CODE.search(summary.get_text()):
            d["open"] = ""
    return Section(url, pid, label, title, h2, _unstash(art.decode_contents(), saved),
                   [_unstash(x, saved) for x in solutions])


def _comment_type():
    from bs4 import Comment

    return Comment


def _rewrite(value: str, attr: str, page_abs: str, pid: str, targets: dict[str, str], site_url: str | None):
    """A link in the print document: into the document where the target page is in it, to the published site
    where it is not (or dropped when the site has no address), assets root-absolute on the local server."""
    if value.startswith(("data:", "mailto:", "javascript:")) or urlsplit(value).scheme:
        return value
    if value.startswith("#"):
        return f"#{pid}-{value[1:]}" if value[1:] else f"#{pid}"
    absolute = urljoin(page_abs, value)
    parts = urlsplit(absolute)
    path = unquote(parts.path)
    if attr == "src" or not (path.endswith("/") or path.endswith(".html")):
        return absolute  # an asset (image, notebook download): served beside the print document
    page = path.lstrip("/").removesuffix("index.html")
    if page in targets:
        frag = unquote(parts.fragment)
        return f"#{targets[page]}-{frag}" if frag else f"#{targets[page]}"
    if site_url:
        return site_url + absolute.lstrip("/")
    return None


# ------------------------------------------------------------------------------------- the print document

PRINT_CSS = """
@page { size: A4; margin: 14mm 14mm 16mm 14mm; }
html { background: #fff; }
body.book-print { display: block; background: #fff; }
.book-print .md-typeset { font-size: .68rem; }
.book-print .md-content__inner { margin: 0; padding: 0; }
.book-print .md-content__inner::before { display: none; }
.book-print .md-typeset h1 { color: var(--md-default-fg-color); margin-bottom: .8em; }
.book-cover { height: 255mm; display: flex; flex-direction: column; justify-content: space-between;
  break-after: page; }
.book-cover .book-cover-title { font-size: 2.6em; font-weight: 300; margin: 30mm 0 0; line-height: 1.2; }
.book-cover .book-cover-sub { font-size: 1.8em; margin: .6em 0 0; color: var(--md-primary-fg-color); }
.book-cover .book-cover-edition { display: inline-block; margin-top: 2em; padding: .3em .8em; font-size: 1.1em;
  border: .1rem solid var(--md-primary-fg-color); border-radius: .2rem; }
.book-cover table.book-prov { font-size: .8em; border-collapse: collapse; }
.book-cover table.book-prov th { text-align: left; padding: .2em 1em .2em 0; white-space: nowrap;
  font-weight: 700; vertical-align: top; }
.book-cover table.book-prov td { padding: .2em 0; overflow-wrap: anywhere; }
.book-toc h1 { margin-bottom: .6em; }
#toc { break-before: page; }
.book-toc ol { list-style: none !important; margin: 0 !important; padding: 0; }
.book-toc li { margin: 0 !important; list-style: none !important; }
.book-toc li li { margin-left: 1.4em !important; }
.book-toc a { color: inherit; text-decoration: none; display: flex; gap: .5em; }
.book-toc a .t { flex: 1 1 auto; }
.book-toc a .n { flex: 0 0 3em; text-align: right; font-variant-numeric: tabular-nums; }
.book-toc .toc-chapter > a { font-weight: 700; margin-top: .8em; font-size: 1.1em; }
.book-toc .toc-page > a { font-weight: 600; margin-top: .45em; }
.book-toc .toc-h2 > a { font-size: .9em; color: var(--md-default-fg-color--light); }
.book-chapter { break-before: page; }
.book-print .md-typeset h1.book-chapter-title { font-size: 2.2em; font-weight: 300; margin: 4mm 0 .8em; color: var(--md-primary-fg-color); }
.book-doc { break-before: page; }
.book-doc .book-doc-label { font-size: .8em; color: var(--md-default-fg-color--light); margin: 0 0 .3em; }
.book-print a[data-book-offsite] { color: inherit; }
.book-print-note { font-style: italic; color: var(--md-default-fg-color--light); }
.book-solution-omitted { font-size: .85em; color: var(--md-default-fg-color--light); border-left: .2rem solid
  #00c853; padding-left: .6em; }
.book-print details > summary::after { display: none; }
"""

FIT_JS = """(width) => {
  // Scale what is wider than its box down to that width (CSS zoom changes layout, so text reflows around it);
  // outermost first, then report whatever still reaches past the page's right edge.
  const body = document.querySelector('article');
  const edge = body.getBoundingClientRect().left + width + 1;
  const sel = 'table, pre, .katex-display, div.arithmatex, figure, svg, img, .highlight, .jp-OutputArea-output, '
            + '.jp-RenderedHTMLCommon, .tabbed-set, .admonition, details, .md-typeset__scrollwrap';
  const scaled = [];
  for (const el of body.querySelectorAll(sel)) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    const r = el.getBoundingClientRect();
    const parent = el.parentElement.getBoundingClientRect();
    const avail = Math.min(edge - 1, parent.right) - r.left;
    const need = Math.max(r.width, el.scrollWidth);
    if (need > avail + 1 && avail > 20) {
      el.style.zoom = Math.max(0.3, avail / need).toFixed(3);
      const doc = el.closest('section[id]');
      scaled.push((doc ? doc.id.replace(/^sec-/, '') : '?') + ': ' + el.tagName.toLowerCase() + ' ×' + el.style.zoom);
    }
  }
  const name = el => el.tagName.toLowerCase() + (typeof el.className === 'string' && el.className
                       ? '.' + el.className.split(' ')[0] : '');
  const past = [];  // a few px into the 14 mm margin (an inline code box's padding at a line end) is not clipped
  const slack = 8;
  for (const el of body.querySelectorAll('*')) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && r.right > edge + slack) {
      const doc = el.closest('section[id]');
      past.push((doc ? doc.id : "?") + ": " + name(el) + " +" + Math.round(r.right - edge) + "px " + (el.textContent || "").slice(0, 60).replace(/\s+/g, " "));
    }
  }
  return {scaled, past};
}"""


def _cover(info: dict, prov: dict, subtitle: str, edition: str, extra: str = "") -> str:
    rows = [("인쇄 판", EDITIONS[edition]), ("Git commit", prov["commit"]), ("만든 때 (UTC)", prov["date"]),
            ("인쇄", f"scripts/pdf.py · {prov['browser']}")]
    if info.get("site_url"):
        rows.append(("사이트", info["site_url"]))
    if info.get("repo_url"):
        rows.append(("저장소", info["repo_url"]))
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (f'<section class="book-cover" id="cover"><div><p class="book-cover-title">{html.escape(info["title"])}'
            f'</p><p class="book-cover-sub">{html.escape(subtitle)}</p>{extra}'
            f'<p class="book-cover-edition">{html.escape(EDITIONS[edition])}</p></div>'
            f'<table class="book-prov">{table}</table></section>')


def _toc_item(cls: str, href: str, text: str, pages: dict[str, int], children: str = "") -> str:
    n = pages.get(href, "")
    return (f'<li class="{cls}"><a href="#{href}"><span class="t">{html.escape(text)}</span>'
            f'<span class="n">{n}</span></a>{children}</li>')


def _doc_toc(sections: list[Section], pages: dict[str, int], with_h2: bool) -> str:
    items = []
    for s in sections:
        sub = ""
        if with_h2 and s.h2:
            sub = "<ol>" + "".join(_toc_item("toc-h2", i, t, pages) for i, t in s.h2) + "</ol>"
        items.append(_toc_item("toc-page", s.pid, f"{s.label} {s.title}", pages, sub))
    return "<ol>" + "".join(items) + "</ol>"


def _body(s: Section, edition: str) -> str:
    def put(m):
        if edition == "instructor":
            return s.solutions[int(m.group(1))]
        return '<p class="book-solution-omitted">해설은 강사용 판에 있습니다.</p>'

    body = re.sub(r"<!--book-solution:(\d+)-->", put, s.body)
    return f'<section class="book-doc" id="sec-{s.pid}"><p class="book-doc-label">{html.escape(s.label)}</p>{body}</section>'


def _opener(c: book.Chapter, secs: list[Section], pages: dict[str, int]) -> str:
    """A chapter's first page: its number, title and contents (pages and their ## sections). The same HTML opens the
    chapter in its own PDF and in the whole book, so it takes the same number of sheets in both."""
    return (f'<section class="book-chapter" id="chapter-{c.number}"><p class="book-doc-label">{c.number} 장</p>'
            f'<h1 class="book-chapter-title">{html.escape(c.title)}</h1><div class="book-toc">'
            f'{_doc_toc(secs, pages, True)}</div></section>')


def document(info: dict, prov: dict, edition: str, kind: str, chapters: list[tuple[book.Chapter, list[Section]]],
             appendix: list[Section], pages: dict[str, int]) -> str:
    """The print HTML of one `kind`:
    chapter   cover, the chapter's opener (its contents), its pages and lab
    book      cover, contents (chapters, pages, appendices), then each chapter as above, then the appendices
    front     the book's cover and contents only, and appendix the appendices only: printed to count their sheets
    """
    parts, front = [], ""
    if kind in ("book", "front"):
        subtitle = f"전체 {len(chapters)} 장 · 부록"
        toc = "<ol>" + "".join(_toc_item("toc-chapter", f"chapter-{c.number}", f"{c.number} 장. {c.title}", pages,
                                         _doc_toc(secs, pages, False)) for c, secs in chapters)
        toc += "".join(_toc_item("toc-page", s.pid, f"{s.label} {s.title}", pages) for s in appendix) + "</ol>"
        front = (_cover(info, prov, subtitle, edition)
                 + f'<section class="book-toc" id="toc"><h1>차례</h1>{toc}</section>')
        title = f"{info['title']} ({EDITIONS[edition]})"
    if kind == "book":
        for c, secs in chapters:
            parts += [_opener(c, secs, pages)] + [_body(s, edition) for s in secs]
        parts += [_body(s, edition) for s in appendix]
    elif kind == "appendix":  # links to each appendix, after them, so that each gets a named destination
        parts = [_body(s, edition) for s in appendix]
        parts.append('<section class="book-doc">' + "".join(f'<a href="#{s.pid}">{s.pid}</a> ' for s in appendix)
                     + "</section>")
        title = "appendix"
    elif kind == "chapter":
        (c, secs), = chapters
        front = _cover(info, prov, f"{c.number} 장. {c.title}", edition)
        parts = [_opener(c, secs, pages)] + [_body(s, edition) for s in secs]
        title = f"{info['title']} — {c.number} 장. {c.title} ({EDITIONS[edition]})"
    held = {s.pid for _, secs in chapters for s in secs} | {s.pid for s in appendix}
    if kind == "chapter":
        held = {s.pid for _, secs in chapters for s in secs}
    parts = [outside_links(p, held, info.get("site_url")) for p in parts]
    css = "".join(f'<link rel="stylesheet" href="{html.escape(h)}">' for h in info["css"])
    attrs = " ".join(f'{k}="{html.escape(v)}"' for k, v in info["body"].items())
    return (f'<!doctype html><html lang="ko"><head><meta charset="utf-8"><title>{html.escape(title)}</title>{css}'
            f'<style>{PRINT_CSS}</style></head><body class="book-print" {attrs}><div class="md-container">'
            f'<main class="md-main"><div class="md-content"><article class="md-content__inner md-typeset">'
            f'{front}{"".join(parts)}</article></div></main></div></body></html>')


def footer(text: str) -> str:
    return ('<div style="width:100%;font-size:7.5px;color:#666;padding:0 14mm;display:flex;'
            'justify-content:space-between;font-family:sans-serif">'
            f'<span>{html.escape(text)}</span><span><span class="pageNumber"></span> / '
            '<span class="totalPages"></span></span></div>')


# ------------------------------------------------------------------------------------------------ printing

class _Handler(http.server.SimpleHTTPRequestHandler):
    documents: dict[str, bytes] = {}

    def do_GET(self):  # noqa: N802
        doc = self.documents.get(urlsplit(self.path).path)
        if doc is None:
            return super().do_GET()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(doc)))
        self.end_headers()
        self.wfile.write(doc)

    def log_message(self, *args):
        pass


class Printer:
    """A local server for the built site (plus print documents from memory) and one headless Chromium."""

    def __init__(self, site: Path):
        self.docs: dict[str, bytes] = {}
        handler = type("H", (_Handler,), {"documents": self.docs})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler,
                                                                                         directory=str(site)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=chromium(), args=CHROME_ARGS)

    def close(self):
        self.browser.close()
        self._pw.stop()
        self.httpd.shutdown()

    def print(self, name: str, doc: str, out: Path, foot: str) -> dict:
        """Print `doc` to `out`; return what was scaled to fit the page width (and what still does not fit)."""
        path = f"/__pdf__/{name}.html"
        self.docs[path] = doc.encode("utf-8")
        page = self.browser.new_page(viewport={"width": CONTENT_WIDTH_PX, "height": 1000})
        foreign: list[str] = []
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith((self.base, "data:", "blob:"))
                   else (foreign.append(r.request.url), r.abort()))
        try:
            page.emulate_media(media="print")
            page.goto(self.base + path, wait_until="load", timeout=300_000)
            page.evaluate("document.fonts.ready.then(() => true)")
            fit = page.evaluate(FIT_JS, CONTENT_WIDTH_PX)
            if fit["past"]:
                raise SystemExit(f"pdf: {name}: {len(fit['past'])} element(s) still wider than the page after "
                                 f"scaling: {fit['past'][:10]}")
            page.pdf(path=str(out), format="A4", print_background=True, display_header_footer=True,
                     header_template="<span></span>", footer_template=footer(foot), margin=MARGIN, outline=True,
                     tagged=True)
        finally:
            page.close()
            del self.docs[path]
        if foreign:
            raise SystemExit(f"pdf: {name} asked for another host: {foreign[:5]}")
        return fit

    @property
    def version(self) -> str:
        return f"Chromium {self.browser.version}"


def target_pages(pdf: Path) -> tuple[dict[str, int], int]:
    """The page (1-based) of each named destination Chromium wrote for an in-document link target; the page count."""
    from pypdf import PdfReader

    reader = PdfReader(str(pdf))
    out = {}
    for name, dest in reader.named_destinations.items():
        try:
            out[unquote(name).lstrip("/")] = reader.get_destination_page_number(dest) + 1
        except Exception:  # noqa: BLE001 - a destination without a page: leave it out of the TOC numbers
            continue
    return out, len(reader.pages)


def provenance() -> dict:
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " (커밋되지 않은 변경 포함)"
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch else datetime.now(timezone.utc)
    return {"commit": commit, "date": when.strftime("%Y-%m-%d %H:%M")}


def chapter_targets(chapter: book.Chapter) -> dict[str, str]:
    t = {d.url: f"ch{chapter.number}-{d.number:02d}" for d in chapter.docs}
    t[chapter.lab_path.removesuffix(".py") + "/"] = f"ch{chapter.number}-lab"
    return t


# every page a print document can hold -> its id prefix there. Pages are read once, with links between any two
# of them made in-document links; document() turns those whose target is not in that PDF into site links.
TARGETS = {**{k: v for c in book.CHAPTERS for k, v in chapter_targets(c).items()},
           **{url: f"app-{url.strip('/')}" for url, _ in APPENDICES}}


def chapter_sections(site: Path, chapter: book.Chapter, site_url: str | None) -> list[Section]:
    secs = [read_section(site, d.url, f"ch{chapter.number}-{d.number:02d}", book.key(d), TARGETS, site_url)
            for d in chapter.docs if d.written]
    lab = chapter.lab_path.removesuffix(".py") + "/"
    if (site / lab / "index.html").exists():
        lab_sec = read_section(site, lab, f"ch{chapter.number}-lab", f"Ch{chapter.number} 실습", TARGETS, site_url)
        lab_sec.title = re.sub(r"^Chapter \d+ 실습\s*[:：]\s*", "", lab_sec.title)  # the label says it
        secs.append(lab_sec)
    return secs


def appendix_sections(site: Path, site_url: str | None) -> list[Section]:
    return [read_section(site, url, TARGETS[url], label, TARGETS, site_url)
            for url, label in APPENDICES if (site / url / "index.html").exists()]


_PID = re.compile(r"(ch\d+-(?:\d\d|lab)|app-[a-z]+)(?:-(.*))?")


def outside_links(doc_html: str, held: set[str], site_url: str | None) -> str:
    """Links to pages that this PDF does not hold: to the published page, or no link without an address."""
    url_of = {v: k for k, v in TARGETS.items()}

    def fix(m):
        pid = _PID.fullmatch(html.unescape(m.group(1)))
        if pid is None or pid.group(1) in held or pid.group(1) not in url_of:
            return m.group(0)
        if not site_url:
            return ' data-book-offsite=""'
        frag = pid.group(2)
        return f' href="{html.escape(site_url + url_of[pid.group(1)] + ("#" + frag if frag else ""))}"'

    return re.sub(r'\shref="#([^"]*)"', fix, doc_html)


def make(site: Path, out: Path, chapters: list[book.Chapter], editions: list[str], whole_book: bool,
         per_chapter: bool, log=functools.partial(print, flush=True)) -> dict:
    """Print the PDFs; return the manifest (also written to out/manifest.json).

    Page numbers in the contents need the pages to be laid out first, so each chapter is printed twice: once to find
    on which page each page and section starts (Chromium writes a named destination for every link target), then
    with those numbers (the contents take the same room either way). The whole book is printed once: every page
    starts on a new sheet, so a page takes as many sheets in the book as in its chapter's PDF, and the book's
    numbers follow from the chapters' first prints, its front matter and its appendices (printed alone to count
    their sheets). Each PDF is then read back: a number in its contents that is not where the target landed fails
    the run (for the book it prints a second time instead, with the numbers read back)."""
    out.mkdir(parents=True, exist_ok=True)
    info = site_info(site)
    prov = provenance()
    t0 = time.perf_counter()
    printer = Printer(site)
    prov["browser"] = printer.version
    files = []

    def record(pdf: Path, ed: str, chs, fit: dict, t1: float) -> None:
        entry = {"file": pdf.name, "edition": ed, "chapters": [c.folder for c in chs],
                 "pages": target_pages(pdf)[1], "bytes": pdf.stat().st_size,
                 "sha256": hashlib.sha256(pdf.read_bytes()).hexdigest(), "scaled_to_fit": fit["scaled"],
                 "seconds": round(time.perf_counter() - t1, 1)}
        files.append(entry)
        log(f"pdf: {pdf.name}: {entry['pages']} pages, {entry['bytes'] / 1e6:.1f} MB, "
            f"{len(fit['scaled'])} wide element(s) scaled to fit, {entry['seconds']} s")

    def misplaced(pdf: Path, numbers: dict[str, int], chs: list[tuple[book.Chapter, list[Section]]],
                  appendix: list[Section]) -> list[str]:
        """Entries of the contents whose number is not the page their target landed on."""
        landed, _ = target_pages(pdf)
        keys = {f"chapter-{c.number}" for c, _ in chs} | {s.pid for s in appendix} | {
            k for _, secs in chs for s in secs for k in [s.pid] + [i for i, _ in s.h2]}
        return [f"{k}: contents say {numbers.get(k)}, printed on {landed.get(k)}" for k in sorted(keys)
                if k in landed and landed[k] != numbers.get(k)]

    try:
        parsed = {c.folder: chapter_sections(site, c, info["site_url"]) for c in chapters}
        appendix = appendix_sections(site, info["site_url"]) if whole_book else []
        log(f"pdf: read {sum(len(v) for v in parsed.values()) + len(appendix)} pages in "
            f"{time.perf_counter() - t0:.1f} s")
        measured: dict[tuple[str, str], tuple[dict[str, int], int]] = {}
        for c in chapters:
            secs = parsed[c.folder]
            for ed in editions:
                t1 = time.perf_counter()
                name = f"{c.folder}.{ed}"
                pdf = out / f"{name}.pdf"
                foot = f"{info['title']} · {c.number} 장. {c.title} · {EDITIONS[ed]}"
                printer.print(name, document(info, prov, ed, "chapter", [(c, secs)], [], {}), pdf, foot)
                dests, n = target_pages(pdf)
                dests[f"chapter-{c.number}"] = 2  # the opener follows the one-sheet cover
                measured[(c.folder, ed)] = (dests, n)
                if not per_chapter:
                    pdf.unlink()
                    continue
                fit = printer.print(name, document(info, prov, ed, "chapter", [(c, secs)], [], dests), pdf, foot)
                wrong = misplaced(pdf, dests, [(c, secs)], [])
                if wrong:
                    raise SystemExit(f"pdf: {pdf.name}: the contents moved between the two prints: {wrong[:5]}")
                record(pdf, ed, [c], fit, t1)
        if whole_book:
            t1 = time.perf_counter()
            chs = [(c, parsed[c.folder]) for c in chapters]
            scratch = out / ".measure.pdf"
            printer.print("front", document(info, prov, editions[0], "front", chs, appendix, {}), scratch, "")
            front_sheets = target_pages(scratch)[1]
            printer.print("appendix", document(info, prov, editions[0], "appendix", [], appendix, {}), scratch, "")
            app_dests, _ = target_pages(scratch)
            scratch.unlink()
            for ed in editions:
                numbers, start = {}, front_sheets + 1
                for c in chapters:
                    dests, n = measured[(c.folder, ed)]
                    numbers.update({k: start + p - 2 for k, p in dests.items() if p >= 2})
                    start += n - 1
                numbers.update({k: start + p - 1 for k, p in app_dests.items()})
                pdf = out / f"book.{ed}.pdf"
                foot = f"{info['title']} · {EDITIONS[ed]}"
                doc = functools.partial(document, info, prov, ed, "book", chs, appendix)
                fit = printer.print(f"book.{ed}", doc(numbers), pdf, foot)
                wrong = misplaced(pdf, numbers, chs, appendix)
                if wrong:
                    log(f"pdf: {pdf.name}: {len(wrong)} contents entries off ({wrong[:3]}): printing again")
                    fit = printer.print(f"book.{ed}", doc(target_pages(pdf)[0]), pdf, foot)
                record(pdf, ed, chapters, fit, t1)
                t1 = time.perf_counter()
    finally:
        printer.close()
    manifest = {"generator": "scripts/pdf.py", **prov, "seconds": round(time.perf_counter() - t0, 1),
                "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return manifest


LANDING_MARK = "<!-- book-pdf -->"  # in docs/index.md: where the landing page links the PDFs once they exist


def publish(site: Path, out: Path, manifest: dict, log=print) -> None:
    """PDFs printed into SITE/pdf (what the site publishes): a list of them at pdf/, linked from the landing page
    where docs/index.md has LANDING_MARK. A build without PDFs has neither, so no link points at a missing file."""
    if out.resolve() != (site / "pdf").resolve():
        return
    info = site_info(site)
    names = {(f["chapters"][0] if len(f["chapters"]) == 1 and not f["file"].startswith("book.") else "book",
              f["edition"]): f for f in manifest["files"]}
    rows = []
    for key, label in [("book", "전체 책 (부록 포함)")] + [(c.folder, f"{c.number} 장. {c.title}") for c in book.CHAPTERS]:
        cells = []
        for ed in EDITIONS:
            f = names.get((key, ed))
            cells.append(f'<a href="{f["file"]}">{f["pages"]} 쪽, {f["bytes"] / 1e6:.1f} MB</a>' if f else "—")
        if any(c != "—" for c in cells):
            rows.append(f"<tr><td>{html.escape(label)}</td><td>{cells[0]}</td><td>{cells[1]}</td></tr>")
    css = "".join(f'<link rel="stylesheet" href="..{html.escape(h)}">' for h in info["css"])
    (out / "index.html").write_text(
        f'<!doctype html><html lang="ko"><head><meta charset="utf-8"><meta name="viewport" '
        f'content="width=device-width,initial-scale=1"><title>인쇄용 PDF - {html.escape(info["title"])}</title>{css}'
        f'</head><body><div class="md-content"><article class="md-content__inner md-typeset" style="max-width:48rem;'
        f'margin:1rem auto"><h1>인쇄용 PDF</h1><p><a href="../">{html.escape(info["title"])}</a> 의 A4 PDF 입니다. '
        f'학생용은 연습 문제의 해설을 빼고, 강사용은 해설을 펼쳐 담습니다. Git commit <code>'
        f'{html.escape(manifest["commit"])}</code>, {html.escape(manifest["date"])} UTC, '
        f'{html.escape(manifest["browser"])} 로 인쇄 (<a href="manifest.json">manifest.json</a>: 파일별 쪽 수와 sha256).'
        f'</p><table><thead><tr><th>PDF</th><th>{EDITIONS["student"]}</th><th>{EDITIONS["instructor"]}</th></tr>'
        f'</thead><tbody>{"".join(rows)}</tbody></table></article></div></body></html>\n', encoding="utf-8")
    landing = site / "index.html"
    text = landing.read_text(encoding="utf-8")
    if LANDING_MARK not in text and '<p class="book-pdf">' not in text:
        log(f"pdf: {landing} has no {LANDING_MARK}: the landing page does not link the PDFs")
        return
    whole = [names[("book", ed)] for ed in EDITIONS if ("book", ed) in names]
    links = " · ".join(f'<a href="pdf/{f["file"]}">{EDITIONS[f["edition"]].split(" —")[0]}</a> ({f["pages"]} 쪽)'
                       for f in whole)
    para = (f'<p class="book-pdf">📄 <strong>종이로 읽기</strong> (A4 PDF): '
            f'{"전체 책 " + links + ", " if links else ""}<a href="pdf/">장별 PDF 와 목록</a></p>')
    text = re.sub(r'<p class="book-pdf">.*?</p>', lambda _: para, text, count=1, flags=re.S)  # printed before
    landing.write_text(text.replace(LANDING_MARK, para, 1), encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", type=Path, help="a built site (mkdocs build --strict -d SITE)")
    ap.add_argument("-o", "--out", type=Path, help="where the PDFs go (default SITE/pdf)")
    ap.add_argument("--chapters", help="comma-separated chapter folders (default: every chapter)")
    ap.add_argument("--editions", default="student,instructor")
    ap.add_argument("--no-book", action="store_true", help="no whole-book PDF")
    ap.add_argument("--no-chapters", action="store_true", help="no per-chapter PDFs")
    a = ap.parse_args(argv)
    chapters = list(book.CHAPTERS)
    if a.chapters:
        wanted = a.chapters.split(",")
        unknown = set(wanted) - {c.folder for c in chapters}
        if unknown:
            ap.error(f"unknown chapter(s): {sorted(unknown)}")
        chapters = [c for c in chapters if c.folder in wanted]
    editions = a.editions.split(",")
    if set(editions) - set(EDITIONS):
        ap.error(f"editions are {sorted(EDITIONS)}")
    t0 = time.perf_counter()
    out = a.out or a.site / "pdf"
    m = make(a.site, out, chapters, editions, not a.no_book, not a.no_chapters)
    publish(a.site, out, m)
    print(f"pdf: {len(m['files'])} PDFs, {sum(f['pages'] for f in m['files'])} pages, "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

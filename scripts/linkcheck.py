"""Walk a built site: every internal link resolves, and no TeX is left unrendered.

mkdocs --strict checks the links written in a page's Markdown. It does not see links that reach the HTML another
way: a code cell's printed output (markdown-exec renders it after mkdocs has resolved the page's links), a
notebook's Markdown cells (mkdocs-jupyter copies them as they are), the notebook files themselves. This walk reads
what a reader's browser gets:

- every ``href``/``src`` of every built ``.html`` page, and every link in the Markdown cells and HTML outputs of
  every published ``.ipynb``, resolved against that file's own place in the site, must name a file that exists
  and, when it carries ``#anchor`` into an HTML page, an element with that id;
- no visible text of a page (outside code, scripts, SVG and typeset math) still holds ``$…$`` or a TeX command,
  which is what a formula arithmatex did not recognise looks like (``$= $`` with a space before the closing $).

    python scripts/linkcheck.py build/site     # prints each problem, exits 1 if there is any

tests/site/test_links.py runs it on the suite's build.
"""
from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
NOT_TEXT = {"code", "pre", "script", "style", "textarea", "svg", "math", "kbd", "samp"}
TEX_LEFT = re.compile(r"\$[^$\n]{1,80}\$|\\\(|\\\[|\\(?:frac|mathrm|mathsf|text|sum|cdot|times|alpha|beta)\b")
MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")


class _Page(HTMLParser):
    """Links, element ids and visible text left with TeX, of one HTML document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.tex: list[str] = []
        self._stack: list[tuple[str, bool]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("id", "name"):
            if a.get(k):
                self.ids.add(a[k])
        for k in ("href", "src"):
            if a.get(k) is not None and not (tag == "link" and k == "href" and a.get("rel") in ("canonical",)):
                self.links.append(a[k])
        if tag in VOID:
            return
        classes = (a.get("class") or "").split()
        self._stack.append((tag, tag in NOT_TEXT or "katex" in classes or "arithmatex" in classes))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self._stack and self._stack[-1][0] == tag:
            self._stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break

    def handle_data(self, data):
        if any(skip for _, skip in self._stack):
            return
        m = TEX_LEFT.search(data)
        if m:
            self.tex.append(data.strip()[:160])


def _parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def _notebook_links(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    links: list[str] = []
    for cell in nb.get("cells", []):
        text = "".join(cell.get("source", []))
        if cell.get("cell_type") == "markdown":
            links += MD_LINK.findall(text) + HTML_LINK.findall(text)
        for out in cell.get("outputs", []):
            html = "".join((out.get("data") or {}).get("text/html", []))
            md = "".join((out.get("data") or {}).get("text/markdown", []))
            links += HTML_LINK.findall(html) + MD_LINK.findall(md)
    return links


def _is_internal(url: str) -> bool:
    u = urlsplit(url)
    return not (u.scheme or u.netloc or url.startswith("//"))


def check(site: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(broken links as (file, link, why), unrendered TeX as (file, text)) of the built site under `site`."""
    site = site.resolve()
    pages = {p.resolve(): _parse(p) for p in site.rglob("*.html")}
    sources = {**{p: (d.links, d) for p, d in pages.items()},
               **{nb.resolve(): (_notebook_links(nb), None) for nb in site.rglob("*.ipynb")}}
    broken: list[tuple[str, str, str]] = []
    for src, (links, _) in sorted(sources.items()):
        for url in links:
            if not _is_internal(url):
                continue
            u = urlsplit(url)
            path = unquote(u.path)
            if not path:
                target = src
            elif path.startswith("/"):
                target = site / path.lstrip("/")
            else:
                target = src.parent / path
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            rel = str(src.relative_to(site))
            if not target.is_file() or site not in target.parents:
                broken.append((rel, url, "no such file"))
            elif u.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(u.fragment) not in ids:
                    broken.append((rel, url, "no such anchor"))
    tex = [(str(p.relative_to(site)), t) for p, d in sorted(pages.items()) for t in d.tex]
    return broken, tex


def main(argv: list[str]) -> int:
    site = Path(argv[1] if len(argv) > 1 else "site")
    broken, tex = check(site)
    for rel, url, why in broken:
        print(f"{rel}: {url}  ({why})")
    for rel, text in tex:
        print(f"{rel}: unrendered TeX: {text}")
    print(f"{len(broken)} broken links, {len(tex)} unrendered formulas under {site}")
    return 1 if broken or tex else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

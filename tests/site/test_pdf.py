"""The book on paper (scripts/pdf.py, `make pdf`): one chapter printed in both editions, read back from the PDFs.

Chapter 6 is the smallest chapter (four pages and a lab). Both its PDFs are printed by the same Chromium as the
other browser tests, from the session's built site, and opened with pypdf: page count, the chapter's and every
page's title in the text, page numbers in the footer and in the table of contents, and every exercise solution of
the chapter absent from the students' edition and present in the instructors'. The solutions' text is taken from
the built HTML (the ``<details>`` under "🤔 생각해볼 문제"), not typed in here, so the check follows the pages.
The whole-book path is checked without printing it: its print document has every chapter, the appendices, and
every in-document link lands on an element of that document.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from snippets import book
from tests.site.test_browser import CHROMIUM

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium")]

sys.path.insert(0, str(book.ROOT / "scripts"))
import pdf  # noqa: E402

CHAPTER = next(c for c in book.CHAPTERS if c.folder == "ch6-activation-memory")
# One solution sentence, by hand, so that a reader of this test sees what "solution text" means (Ch6-01, 문제 2).
KNOWN_SOLUTION = "Tensor parallel 은"


def squash(text: str) -> str:
    """Text without whitespace: PDF text extraction breaks lines and spaces Korean words its own way."""
    return re.sub(r"\s+", "", text)


def solution_snippets(site: Path) -> list[str]:
    """From each solution of the chapter in the built HTML: its longest run of prose between formulas and code."""
    out = []
    for doc in CHAPTER.docs:
        soup = pdf._soup((site / doc.url / "index.html").read_text(encoding="utf-8"))
        head = soup.find("h2", id=pdf.SOLUTIONS_H2)
        for sib in head.find_next_siblings():
            if sib.name == "h2":
                break
            if sib.name != "details":
                continue
            sib.summary.decompose()
            for drop in sib.select(".katex, .arithmatex, pre, code, .tabbed-set, table, svg"):
                drop.replace_with("\n")
            runs = [squash(r) for r in sib.get_text().split("\n")]
            best = max(runs, key=len)
            assert len(best) >= 12, (doc.url, runs)
            out.append(best[:40])
    return out


class Printed:
    """A printed PDF, its text read page by page when first asked for (pypdf takes ~0.15 s a page here)."""

    def __init__(self, path: Path):
        from pypdf import PdfReader

        self.reader = PdfReader(str(path))
        self.n = len(self.reader.pages)
        self._text: dict[int, str] = {}
        self.dests, _ = pdf.target_pages(path)  # id -> page where it landed

    def page(self, number: int) -> str:
        """The text of page `number` (1-based)."""
        if number not in self._text:
            self._text[number] = self.reader.pages[number - 1].extract_text()
        return self._text[number]

    def text(self, first: int = 1, last: int | None = None) -> str:
        return "\n".join(self.page(i) for i in range(first, (last or self.n) + 1))


@pytest.fixture(scope="module")
def printed(built_site, tmp_path_factory):
    site, _, _ = built_site
    out = tmp_path_factory.mktemp("pdf")
    manifest = pdf.make(site, out, [CHAPTER], ["student", "instructor"], whole_book=False, per_chapter=True,
                        log=lambda *_: None)
    return site, out, manifest, {ed: Printed(out / f"{CHAPTER.folder}.{ed}.pdf") for ed in ("student", "instructor")}


def test_both_editions_are_printed_with_a_manifest(printed):
    _, out, manifest, texts = printed
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8")) == manifest
    files = {f["edition"]: f for f in manifest["files"]}
    assert set(files) == {"student", "instructor"}
    written = [d for d in CHAPTER.docs if d.written]
    for ed, p in texts.items():
        assert files[ed]["pages"] == p.n
        # cover + the chapter's contents + each page (a page starts on a new sheet and runs to several) + the lab
        assert p.n >= 2 + 3 * len(written) + 1, (ed, p.n)
    assert files["instructor"]["pages"] > files["student"]["pages"], "the solutions take room in print"
    assert re.fullmatch(r"[0-9a-f]{40}( .*)?", manifest["commit"]) or manifest["commit"].startswith("unknown")


def test_cover_titles_and_page_numbers(printed):
    site, _, _, texts = printed
    title = pdf.site_info(site)["title"]
    for ed, p in texts.items():
        cover = squash(p.page(1))
        assert squash(title) in cover and squash(CHAPTER.title) in cover
        assert squash(pdf.EDITIONS[ed]) in cover
        for i in (1, 2, p.n):  # the footer: "page / pages"
            assert f"{i}/{p.n}" in squash(p.page(i)), (ed, i, p.page(i)[-200:])
    whole = squash(texts["student"].text())
    for doc in CHAPTER.docs:
        if doc.written:
            assert whole.count(squash(doc.title)) >= 2, doc.title  # in the contents and on its page


def test_contents_give_the_page_each_document_starts_on(printed):
    _, _, _, texts = printed
    for ed, p in texts.items():
        first = p.dests[f"ch{CHAPTER.number}-01"]
        contents = squash(p.text(2, first - 1))
        for doc in CHAPTER.docs:
            if not doc.written:
                continue
            start = p.dests[f"ch{CHAPTER.number}-{doc.number:02d}"]
            assert squash(f"{book.key(doc)} {doc.title}") in squash(p.page(start)), (ed, doc.title, start)
            assert f"{squash(doc.title)}{start}" in contents, (ed, doc.title, start, contents[:400])


def problems_text(p: Printed) -> str:
    """The text of each page's "🤔 생각해볼 문제" section: from its heading to the sheet before the next page starts."""
    starts = [v for k, v in p.dests.items() if re.fullmatch(rf"ch{CHAPTER.number}-(\d\d|lab)", k)]
    parts = []
    for k, first in p.dests.items():
        if k.endswith("-" + pdf.SOLUTIONS_H2):
            parts.append(p.text(first, min([s - 1 for s in starts if s > first], default=p.n)))
    assert len(parts) == len([d for d in CHAPTER.docs if d.written]), sorted(p.dests)[:20]
    return squash("".join(parts))


def test_solutions_only_in_the_instructors_edition(printed):
    site, _, _, texts = printed
    student = squash(texts["student"].text())
    instructor = problems_text(texts["instructor"])
    snippets = solution_snippets(site)
    assert len(snippets) == 3 * len([d for d in CHAPTER.docs if d.written])
    assert squash(KNOWN_SOLUTION) in instructor and squash(KNOWN_SOLUTION) not in student
    present = [s for s in snippets if s in student]
    missing = [s for s in snippets if s not in instructor]
    assert not present, f"solution text in the students' edition: {present}"
    assert not missing, f"solution text missing from the instructors' edition: {missing}"
    # the problems themselves are in both editions
    for text in (student, instructor):
        assert text.count(squash("문제 1 (기초).")) == len([d for d in CHAPTER.docs if d.written])


def test_whole_book_document_links_stay_inside_it(built_site):
    """The whole-book path, without printing: chapters, appendices and in-document links of its print HTML."""
    site, _, _ = built_site
    info = pdf.site_info(site)
    secs = pdf.chapter_sections(site, CHAPTER, None)
    appendix = pdf.appendix_sections(site, None)
    doc = pdf.document(info, {"commit": "x", "date": "y", "browser": "z"}, "student", "book", [(CHAPTER, secs)],
                       appendix, {})
    ids = set(re.findall(r'\sid="([^"]+)"', doc))
    links = set(re.findall(r'\shref="#([^"]*)"', doc))
    assert f"chapter-{CHAPTER.number}" in ids and {"app-notation", "app-glossary", "app-references"} <= ids
    dangling = sorted(links - ids)
    assert not dangling, dangling[:20]
    assert not re.search(r'class="[^"]*\bbook-solution[" ]', doc) and "해설은 강사용 판에 있습니다" in doc
    assert not re.search(r'\s(?:href|src)="http://127\.0\.0\.1', doc)

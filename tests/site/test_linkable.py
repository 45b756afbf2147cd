"""Assignable by link: every exercise and every figure has a stable anchor, and the exercise index lists them."""
from __future__ import annotations

import re
import sys

import pytest
from snippets import book

sys.path.insert(0, str(book.ROOT / "scripts"))
# importing hooks.py drops this repository's modules from sys.modules (for mkdocs serve); keep the ones other
# test modules already hold, as tests/test_hooks.py does, so that their patches and `is` checks see one module
_kept = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("snippets", "gpu_runs")}
import hooks  # noqa: E402

sys.modules.update(_kept)

PROBLEM = re.compile(r"^\*\*문제 (\d+) \(", re.M)  # how the pages open an exercise (GUIDE: three per page)


def test_figure_ids_follow_the_cell_id():
    two = '<p>x</p><figure class="book-figure"><svg/></figure><figure class="book-figure"><svg/></figure>'
    out = hooks._figure_ids(two, "ch9-01-exp1")
    assert re.findall(r'id="([^"]+)"', out) == ["fig-ch9-01-exp1", "fig-ch9-01-exp1-2"]
    assert hooks._figure_ids("<p>no figure</p>", "c") == "<p>no figure</p>"


def test_exercise_anchor_names_chapter_document_and_problem():
    assert hooks.exercise_anchor("ch4-pipeline-parallel/01-naive-pipeline-bubble.md", 2) == "ex-ch4-01-2"
    md = "**문제 1 (기초).** a\n\n  **문제 9 (x).** indented: not an exercise opening\n**문제 3 (논문 비평).** c"
    assert re.findall(r'id="([^"]+)"', hooks._exercise_anchors(md, "ch7-3d-parallelism/04-elastic-training.md")) \
        == ["ex-ch7-04-1", "ex-ch7-04-3"]


@pytest.mark.build
def test_every_exercise_and_figure_is_linkable_and_indexed(built_site):
    site, _, _ = built_site
    index = (site / "exercises" / "index.html").read_text(encoding="utf-8")
    n_ex = 0
    for d in book.written_docs():
        numbers = PROBLEM.findall((book.DOCS / d.path).read_text(encoding="utf-8"))
        assert len(numbers) >= 3, d.path  # 기초 / 심화 / 논문 비평
        html = (site / d.url / "index.html").read_text(encoding="utf-8")
        for n in numbers:
            anchor = hooks.exercise_anchor(d.path, n)
            assert f'id="{anchor}"' in html, (d.path, anchor)
            assert f'href="../{d.url}#{anchor}"' in index, (d.path, anchor)
            n_ex += 1
        figures = re.findall(r'<figure class="book-figure"( id="([^"]+)")?', html)
        assert all(fid for _, fid in figures), (d.path, "a figure without an anchor: its cell has no id=")
        ids = [fid for _, fid in figures]
        assert len(ids) == len(set(ids)), (d.path, ids)
    assert n_ex >= 3 * len(book.written_docs())


def test_cheatsheets_carry_every_pages_summary_with_working_links():
    """요약 카드: each page's 📌 section, unchanged but for links, under a link to the page; every relative link
    in it names a page that exists (the links were rewritten for the site root)."""
    md = hooks._cheatsheets()
    for d in book.written_docs():
        text = (book.DOCS / d.path).read_text(encoding="utf-8")
        pinned = text.split("## 📌", 1)[1].split("\n## ", 1)[0].split("\n", 1)[1].strip()
        first = next(line for line in pinned.splitlines() if line.strip() and "](" not in line)
        assert f"]({d.path})" in md and first in md, d.path
    for target in re.findall(r"\]\((?!https?:)([^)#\s]+)", md):
        assert (book.DOCS / target).is_file(), target

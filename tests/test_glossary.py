"""The glossary (snippets/glossary.py): terms the book really uses, spellings matched as the pages write them,
and the Korean forms that the search index gains (scripts/hooks.py)."""
from __future__ import annotations

import json
import re

import pytest
from snippets import book, glossary

PAGES = {d.path: (book.DOCS / d.path).read_text(encoding="utf-8") for d in book.written_docs()}


@pytest.mark.parametrize("term", glossary.TERMS, ids=lambda t: t.en)
def test_every_term_is_one_the_book_uses(term):
    assert sum(glossary.count(term, text) for text in PAGES.values()) > 0, term.en
    assert term.ko and all(term.ko), term.en


def test_terms_are_listed_once_with_distinct_anchors():
    assert len({t.en.lower() for t in glossary.TERMS}) == len(glossary.TERMS)
    assert len({t.anchor for t in glossary.TERMS}) == len(glossary.TERMS)


def test_spellings_match_the_ways_the_pages_write_them():
    by = {t.en: t for t in glossary.TERMS}
    for text in ("AllReduce", "all-reduce", "all_reduce", "allreduce", "All Reduce"):
        assert glossary.pattern(by["AllReduce"]).search(text), text
    for text in ("overall-reducer", "reduce-scatter"):
        assert not glossary.pattern(by["AllReduce"]).search(text), text
    assert glossary.count(by["micro-batch"], "micro-batch 4 개, microbatch, Micro-Batch") == 3
    assert [t.en for t in glossary.terms_in("the pipeline bubble")] == ["pipeline", "bubble"]
    # a form the text already has is not added again; each form once
    assert glossary.korean_forms("bubble 과 버블, bubble") == ["유휴 시간"]


def test_fast_count_finds_what_the_whole_word_pattern_finds():
    """`count` skips `pattern`'s look-behind for speed; on every page, every term, and on word-edge cases,
    it counts what `pattern(term).findall` finds."""
    cases = ["xAllReduce all-reduce", "_allreduce", "3AllReduce AllReduce", "AllReduces all_reduce"]
    for term in glossary.TERMS:
        for text in (*PAGES.values(), *cases):
            assert glossary.count(term, text) == len(glossary.pattern(term).findall(text)), term.en


@pytest.mark.build
def test_search_index_carries_the_korean_forms_and_the_glossary_page_lists_every_term(built_site):
    site, _, _ = built_site
    docs = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    bubble = next(t for t in glossary.TERMS if t.en == "bubble")
    with_bubble = [d for d in docs if glossary.pattern(bubble).search(d["text"]) and "glossary" not in d["location"]]
    assert with_bubble and all("버블" in d["text"] or "버블" in d["title"] for d in with_bubble)
    title = next(d for d in docs if d["location"] == "ch4-pipeline-parallel/01-naive-pipeline-bubble/")
    assert "버블" in title["title"]  # the title's terms go into the title: searched with its boost
    html = (site / "glossary" / "index.html").read_text(encoding="utf-8")
    for t in glossary.TERMS:
        assert f'id="{t.anchor}"' in html and t.ko[0] in html, t.en


# One spelling per term in the prose (GUIDE: one Korean/English choice per term, the glossary as the reference).
# Code, inline code, math, link targets, HTML and headings (their anchors are published) are left alone.
NOT_PROSE = re.compile(r"`[^`]*`|\]\([^)]*\)|\$\$[^$]*\$\$|\$[^$\n]*\$|<[^>]+>|\{[#:][^}]*\}")
OFF_SPELLINGS = re.compile(r"(?<![\w`/.-])(?:[Aa]ll-reduce|[Aa]ll-gather|[Rr]educe-scatter|[Aa]ll-to-all)(?![\w-])|파라미터")


def _prose_lines(text: str):
    from tests.page_cells import outside_fences

    for n, line in outside_fences(text):
        if not line.lstrip().startswith(("#", "attrs:", "--8<--")):
            yield n, NOT_PROSE.sub(" ", line)


@pytest.mark.parametrize("path", sorted(PAGES) + ["index.md", "notation.md", "calculators.md", "thresholds.md",
                                                  "verification.md"])
def test_pages_use_one_spelling_per_term(path):
    text = (book.DOCS / path).read_text(encoding="utf-8")
    off = [(n, m.group(0)) for n, line in _prose_lines(text) for m in OFF_SPELLINGS.finditer(line)]
    assert not off, f"{path}: write AllReduce / AllGather / ReduceScatter / AllToAll and parameter: {off[:8]}"


# ---------------------------------------------------------------- what Ch1's cells print (tables, labels, sentences)
# spells the collectives as the prose does; code identifiers, HTML and math are left alone, as in the prose test.
import contextlib  # noqa: E402
import io  # noqa: E402

from tests.page_cells import ROOT, page_cells  # noqa: E402

CH1_PAGES = sorted(p.name for p in (ROOT / "docs" / "ch1-collective").glob("*.md"))


def printed(md: str) -> dict[str, str]:
    """What every executed cell of the page prints, by cell id (each session run in order, as the build does)."""
    env_by_session: dict[str, dict] = {}
    out = {}
    for cid, session, code in page_cells(md):
        env = env_by_session.setdefault(session, {"__name__": "__cell__"})
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, f"<cell {cid}>", "exec"), env)  # noqa: S102
        out[cid] = buf.getvalue()
    return out


def off_spellings(text: str) -> list[str]:
    text = re.sub(r"<svg.*?</svg>", " ", text, flags=re.S)  # figures: checked through their labels' sources
    return [m.group(0) for line in text.splitlines() for m in OFF_SPELLINGS.finditer(NOT_PROSE.sub(" ", line))]


def test_the_check_catches_prose_spellings_and_spares_identifiers():
    assert off_spellings("ring (reduce-scatter + all-gather) | All-reduce") == ["reduce-scatter", "all-gather",
                                                                                 "All-reduce"]
    assert off_spellings("all_reduce `all-reduce` <a href='x/all-gather'> AllReduce ReduceScatter") == []


@pytest.mark.parametrize("page", CH1_PAGES)
def test_printed_text_uses_the_book_spelling(page):
    cells = printed(f"ch1-collective/{page}")
    assert cells
    off = {cid: hits for cid, text in cells.items() if (hits := off_spellings(text))}
    assert not off, f"{page}: printed text should say AllReduce / AllGather / ReduceScatter / AllToAll: {off}"

"""The landing page's map and tour (snippets/book.py): a line and a reading time per page, a tour that never sends
a reader to a page before the pages it builds on."""
from __future__ import annotations

import re

import pytest
from snippets import book


def test_every_page_has_one_short_line():
    assert set(book.SUMMARIES) == {book.key(d) for d in book.ALL_DOCS}
    for k, line in book.SUMMARIES.items():
        assert "\n" not in line and 20 < len(line) <= 110, k
        assert "$" not in line, k  # words, not formulas: the map is read before the notation


def _prose_chars(text: str) -> int:
    """The page's prose counted line by line (a second way): skip fenced code and the indented body of ??? blocks."""
    from tests.page_cells import outside_fences

    n, solution = 0, False
    for _, line in outside_fences(text):
        s = line.strip()
        if line.startswith("???"):
            solution = True
            continue
        if solution and (line.startswith(" ") or not s):
            continue
        solution = False
        n += len(re.sub(r"\s+", "", line))
    return n


@pytest.mark.parametrize("doc", book.written_docs(), ids=book.key)
def test_reading_time_is_the_prose_at_the_stated_rate(doc):
    chars = _prose_chars((book.DOCS / doc.path).read_text(encoding="utf-8"))
    minutes = chars / book.READING_CHARS_PER_MINUTE
    assert minutes <= book.reading_minutes(doc) < minutes + 5 + 1e-9


def _closure_violations(tour) -> list[tuple[str, str]]:
    seen: set[str] = set()
    bad = []
    for day in tour:
        for k in day:
            stack = list(book.prerequisites(book.by_key(k)))
            while stack:  # every page it builds on, and theirs
                p = stack.pop()
                if book.key(p) not in seen:
                    bad.append((k, book.key(p)))
                stack += book.prerequisites(p)
            seen.add(k)
    return bad


def test_the_tour_reaches_ch7_01_with_every_prerequisite_before_it():
    assert _closure_violations(book.TOUR) == []
    assert book.TOUR[-1][-1] == "Ch7-01"
    # Ch7-01's opening box names Ch1-03, Ch3-05, Ch4-03, Ch5-01 and Ch6-01 (the review found the old tour lacked them)
    assert {book.key(p) for p in book.prerequisites(book.by_key("Ch7-01"))} == {"Ch1-03", "Ch3-05", "Ch4-03", "Ch5-01", "Ch6-01"}
    # the check can fail: the old one-week tour (Ch1-01..Ch7-01 without Ch3 and Ch4) violates it
    old = (("Ch1-01", "Ch1-02"), ("Ch1-03", "Ch1-05"), ("Ch2-01", "Ch2-02"), ("Ch2-03", "Ch2-05"),
           ("Ch5-01", "Ch5-04"), ("Ch5-05",), ("Ch6-02", "Ch7-01"))
    assert ("Ch7-01", "Ch3-05") in _closure_violations(old)


@pytest.mark.build
def test_landing_page_has_audience_outcomes_lines_times_and_tour(built_site):
    site, _, _ = built_site
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "누구를 위한 책인가" in html and "다 읽으면 할 수 있는 것" in html
    assert "강의 계획서" not in html and "집필됨" not in html
    for d in book.written_docs():
        assert book.SUMMARIES[book.key(d)].split(",")[0] in html, d.path
        assert f"약 {book.reading_minutes(d)} 분" in html, d.path
    tour = html[html.index("입문 투어"):]
    for k in (k for day in book.TOUR for k in day):
        assert f'href="{book.by_key(k).url}"' in tour, k

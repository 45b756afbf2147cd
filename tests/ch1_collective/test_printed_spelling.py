"""Ch1 pages: the text their cells print (tables, labels, sentences) spells the collectives as the prose does,
AllReduce / AllGather / ReduceScatter / AllToAll (tests/test_glossary.py's rule), not all-reduce / reduce-scatter.
Code identifiers (all_reduce, `...` spans), HTML tags and math are left alone, as in the prose test."""
from __future__ import annotations

import contextlib
import io
import re

import pytest

from tests.page_cells import ROOT, page_cells
from tests.test_glossary import NOT_PROSE, OFF_SPELLINGS

PAGES = sorted(p.name for p in (ROOT / "docs" / "ch1-collective").glob("*.md"))


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


@pytest.mark.parametrize("page", PAGES)
def test_printed_text_uses_the_book_spelling(page):
    cells = printed(f"ch1-collective/{page}")
    assert cells
    off = {cid: hits for cid, text in cells.items() if (hits := off_spellings(text))}
    assert not off, f"{page}: printed text should say AllReduce / AllGather / ReduceScatter / AllToAll: {off}"

"""Wide tables, long code lines and long formulas on a 1280-px screen (docs/assets/book.css).

On every chapter page, with every collapsible block opened: nothing inside the content column
reaches past the column's right edge unless a box that scrolls horizontally holds it, and every box
whose content is wider than itself scrolls (overflow-x auto/scroll) with a scrollbar that is not
transparent (Material's default thumb is nearly invisible, so a wide table looks cut off).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.site.test_browser import CHROMIUM  # fixtures: tests/site/conftest.py

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium")]

PROBE = """() => {
  const col = document.querySelector('.md-content__inner');
  const edge = document.querySelector('.md-content').getBoundingClientRect().right + 1;
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const held = el => { for (let a = el.parentElement; a && a !== col; a = a.parentElement)
                         if (scrolls(a) && a.getBoundingClientRect().right <= edge) return true;
                       return false; };
  const name = el => el.tagName.toLowerCase() + (typeof el.className === 'string' && el.className ? '.' + el.className.split(' ')[0] : '');
  const out = {past_edge: [], clipped: [], invisible_bar: []};
  for (const el of col.querySelectorAll('*')) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;  // an SVG's own shapes
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > edge && !held(el) && !(scrolls(el) && r.right <= edge))
      out.past_edge.push(name(el) + ' +' + Math.round(r.right - edge) + 'px');
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 2) {
      const s = getComputedStyle(el);
      if (!scrolls(el) && !held(el) && s.overflowX !== 'visible') out.clipped.push(name(el));
      if (scrolls(el)) {
        const m = /rgba?\\(([^)]*)\\)/.exec(s.scrollbarColor);
        const alpha = m ? (m[1].split(',')[3] === undefined ? 1 : parseFloat(m[1].split(',')[3])) : 1;
        if (alpha < 0.4) out.invisible_bar.push(name(el) + ' ' + s.scrollbarColor);
      }
    }
  }
  return out;
}"""


def test_wide_content_scrolls_inside_its_box_at_1280_px(page_pass):  # noqa: F811
    """The probe runs in test_browser.py's one pass over the site (each page is loaded once for both)."""
    checked = page_pass["wide"]
    assert checked and all(rel.startswith("ch") for rel in checked)
    bad = {rel: found for rel, found in checked.items() if found}
    assert not bad, bad

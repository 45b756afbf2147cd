"""snippets/common/figures.py: the inline SVG a page embeds."""
from __future__ import annotations

import re

from snippets.common import figures


def test_coordinates_are_rounded_to_a_tenth_and_nothing_else_changes():
    raw = ('<svg width="360.72pt" viewBox="0 0 360.72 250.5"><path d="M 57.6 307.584 L -414.726 3.05e-05 z" '
           'style="fill:#1f77b4;stroke-width:0.8123" id="m3f2a0c1e8d"/><use xlink:href="#m3f2a0c1e8d" '
           'x="12.3456" y="7.891" transform="matrix(1.2345 0 0 -1.2345 0.123 0.456)"/></svg>')
    out = figures._coarse(raw)
    assert 'd="M 57.6 307.6 L -414.7 3.05e-05 z"' in out              # path data, exponents untouched
    assert 'x="12.3" y="7.9"' in out
    assert 'transform="matrix(1.2345 0 0 -1.2345 0.123 0.456)"' in out  # a transform's scale stays exact
    assert 'viewBox="0 0 360.72 250.5"' in out and "stroke-width:0.8123" in out and "#1f77b4" in out


def test_a_real_figure_moves_no_point_by_more_than_a_twentieth():
    fig, ax = figures.new(4, 3)
    ax.plot([0.123456, 1.98765, 2.5], [3.14159, 2.71828, 1.41421], label="측정")
    ax.legend()
    html = figures.svg(fig)
    assert html.startswith('<figure class="book-figure"><svg')
    fig2, ax2 = figures.new(4, 3)
    ax2.plot([0.123456, 1.98765, 2.5], [3.14159, 2.71828, 1.41421], label="측정")
    ax2.legend()
    import io
    buf = io.StringIO()
    fig2.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    full = buf.getvalue()
    paths = lambda s: [[float(v) for v in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", d)]
                       for d in re.findall(r'\sd="([^"]*)"', s)]
    a, b = paths(html), paths(full)
    assert len(a) == len(b) > 5
    assert max(abs(x - y) for pa, pb in zip(a, b) for x, y in zip(pa, pb)) <= 0.05 + 1e-9
    assert len(html) < len(full)

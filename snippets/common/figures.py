"""Figures for pages: matplotlib with the Agg backend, returned as inline SVG text, closed after use."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({
    "svg.fonttype": "none",      # text stays text: the browser's (Korean-capable) fonts draw it
    "svg.hashsalt": "book",      # deterministic ids: the same figure gives the same bytes
    "font.family": ["Noto Sans CJK KR", "DejaVu Sans", "sans-serif"],
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 100,
})


def new(width: float = 7.0, height: float = 4.0, **kw):
    return plt.subplots(figsize=(width, height), **kw)


def svg(fig) -> str:
    """SVG markup for the figure, without the XML prolog; the figure is closed."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    return '<figure class="book-figure">' + text[text.find("<svg"):] + "</figure>"

"""Figures for pages: matplotlib with the Agg backend, returned as inline SVG text, closed after use."""
from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402

KOREAN_FONT = "Noto Sans CJK KR"
if not any(f.name == KOREAN_FONT for f in font_manager.fontManager.ttflist):
    # matplotlib's font list is cached (~/.cache/matplotlib) when it first runs; fonts installed later
    # (`make browser-deps` installs fonts-noto-cjk) stay invisible until it is rebuilt. Rescan once; the
    # rebuilt list is written back, so later processes read it. Without the font, labels fall back to DejaVu.
    try:
        font_manager.fontManager = font_manager._load_fontmanager(try_read_cache=False)
    except Exception:  # noqa: BLE001 - a private helper; the fallback font still renders the figure
        pass

plt.rcParams.update({
    "svg.fonttype": "none",      # text stays text: the browser's (Korean-capable) fonts draw it
    "svg.hashsalt": "book",      # deterministic ids: the same figure gives the same bytes
    "font.family": [KOREAN_FONT, "DejaVu Sans", "sans-serif"],
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 100,
})


def new(width: float = 7.0, height: float = 4.0, **kw):
    return plt.subplots(figsize=(width, height), **kw)


def svg(fig, tight: bool = True) -> str:
    """SVG markup for the figure, without the XML prolog; the figure is closed. tight=False keeps the figure's own
    size and margins (set them with subplots_adjust): a tight bounding box draws the figure twice, which doubles the
    cost of figures with hundreds of text labels."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None, metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    return '<figure class="book-figure">' + _coarse(text[text.find("<svg"):]) + "</figure>"


# coordinates: the path data and the positions of marks and text (not transforms, whose scale factors
# must stay exact, nor names, ids and colours)
_COORD_ATTR = re.compile(r'(\s(?:d|x|y|x1|x2|y1|y2|cx|cy|width|height)=")([^"]*)(")')
_DECIMAL = re.compile(r"(?<![\w#.-])(-?\d+\.\d{2,})(?![\deE])")


def _coarse(svg_text: str) -> str:
    """Coordinates to 0.1 of a point: matplotlib writes up to 6 decimals, which a screen cannot show
    and which make the inline figures about a quarter larger over the wire (gzip)."""
    def attr(m: re.Match) -> str:
        return m.group(1) + _DECIMAL.sub(lambda n: f"{float(n.group(1)):.1f}", m.group(2)) + m.group(3)

    return _COORD_ATTR.sub(attr, svg_text)

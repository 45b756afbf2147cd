"""No broken internal link and no unrendered formula in what the reader gets: pages, cell output, notebooks."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from snippets import book

sys.path.insert(0, str(book.ROOT / "scripts"))
import linkcheck  # noqa: E402


@pytest.mark.build
def test_every_internal_link_resolves_and_no_tex_is_left(built_site):
    site, _, _ = built_site
    broken, tex = linkcheck.check(site)
    assert not broken, "\n".join(f"{f}: {u} ({why})" for f, u, why in broken)
    assert not tex, "\n".join(f"{f}: {t}" for f, t in tex)
    # the walk did read the notebooks and the cell output it exists for
    assert len(list(site.rglob("*.ipynb"))) == len(list((book.ROOT / "docs").glob("ch*/lab.py")))


def test_the_walk_finds_each_kind_of_problem(tmp_path):
    """A small site with one of each problem the strict build cannot see, and their correct twins."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "lab").mkdir(parents=True)
    (tmp_path / "a" / "index.html").write_text(
        '<h2 id="x">x</h2><a href="#x">ok</a><a href="#nope">anchor</a>'
        '<a href="../b/lab/">ok</a><a href="../b/lab/#y">ok</a><a href="01-page.md">raw md</a>'
        '<a href="https://example.org/z.md">external</a><img src="../missing.svg">'
        '<p>식 $= $ 이 남았다</p><p>가격은 <code>$x$</code> 와 '
        '<span class="arithmatex"><span class="katex">$y$</span></span></p><pre>\\frac{1}{2}</pre>', encoding="utf-8")
    (tmp_path / "b" / "lab" / "index.html").write_text('<h3 id="y">y</h3><nav><a href="../../a/">up</a></nav>'
                                                       '<span>2. $N = 3$: 제목</span>', encoding="utf-8")
    nb = {"cells": [{"cell_type": "markdown", "source": ["[Ch](../../a/#x) 와 [raw](02-other.md)"]},
                    {"cell_type": "code", "source": ["print(1)"], "outputs": [
                        {"output_type": "display_data", "data": {"text/html": ['<a href="../../a/#gone">g</a>']}}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "b" / "lab" / "lab.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    broken, tex = linkcheck.check(tmp_path)
    assert sorted(broken) == sorted([
        ("a/index.html", "#nope", "no such anchor"),
        ("a/index.html", "01-page.md", "no such file"),
        ("a/index.html", "../missing.svg", "no such file"),
        ("b/lab/lab.ipynb", "02-other.md", "no such file"),
        ("b/lab/lab.ipynb", "../../a/#gone", "no such anchor"),
    ])
    assert [f for f, _ in tex] == ["a/index.html", "b/lab/index.html"]
    assert "$= $" in tex[0][1] and "$N = 3$" in tex[1][1]
    assert linkcheck.main(["linkcheck", str(tmp_path)]) == 1

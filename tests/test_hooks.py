"""scripts/hooks.py without a build: the theorem index, citations, and heading slugs.

The slow build tests (tests/site/test_build.py) catch the same bugs after minutes; these run in
about a second, against an independent reading of the pages and of scripts/published_anchors.json.
"""
from __future__ import annotations

import json
import re
import sys
from types import SimpleNamespace

import pytest
import yaml

from snippets import book
from snippets.slugs import slugify

ROOT = book.ROOT
sys.path.insert(0, str(ROOT / "scripts"))
# importing hooks.py drops this repository's modules from sys.modules (mkdocs serve re-imports them on each
# rebuild); keep the ones other test modules already hold, so `is` checks elsewhere see one module object
_kept = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("snippets", "gpu_runs")}
import hooks  # noqa: E402

sys.modules.update(_kept)

from mkdocs.exceptions import PluginError  # noqa: E402

# the block kinds GUIDE.md defines (not read from hooks.py: a kind dropped there must show up here)
KINDS = {"definition": "정의", "theorem": "정리", "lemma": "보조정리", "corollary": "따름정리"}
ANY_BLOCK = re.compile(r"^/// ([a-z]+) \| (.+)\n\s+attrs: \{id: ([A-Za-z0-9_-]+)\}", re.M)


def _page_blocks(text: str):
    return [(k, t, a) for k, t, a in ANY_BLOCK.findall(text) if k != "proof"]


# ------------------------------------------------------------------ theorem index

def test_theorem_index_lists_every_block_of_every_page():
    index = hooks._theorem_index()
    rows = [l for l in index.splitlines() if l.startswith("| ") and "](" in l]
    expected = []
    for d in book.written_docs():
        for kind, title, anchor in _page_blocks((book.DOCS / d.path).read_text(encoding="utf-8")):
            assert kind in KINDS, f"{d.path}: unknown block kind '{kind}' (#{anchor})"
            expected.append((KINDS[kind], d.path, anchor))
    assert expected, "no theorem blocks in the book"
    for ko, path, anchor in expected:
        assert any(r.startswith(f"| {ko} | [") and f"]({path}#{anchor})" in r for r in rows), \
            f"theorem index lacks {ko} {path}#{anchor}"
    assert len(rows) == len(expected)


def test_theorem_index_of_a_page_with_every_kind(tmp_path, monkeypatch):
    page = ["# t", ""]
    for i, kind in enumerate(KINDS):
        page += [f"/// {kind} | {kind.title()} {i} (이름)", f"    attrs: {{id: {kind[:3]}-x-{i}}}", "", "본문", "///", ""]
    (tmp_path / "p.md").write_text("\n".join(page), encoding="utf-8")
    doc = SimpleNamespace(written=True, path="p.md", number=1, title="T")
    fake = SimpleNamespace(DOCS=tmp_path, CHAPTERS=[SimpleNamespace(number=9, title="C", docs=[doc])])
    monkeypatch.setattr(hooks, "book", fake)
    index = hooks._theorem_index()
    for i, (kind, ko) in enumerate(KINDS.items()):
        assert f"| {ko} | [{kind.title()} {i} (이름)](p.md#{kind[:3]}-x-{i}) |" in index, (kind, index)


# ------------------------------------------------------------------ citations

def _page(src_uri="ch1-collective/03-ring-allreduce.md"):
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))


def test_unknown_citation_key_fails_naming_page_and_key():
    with pytest.raises(PluginError, match=r"ch1-collective/03-ring-allreduce\.md: unknown citation key '@nobody1999'"):
        hooks._cite("본문 [@patarasuk2009; @nobody1999].", _page())


def test_citation_links_to_the_reference_entry():
    refs = yaml.safe_load(hooks.REFERENCES_YML.read_text(encoding="utf-8"))
    out = hooks._cite("ring [@patarasuk2009; @thakur2005], 코드 `[@notacite]`", _page())
    for key in ("patarasuk2009", "thakur2005"):
        assert f"](../references.md#{key})" in out
        assert refs[key]["year"] and str(refs[key]["year"]) in out
    assert "`[@notacite]`" in out  # inline code is left alone
    assert "[@" not in out.replace("`[@notacite]`", "")


def test_every_citation_on_every_page_resolves_the_way_the_build_resolves_it():
    for p in sorted(book.DOCS.glob("**/*.md")):
        text = p.read_text(encoding="utf-8")
        hooks._cite(text, _page(p.relative_to(book.DOCS).as_posix()))  # raises on an unknown key
        # a citation the build's pattern does not match would be printed raw: none may be left
        leftover = re.findall(r"(?<!`)\[@[^\]]*\]", hooks.CITE.sub("", text))
        assert not leftover, f"{p}: citations the build does not recognise: {leftover}"


# ------------------------------------------------------------------ heading slugs

GOLDEN = {  # heading as written -> its anchor (as published on 2026-12-01; Korean, emoji, math, code)
    "🎯 핵심 질문": "핵심-질문",
    "💻 NumPy / PyTorch 구현 검증": "numpy-pytorch-구현-검증",
    "✏️ 엄밀한 정의": "엄밀한-정의",
    "⚖️ 가정과 한계": "가정과-한계",
    "실험 1 — $N=4$ ring 을 한 step 씩": "실험-1-n4-ring-을-한-step-씩",
    "실험 2 — rank 당 bytes: 시뮬레이터 대 공식, $N = 2 \\dots 1024$":
        "실험-2-rank-당-bytes-시뮬레이터-대-공식-n-2-dots-1024",
    "실험 4 — 이 머신에서 잰 gloo `all_reduce` 와 $\\alpha$-$\\beta$ fit":
        "실험-4-이-머신에서-잰-gloo-all_reduce-와-alpha-beta-fit",
}


def _published() -> dict[str, set[str]]:
    data = json.loads((ROOT / "scripts" / "published_anchors.json").read_text(encoding="utf-8"))
    return {url: set(ids) for url, ids in data["pages"].items()}


@pytest.mark.parametrize("heading,slug", GOLDEN.items(), ids=list(GOLDEN.values()))
def test_korean_heading_slugs_are_unchanged(heading, slug):
    assert slugify(heading, "-") == slug


def test_every_section_heading_keeps_its_published_anchor():
    """The 11 template sections of every published page: slugify(heading) is the published id."""
    published = _published()
    checked = 0
    for d in book.written_docs():
        ids = published.get(f"/{d.url.strip('/')}/")
        if ids is None:
            continue  # a page not published yet
        fence = False
        for line in (book.DOCS / d.path).read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                fence = not fence
            if not fence and line.startswith("## "):
                slug = slugify(line[3:].strip(), "-")
                assert slug in ids, f"{d.path}: '{line}' -> '{slug}', not among the published anchors"
                checked += 1
    assert checked >= 11


def test_slugify_is_the_one_mkdocs_uses():
    cfg = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert cfg.count("slugify: !!python/name:snippets.slugs.slugify") >= 1


# ------------------------------------------------------------------ lab pages: search text and anchors

def test_code_cells_leave_the_search_text_and_the_prose_stays():
    cell = ('<div class="jp-Cell jp-CodeCell jp-Notebook-cell"><div class="jp-Cell jp-CodeCell" id="c1">'
            '<div class="jp-InputArea"><div></div><pre>import torch</pre></div>'
            '<div class="jp-OutputArea"><pre>out</pre><figure><svg><text>tick</text></svg></figure></div></div></div>')
    md = '<div class="jp-Cell jp-MarkdownCell"><div><p>{}</p></div></div>'
    html = md.format("앞 문단") + cell + md.format("뒤 문단") + cell.replace("c1", "c2")
    out = hooks._without_code_cells(html)
    assert out == md.format("앞 문단") + md.format("뒤 문단")
    assert hooks._without_code_cells(md.format("x")) == md.format("x")
    assert hooks._notebook_search_html(html) == "<p>앞 문단</p><p>뒤 문단</p>"


def _toc(*ids):
    items = [SimpleNamespace(id=i, title=f"{n}. $N = {n}$ 와 $\\mathsf{{f}}$", children=[]) for n, i in enumerate(ids)]
    items[0].children = items[1:]
    return [items[0]], items


def test_lab_headings_get_ids_and_the_toc_follows_them():
    """A Korean heading that mkdocs-jupyter left with id="" gets the book's slug; the TOC takes the
    headings' ids in order (its own were '_1' and a slug the heading did not have)."""
    html = ('<h1 id="chapter-1">Chapter 1 실습<a class="anchor-link" href="#chapter-1">¶</a></h1>'
            '<h2 id="2-torchdistributedpipelining">2. 같은 모델을 <code>torch.distributed.pipelining</code> 으로'
            '<a class="anchor-link" href="#2-torchdistributedpipelining">¶</a></h2>'
            '<h2 id="">더 해보기<a class="anchor-link" href="#">¶</a></h2>')
    toc, items = _toc("chapter-1", "2", "_1")
    page = SimpleNamespace(toc=toc, file=SimpleNamespace(src_uri="ch4-pipeline-parallel/lab.py"))
    out = hooks._lab_anchors(html, page)
    assert '<h2 id="더-해보기">더 해보기<a class="anchor-link" href="#더-해보기">' in out
    assert 'id="2-torchdistributedpipelining"' in out and 'id=""' not in out
    assert [i.id for i in items] == ["chapter-1", "2-torchdistributedpipelining", "더-해보기"]
    # the sidebar has no math renderer: TOC titles lose the heading's TeX source (the page body keeps it)
    assert [i.title for i in items] == ["0. N = 0 와 f", "1. N = 1 와 f", "2. N = 2 와 f"]
    page.toc, _ = _toc("chapter-1", "2")
    with pytest.raises(PluginError, match="3 headings but its TOC 2"):
        hooks._lab_anchors(html, page)


def test_pruned_notebook_css_is_cached_by_sheet_page_and_pruner(tmp_path, monkeypatch):
    """With the book cache on, a lab page's pruned stylesheet is reused while the sheet, the rest of the
    page and the pruner that runs are unchanged; a change to any of them, or a damaged entry, prunes again."""
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "css_prune.py").write_text((ROOT / "scripts" / "css_prune.py").read_text(encoding="utf-8"))
    monkeypatch.setattr(hooks, "ROOT", tmp_path / "repo")
    monkeypatch.delitem(sys.modules, "css_prune", raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setitem(hooks._CACHE, "root", cache)
    sheet = '@charset "UTF-8";.jupyter-wrapper{color:red}.jp-A{color:blue}.jp-B{color:green}'
    page = SimpleNamespace(file=SimpleNamespace(src_uri="ch1-collective/lab.py"))
    html = '<html><style type="text/css">' + sheet + '</style><div class="jupyter-wrapper jp-A"></div></html>'
    calls = []
    pruner = hooks._load_script("css_prune", fresh=True)
    real = pruner.prune
    monkeypatch.setattr(pruner, "prune", lambda css, rest: calls.append(1) or real(css, rest))

    def entry_key():
        (entry,) = (cache / "css").iterdir()
        return json.loads(entry.read_text())["key"]

    first = hooks._notebook_css(html, page)
    assert ".jp-A{" in first and ".jp-B{" not in first and len(calls) == 1
    assert hooks._notebook_css(html, page) == first and len(calls) == 1  # reused
    other = html.replace("jp-A", "jp-B")
    second = hooks._notebook_css(other, page)
    assert ".jp-B{" in second and ".jp-A{" not in second and len(calls) == 2  # the page changed
    (entry,) = (cache / "css").iterdir()
    entry.write_text(entry.read_text().replace("jp-B", "jp-X"))  # damaged: its digest no longer matches
    assert hooks._notebook_css(other, page) == second and len(calls) == 3
    third = hooks._notebook_css(other.replace("color:green", "color:teal"), page)  # the sheet changed
    assert ".jp-B{color:teal}" in third and len(calls) == 4
    key = entry_key()
    with open(scripts / "css_prune.py", "a", encoding="utf-8") as f:  # the pruner changed: loaded again
        f.write("\n# edited\n")
    assert hooks._notebook_css(other.replace("color:green", "color:teal"), page) == third
    assert entry_key() != key and sys.modules["css_prune"].__book_sha__ != pruner.__book_sha__
    monkeypatch.setitem(hooks._CACHE, "root", None)  # cache off: nothing read or written
    assert hooks._notebook_css(html, page) == first


def test_citations_that_would_look_alike_get_distinct_labels():
    """Two entries whose author-year label coincides (three Qi et al. 2024 papers) render differently, each
    label naming its year with a letter, and the references page shows the same label beside each key."""
    refs = yaml.safe_load(hooks.REFERENCES_YML.read_text(encoding="utf-8"))
    by_base: dict = {}
    for key, ref in refs.items():
        by_base.setdefault(hooks._base_label(ref), []).append(key)
    clashes = [keys for keys in by_base.values() if len(keys) > 1]
    assert clashes, "the bibliography has no coinciding labels any more: this test needs a new example"
    block = hooks._references_block()
    for keys in clashes:
        labels = [hooks._short(k) for k in keys]
        assert len(set(labels)) == len(keys)
        for k, lab in zip(keys, labels):
            assert lab.startswith(hooks._base_label(refs[k])) and lab[-1] in "abcdefghij"
            assert f"](../references.md#{k})" in hooks._cite(f"[@{k}]", _page()) and lab in hooks._cite(f"[@{k}]", _page())
            assert f"**[{lab}]** `{k}`" in block

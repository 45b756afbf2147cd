"""The whole site builds in strict mode within the budget, and the build's guards really fire."""
from __future__ import annotations

import gzip

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from snippets import book, results

ROOT = book.ROOT
pytestmark = pytest.mark.build


def test_strict_build_succeeds_within_budget(built_site):
    site, seconds, log = built_site
    pages = sorted(site.glob("**/index.html"))
    n_docs = len(book.written_docs())
    assert (site / "ch1-collective/03-ring-allreduce/index.html").exists()
    for d in book.written_docs():
        assert (site / d.url / "index.html").exists(), d.url
    # GUIDE budget: at most 2 s per page on average, every cell executed
    assert seconds / len(pages) <= 2.0, f"{seconds:.1f} s for {len(pages)} pages"
    # a stale GPU result warns without failing (staleness policy, snippets/results.py); nothing else may warn
    mkdocs_warnings = [w for w in re.findall(r"^(?:WARNING|ERROR)\s+-.*$", log, re.M)
                       if not re.match(r"WARNING -  GPU result gpu_runs/results/\S+ was measured at commit ", w)]
    assert not mkdocs_warnings, mkdocs_warnings
    assert n_docs >= 1


def test_no_request_to_other_hosts_in_html(built_site):
    site, _, _ = built_site
    bad = re.compile(r"""(?:src|href)=["'](?:https?:)?//(?!127\.0\.0\.1|localhost)[^"']+\.(?:js|css|woff2?|ttf)""")
    for html in site.glob("**/*.html"):
        text = html.read_text(encoding="utf-8")
        assert not bad.search(text), f"{html}: {bad.search(text).group(0)}"
        assert "fonts.googleapis" not in text and "cdn.jsdelivr" not in text, html


def test_math_is_rendered_at_build_time(built_site):
    site, _, _ = built_site
    html = (site / "ch1-collective/03-ring-allreduce/index.html").read_text(encoding="utf-8")
    assert html.count('class="katex"') > 50
    assert "katex-error" not in html
    assert not re.search(r'<span class="arithmatex">\\\(', html)


def test_theorem_index_and_references_are_generated(built_site):
    site, _, _ = built_site
    idx = (site / "theorems/index.html").read_text(encoding="utf-8")
    for anchor in ("thm-ring-traffic", "thm-allreduce-bandwidth-bound", "def-alpha-beta"):
        assert f"03-ring-allreduce/#{anchor}" in idx
    page = (site / "ch1-collective/03-ring-allreduce/index.html").read_text(encoding="utf-8")
    assert 'id="thm-ring-traffic"' in page
    refs = (site / "references/index.html").read_text(encoding="utf-8")
    assert 'id="patarasuk2009"' in refs and "10.1016/j.jpdc.2008.09.002" in refs


def test_landing_map_lists_all_35_documents(built_site):
    site, _, _ = built_site
    html = (site / "index.html").read_text(encoding="utf-8")
    for d in book.ALL_DOCS:
        assert d.title.split(" — ")[0].split(" (")[0] in html, d.title
        if d.written:
            assert f'href="{d.url}"' in html, d.url


def test_provenance_box_on_results_page(built_site):
    site, _, _ = built_site
    html = (site / "ch1-collective/03-ring-allreduce/index.html").read_text(encoding="utf-8")
    assert html.count("provenance") >= 2 and "torchrun" in html and "STALE" not in html


# ----------------------------------------------------------------- the guards, on a one-page site

def _mini_site(tmp_path: Path, page: str) -> Path:
    """A one-page site that uses the book's real mkdocs.yml, hooks and plugins."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(page, encoding="utf-8")
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    text = (text.replace("docs_dir: docs", f"docs_dir: {docs}")
                .replace("site_dir: site", f"site_dir: {tmp_path / 'site'}")
                .replace("custom_dir: docs/_overrides", f"custom_dir: {ROOT / 'docs/_overrides'}")
                .replace("  - scripts/hooks.py", f"  - {ROOT / 'scripts/hooks.py'}"))
    out = tmp_path / "mkdocs.yml"
    out.write_text(text, encoding="utf-8")
    return out


def _build(cfg: Path):
    env = {k: v for k, v in __import__("os").environ.items() if k != "BOOK_ALLOW_STALE"}  # the strict policy
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(cfg)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**env, "NO_MKDOCS_2_WARNING": "1"})


def test_failing_cell_fails_the_build_and_names_its_id(tmp_path):
    cfg = _mini_site(tmp_path, '# t\n\n```python exec="on" id="boom-cell"\nraise RuntimeError("kaput")\n```\n')
    proc = _build(cfg)
    assert proc.returncode != 0
    assert "boom-cell" in proc.stderr and "kaput" in proc.stderr


def test_katex_error_fails_the_build(tmp_path):
    cfg = _mini_site(tmp_path, "# t\n\n$$\\frac{1}{$$\n")
    proc = _build(cfg)
    assert proc.returncode != 0 and "KaTeX cannot render" in proc.stderr


def test_unknown_citation_fails_the_build(tmp_path):
    cfg = _mini_site(tmp_path, "# t\n\nsee [@nobody1999]\n")
    proc = _build(cfg)
    assert proc.returncode != 0 and "nobody1999" in proc.stderr


def _planted(tmp_path, mutate):
    src = results.all_paths()[0]
    d = json.loads(src.read_text())
    mutate(d)
    target = src.parent / f"{d['hardware']['id']}.json"
    assert not target.exists()
    target.write_text(json.dumps(d))
    return target


def test_malformed_results_file_fails_the_build_naming_file_and_field(tmp_path):
    def mutate(d):
        d["hardware"]["id"] = "cpu-test-malformed"
        d["git"]["commit"] = "not-a-commit"
    target = _planted(tmp_path, mutate)
    try:
        proc = _build(_mini_site(tmp_path, "# t\n"))
    finally:
        target.unlink()
    assert proc.returncode != 0
    assert "cpu-test-malformed.json" in proc.stderr and "git/commit" in proc.stderr


def test_stale_result_fails_the_strict_build(tmp_path):
    def mutate(d):
        d["hardware"]["id"] = "cpu-test-stale-build"
        d["script"]["sha256"] = "0" * 64
    target = _planted(tmp_path, mutate)
    try:
        proc = _build(_mini_site(tmp_path, "# t\n"))
    finally:
        target.unlink()
    assert proc.returncode != 0 and "stale result" in proc.stderr


def test_stale_gpu_result_is_shown_with_a_badge_and_does_not_fail_the_strict_build(tmp_path):
    """A GPU result this machine cannot refresh: the page shows it under a badge naming the commit and the
    changed files; the build prints a warning and still passes (snippets/results.py: staleness policy)."""
    fixture = sorted((ROOT / "tests" / "gpu_fixtures" / "results" / "collectives_bench").glob("gpu-*.json"))[0]
    d = json.loads(fixture.read_text())
    d["hardware"]["id"] = "gpu-nccl-1x2-test-stale-gpu"
    d["git"]["commit"] = "abcdef012345" + "0" * 28
    d["inputs"]["gpu_runs/harness.py"] = "0" * 64
    target = results.RESULTS / "collectives_bench" / f"{d['hardware']['id']}.json"
    assert not target.exists()
    target.write_text(json.dumps(d))
    page = ('# t\n\n```python exec="on" html="true" id="stale-gpu"\nfrom snippets import results\n'
            'runs = [r for r in results.experiment("collectives_bench") if "test-stale-gpu" in r.path.name]\n'
            'print(results.hardware_tabs(runs, lambda plat: "| a |\\n|---:|\\n| 1 |"))\n```\n')
    try:
        proc = _build(_mini_site(tmp_path, page))
    finally:
        target.unlink()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "GPU result gpu_runs/results/collectives_bench/gpu-nccl-1x2-test-stale-gpu.json was measured at commit " \
           "abcdef012345" in proc.stderr and "gpu_runs/harness.py changed" in proc.stderr
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'class="stale-badge"' in html and "abcdef012345" in html and "gpu_runs/harness.py changed" in html
    assert "⚠" in re.search(r'<div class="tabbed-labels">(.*?)</div>', html).group(1)


def test_author_escape_hatch_is_off_unless_asked(tmp_path, monkeypatch):
    """BOOK_ALLOW_STALE=1 lets an author build with stale CPU results; without it the strict build fails
    (test_stale_result_fails_the_strict_build). The same planted file, with the variable set, builds."""
    def mutate(d):
        d["hardware"]["id"] = "cpu-test-stale-allowed"
        d["script"]["sha256"] = "0" * 64
    target = _planted(tmp_path, mutate)
    monkeypatch.setenv("BOOK_ALLOW_STALE", "1")
    try:
        cfg = _mini_site(tmp_path, "# t\n")
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(cfg)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    finally:
        target.unlink()
    assert proc.returncode == 0 and "stale result" in proc.stderr and "cpu-test-stale-allowed" in proc.stderr


def test_published_urls_and_anchors_are_stable_and_listed(built_site):
    """Once published, a URL or anchor does not change (GUIDE); new ones are recorded on purpose."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import anchors

    site, _, _ = built_site
    now = anchors.collect(site)
    published = json.loads(anchors.PUBLISHED.read_text(encoding="utf-8"))
    assert published["generated_by"] == "scripts/anchors.py"
    for url, ids in published["pages"].items():
        assert url in now, f"published page {url} disappeared"
        gone = sorted(set(ids) - set(now[url]))
        assert not gone, f"{url}: published anchors disappeared: {gone}"
    new = {u: sorted(set(i) - set(published["pages"].get(u, []))) for u, i in now.items()}
    new = {u: i for u, i in new.items() if i}
    assert not new, f"new pages/anchors not yet recorded (run `python scripts/anchors.py build/site`): {new}"


def test_chapter_labs_are_executed_and_downloadable(built_site):
    site, _, _ = built_site
    labs = [c for c in book.CHAPTERS if (book.DOCS / c.lab_path).exists()]
    assert labs
    for ch in labs:
        folder = site / ch.folder / "lab"
        html = (folder / "index.html").read_text(encoding="utf-8")
        assert 'href="lab.ipynb"' in html and 'href="lab.py"' in html
        nb = json.loads((folder / "lab.ipynb").read_text(encoding="utf-8"))
        assert nb["nbformat"] == 4 and any(c["cell_type"] == "code" for c in nb["cells"])
        # the published .py is the source with the reader's front matter (test_labs_runnable.py) before it
        assert (folder / "lab.py").read_text(encoding="utf-8").rstrip().endswith(
            (book.DOCS / ch.lab_path).read_text(encoding="utf-8").split("# ---\n", 2)[-1].strip())
        assert "jp-OutputArea-output" in html  # executed at build: outputs are present
        assert "Traceback" not in html


def test_no_markdown_left_unrendered(built_site):
    """A table printed by a cell that failed to parse shows up as '| a | b |---|' text in a <p>."""
    site, _, _ = built_site
    broken = re.compile(r"<p>[^<]*\|\s*:?-{3,}:?\s*\|")
    for html in site.glob("**/index.html"):
        m = broken.search(html.read_text(encoding="utf-8"))
        assert not m, f"{html.relative_to(site)}: unrendered table: {m.group(0)[:120]}"


def test_failing_lab_cell_fails_the_build(tmp_path):
    cfg = _mini_site(tmp_path, "# t\n")
    lab = tmp_path / "docs" / "ch1-collective" / "lab.py"
    lab.parent.mkdir()
    lab.write_text('# %% [markdown]\n# # lab\n\n# %%\nraise ValueError("lab-kaput")\n', encoding="utf-8")
    proc = _build(cfg)
    assert proc.returncode != 0
    assert "lab execution failed" in proc.stderr and "ch1-collective/lab.py" in proc.stderr
    assert "lab-kaput" in proc.stderr


def test_landing_map_lists_unwritten_documents_as_plain_titles(built_site):
    """'01. Title' inside a bullet must not become a nested ordered list ('a. Title' on screen)."""
    site, _, _ = built_site
    html = (site / "index.html").read_text(encoding="utf-8")
    unwritten = [d for d in book.ALL_DOCS if not d.written]
    for d in unwritten:
        assert f"<li>{d.number:02d}. {html_escape(d.title)}" in html, d.path
    assert not re.search(r"<li>\s*<ol", html)


def html_escape(s: str) -> str:
    import html as _html

    return _html.escape(s, quote=False)


def test_no_page_points_at_a_placeholder_host(built_site):
    """Without SITE_URL there is no canonical link and the sitemap lists nothing (no fake host)."""
    site, _, _ = built_site
    import os

    if os.environ.get("SITE_URL"):
        pytest.skip("SITE_URL set: the site is built for a real host")
    for path in [*site.glob("**/*.html"), site / "sitemap.xml"]:
        text = path.read_text(encoding="utf-8")
        assert "example.invalid" not in text and "example.com" not in text, path
        assert 'class="md-source"' not in text or os.environ.get("REPO_URL"), path  # no repository link without REPO_URL
        assert 'rel="canonical"' not in text, path
    assert "<loc>" not in (site / "sitemap.xml").read_text(encoding="utf-8")


def test_404_page_is_korean_and_links_home(built_site):
    site, _, _ = built_site
    html = (site / "404.html").read_text(encoding="utf-8")
    assert "페이지를 찾을 수 없습니다" in html and 'lang="ko"' in html
    # served for any missing URL at any depth: assets and the home link are absolute
    assert 'href="/assets/stylesheets/' in html and 'href="/"' in html


def test_site_url_comes_from_the_environment(tmp_path):
    import os

    cfg = _mini_site(tmp_path, "# t\n\nhello\n")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(cfg)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1",
                               "SITE_URL": "https://book.example.org/deep-dive/",
                               "REPO_URL": "https://github.com/someone/dist-book"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert '<link rel="canonical" href="https://book.example.org/deep-dive/">' in html
    assert "<loc>https://book.example.org/deep-dive/</loc>" in (tmp_path / "site" / "sitemap.xml").read_text()
    assert 'href="/deep-dive/assets/stylesheets/' in (tmp_path / "site" / "404.html").read_text(encoding="utf-8")
    # REPO_URL: the header links the repository (Material's source button)
    assert re.search(r'<a href="https://github.com/someone/dist-book"[^>]*class="md-source"', html)


def test_search_index_keeps_prose_and_leaves_out_code_cells_and_solutions(built_site):
    """The index is downloaded on a reader's first visit (scripts/page_weight.py): prose only."""
    site, _, _ = built_site
    raw = (site / "search" / "search_index.json").read_text(encoding="utf-8")
    docs = json.loads(raw)["docs"]
    text = "\n".join(d["text"] for d in docs)
    assert "<pre>" not in text and "\\(" not in text and "\\[" not in text
    assert "\\u" not in raw[:5000]  # UTF-8, not \uXXXX escapes
    ring = [d for d in docs if d["location"].startswith("ch1-collective/03-ring-allreduce/")]
    assert any("대역폭" in d["text"] or "대역폭" in d["title"] for d in ring)
    # what a cell printed is not indexed: a provenance box, a solution's collapsed text
    assert "provenance-table" not in text and "출처 (provenance)" not in text
    # nor a table a cell printed (Ch1-03's ring trace: header "단계 | rank | chunk 0 | chunk 1 ...")
    assert not any("chunk 0 chunk 1 chunk 2" in d["text"] for d in ring)
    # nor a lab's code cells and what they printed or drew; its prose is in
    labs = [d for d in docs if "/lab/" in d["location"]]
    assert labs and not any("Copied!" in d["text"] or "import torch" in d["text"] or "image/svg+xml" in d["text"]
                            for d in labs)
    assert any("gloo" in d["text"] for d in labs if d["location"].startswith("ch1-collective/lab/"))
    # a lab's prose is indexed under its own heading, not the page's top (each notebook cell is a <div>,
    # and the search plugin ends a section where the element around its heading ends)
    bubble = [d for d in labs if d["location"] == "ch4-pipeline-parallel/lab/#3-bubble"]
    assert bubble and "예측해 보세요. 공식은 총 시간 대비" in bubble[0]["text"]
    assert all(not d["text"].strip() for d in labs if "#" not in d["location"])


def test_search_index_covers_every_page_once(built_site):
    """scripts/hooks.py indexes each page while it renders (not in mkdocs' template pass): every page
    that was built, the labs included, is in the index, and none twice (its first section once)."""
    site, _, _ = built_site
    docs = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    pages = {str(p.parent.relative_to(site)).replace(".", "") for p in site.glob("**/index.html")}
    pages = {"" if p == "" else p + "/" for p in pages}
    indexed = [d["location"] for d in docs]
    assert {loc.split("#")[0] for loc in indexed} == pages
    tops = [loc for loc in indexed if "#" not in loc]
    assert len(tops) == len(set(tops)) == len(pages)


def test_every_table_of_contents_link_lands_on_a_heading(built_site):
    """The TOC beside a page links to its headings; on the lab pages mkdocs-jupyter made the two
    disagree (a Korean heading got id "", its TOC link "#_1"). scripts/hooks.py _lab_anchors mends it."""
    site, _, _ = built_site
    checked = 0
    for page in site.glob("**/index.html"):
        html = page.read_text(encoding="utf-8")
        assert ' id=""' not in html, page
        start = html.find('<nav class="md-nav md-nav--secondary"')
        if start < 0:
            continue
        depth, end = 0, None  # the whole TOC: its sub-lists are <nav>s too
        for tag in re.finditer(r"<nav\b|</nav>", html[start:]):
            depth += 1 if tag.group(0) == "<nav" else -1
            if depth == 0:
                end = start + tag.end()
                break
        nav = html[start:end]
        ids = set(re.findall(r'\sid="([^"]+)"', html))
        for href in re.findall(r'href="#([^"]*)"', nav):
            assert href in ids, f"{page.relative_to(site)}: TOC link #{href} has no target"
            checked += 1
    assert checked > 500  # the whole book: about 590 links


def test_lab_pages_carry_only_the_notebook_css_they_use(built_site):
    """mkdocs-jupyter's 575 KB JupyterLab stylesheet is cut, per lab page, to the rules whose classes the
    page names (scripts/css_prune.py; the browser test shows the page looks the same)."""
    site, _, _ = built_site
    for ch in book.CHAPTERS:
        page = site / ch.folder / "lab" / "index.html"
        if not page.exists():
            continue
        html = page.read_text(encoding="utf-8")
        assert "assets/notebook/" not in html
        sheets = re.findall(r'<style type="text/css">(@charset "UTF-8";\.jupyter-wrapper\{.*?)</style>', html, re.S)
        assert len(sheets) == 1
        css = sheets[0]
        assert len(gzip.compress(css.encode("utf-8"))) < 10_000
        rest = html.replace(css, "")
        for cls in set(re.findall(r"\.(-?[_a-zA-Z][\w-]*)", re.sub(r":not\([^)]*\)", "", css))):
            assert cls in rest, f"{page}: a rule for .{cls}, which the page never names"

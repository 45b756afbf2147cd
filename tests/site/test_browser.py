"""A real browser (Playwright driving Debian's Chromium, headless) on every page of the built site.

Checks per page: no console errors, no KaTeX errors, no leftover TeX delimiters in the text, no
request to any host but the local server. Also: Korean search finds a page; instant navigation
keeps math rendered; screenshots are kept under test-artifacts/screenshots/.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest

from snippets import book

ROOT = book.ROOT
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium")]

CHROME_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage"]


def _pages(site: Path) -> list[str]:
    urls = []
    for html in sorted(site.glob("**/index.html")):
        rel = html.parent.relative_to(site).as_posix()
        if rel in ("404",) or rel.startswith("assets"):
            continue
        urls.append("" if rel == "." else rel + "/")
    return urls


def _open(browser, url, wait: str = "networkidle"):
    """A new 1280-px tab on `url`, collecting console errors and blocking (and listing) requests to other
    hosts; returns when the page is loaded and the network idle (wait="commit": as soon as it navigates,
    so that several tabs can load at once; then call page.wait_for_load_state("networkidle"))."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors, foreign = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            return r.continue_()
        foreign.append(r.request.url)
        return r.abort()

    page.route("**/*", route)
    page.goto(url, wait_until=wait)
    return page, errors, foreign


def test_every_page_is_clean(page_pass):
    assert len(page_pass["urls"]) >= 5
    assert not page_pass["problems"], page_pass["problems"]


def test_korean_search_finds_the_ring_page(server, browser):
    base, _ = server
    page, errors, _ = _open(browser, base)
    box = page.locator("input.md-search__input")
    box.click()
    box.fill("대역폭")  # Hangul arrives as composed text; Material listens for key events
    box.press("End")
    page.keyboard.press("Space")
    page.keyboard.press("Backspace")
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    links = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(e => e.href)")
    page.screenshot(path=str(ARTIFACTS / "search-korean.png"))
    assert any("03-ring-allreduce" in h for h in links), links
    assert not errors


def _search_pages(page, query: str) -> list[str]:
    """The pages (paths, in order, each once) that Material's search lists for `query`, typed as a reader would."""
    box = page.locator("input.md-search__input")
    box.click()
    box.fill(query)
    box.press("End")
    page.keyboard.press("Space")
    page.keyboard.press("Backspace")
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    page.wait_for_timeout(300)  # the worker answers each keystroke: let the last answer settle
    hrefs = page.eval_on_selector_all(".md-search-result__item > a", "els => els.map(e => e.href)")
    return list(dict.fromkeys(urlparse(h).path.strip("/") for h in hrefs))


# A reader's queries in Korean (or mixed) and the page each should find among the first three (glossary.py).
KOREAN_QUERIES = {
    "버블": "ch4-pipeline-parallel/01-naive-pipeline-bubble",
    "파이프라인 bubble": "ch4-pipeline-parallel/01-naive-pipeline-bubble",  # the page that defines it
    "ZeRO-3": "ch5-zero-sharding/04-zero-3",
    "기울기 누적": "ch2-data-parallel/04-gradient-accumulation",
    "체크포인트": "ch7-3d-parallelism/03-checkpointing-resume",
}


@pytest.mark.parametrize("query", list(KOREAN_QUERIES))
def test_korean_queries_find_the_page_a_reader_wants(server, browser, query):
    base, _ = server
    page, errors, _ = _open(browser, base)
    found = _search_pages(page, query)
    page.screenshot(path=str(ARTIFACTS / f"search-{KOREAN_QUERIES[query].split('/')[-1]}.png"))
    assert KOREAN_QUERIES[query] in found[:3], (query, found[:5])
    assert not errors
    page.close()


def test_search_index_is_fetched_only_when_the_reader_turns_to_search(server, browser):
    """docs/_overrides/main.html holds the index request back (first-visit weight); Material's search
    must still work when opened with its keyboard shortcut, after an instant navigation."""
    base, _ = server
    page, errors, _ = _open(browser, base)
    requested = []
    page.on("request", lambda r: requested.append(r.url) if "search_index.json" in r.url else None)
    page.locator("article a[href$='ch1-collective/03-ring-allreduce/']").first.click()  # instant navigation
    page.wait_for_load_state("networkidle")
    assert not requested, "the search index was fetched before search was used"
    page.keyboard.press("/")  # Material's shortcut: opens search and focuses the box
    page.wait_for_selector("input.md-search__input:focus")
    page.keyboard.type("ring", delay=50)
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    assert len(requested) == 1 and not errors, (requested, errors)


def test_instant_navigation_keeps_math_rendered(server, browser):
    base, _ = server
    page, errors, foreign = _open(browser, base)
    page.locator('.md-content a[href$="ch1-collective/03-ring-allreduce/"]').first.click()
    page.wait_for_url(re.compile(r".*03-ring-allreduce/$"))
    page.wait_for_selector("#thm-ring-traffic")
    assert page.locator(".katex").count() > 50
    assert page.locator(".katex-error").count() == 0
    page.screenshot(path=str(ARTIFACTS / "instant-nav-ring.png"))
    assert not errors and not foreign


STYLE_DIGEST_JS = """() => {
  const props = ["display", "position", "color", "background-color", "font-family", "font-size", "font-weight",
    "font-style", "line-height", "white-space", "margin-top", "margin-bottom", "margin-left", "padding-top",
    "padding-left", "border-top-width", "border-top-style", "border-top-color", "border-left-width",
    "overflow-x", "text-align", "width", "height", "visibility", "opacity", "box-shadow", "list-style-type"];
  const out = [];
  for (const el of document.querySelectorAll("body *")) {
    const cs = getComputedStyle(el);
    out.push(el.tagName + "." + el.className + ":" + props.map(p => cs.getPropertyValue(p)).join("|"));
  }
  return out;
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pruned_notebook_css_looks_the_same_as_the_whole_stylesheet(server, browser, scheme):
    """A lab page carries only the notebook CSS rules it can use (scripts/css_prune.py). Swap in the
    whole JupyterLab stylesheet that mkdocs-jupyter produces (an independent conversion of the same lab)
    and compare the computed style of every element of the page, in the light and the dark scheme."""
    from mkdocs_jupyter.nbconvert2 import nb2html

    base, site = server
    whole = re.search(r'<style type="text/css">\s*(@charset "UTF-8";\.jupyter-wrapper\{.*?)</style>',
                      nb2html(str(ROOT / "docs" / "ch4-pipeline-parallel" / "lab.py"), theme="auto"), re.S)
    assert whole and len(whole.group(1)) > 400_000
    for ch in ("ch1-collective", "ch4-pipeline-parallel"):
        page = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
        page.goto(f"{base}{ch}/lab/", wait_until="networkidle")
        pruned = page.evaluate("""() => [...document.querySelectorAll("style")]
            .filter(s => s.textContent.startsWith('@charset "UTF-8";.jupyter-wrapper{')).map(s => s.textContent.length)""")
        assert len(pruned) == 1 and pruned[0] < 60_000, pruned
        before = page.evaluate(STYLE_DIGEST_JS)
        page.evaluate("""css => { const s = [...document.querySelectorAll("style")]
            .find(s => s.textContent.startsWith('@charset "UTF-8";.jupyter-wrapper{')); s.textContent = css; }""",
                      whole.group(1))
        after = page.evaluate(STYLE_DIGEST_JS)
        page.close()
        assert len(before) == len(after) > 500
        diff = [(b, a) for b, a in zip(before, after) if b != a]
        assert not diff, f"{ch} ({scheme}): {len(diff)} elements styled differently, e.g. {diff[:2]}"

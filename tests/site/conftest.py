"""Fixtures the browser tests share, once per session: the local server over the built site, one headless
Chromium, and one pass over every page (tests/site/test_browser.py and test_wide_content.py read it)."""
from __future__ import annotations

import functools
import http.server
import threading

import pytest

from tests.site.test_browser import ARTIFACTS, CHROME_ARGS, CHROMIUM, _open, _pages  # noqa: F401


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server(built_site):
    site, _, _ = built_site
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", site
    httpd.shutdown()


@pytest.fixture(scope="module")  # closed with its module: scripts/pdf.py (test_pdf.py) starts its own Playwright
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        yield b
        b.close()


def _check(rel, page, errors, foreign, problems, wide) -> None:
    """One loaded page: console errors, foreign requests, KaTeX errors and TeX left in the text, a screenshot;
    on chapter pages, with every collapsible block opened, test_wide_content.py's probe."""
    from tests.site.test_wide_content import PROBE

    katex_errors = page.locator(".katex-error").count()
    text = page.evaluate("""() => {
        const clone = document.body.cloneNode(true);
        clone.querySelectorAll('pre, code, .katex, script, style').forEach(e => e.remove());
        return clone.innerText; }""")
    leftovers = [d for d in ("$$", "\\(", "\\[") if d in text]
    name = (rel.strip("/").replace("/", "__") or "index") + ".png"
    page.screenshot(path=str(ARTIFACTS / name), full_page=False)
    if errors or foreign or katex_errors or leftovers:
        problems.append((rel, errors[:3], foreign[:3], katex_errors, leftovers))
    if rel.startswith("ch"):
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        wide[rel.rstrip("/")] = {k: v for k, v in page.evaluate(PROBE).items() if v}


@pytest.fixture(scope="session")
def page_pass(server):
    """Every page opened once at 1280 px: what test_every_page_is_clean checks, and, for the chapter pages,
    what test_wide_content.py checks (one page load serves both)."""
    base, site = server
    urls = _pages(site)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    problems, wide = [], {}
    from playwright.sync_api import sync_playwright

    # its own Chromium, closed before the fixture returns: a Playwright left open for the session would make
    # every later sync_playwright() (scripts/pdf.py in test_pdf.py) fail inside its event loop
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        # three tabs load at once (about half the time of one after another on two cores), then each is checked
        for i in range(0, len(urls), 3):
            tabs = [(rel, *_open(browser, base + rel, wait="commit")) for rel in urls[i:i + 3]]
            for _, page, _, _ in tabs:
                page.wait_for_load_state("networkidle")
            for rel, page, errors, foreign in tabs:
                _check(rel, page, errors, foreign, problems, wide)
                page.close()
        browser.close()
    return {"urls": urls, "problems": problems, "wide": wide}

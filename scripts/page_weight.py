"""Page weight over the wire: what a browser downloads from a server that compresses (gzip).

    python scripts/page_weight.py [SITE_DIR]      (default: build/site; build it first)

Serves SITE_DIR on 127.0.0.1 the way a static host does (gzip for text, Last-Modified, and
`Cache-Control: max-age=600` as GitHub Pages sends), loads pages in headless Chromium and counts the
bytes the server sent (headers and bodies, every request, the search worker's included):

- first visit: a fresh browser opens the page and waits until the network is idle. The search index
  is not part of it: docs/_overrides/main.html holds its request back until the reader turns to search;
- first search: on the landing page of a fresh browser, the reader clicks the search box and types a
  word; what that costs on top of the first visit (the search index) is reported on its own line;
- further page: the same browser then opens the page from the landing page (assets cached).

Budgets (issue 7): first visit ≤ 600 KB, each further page ≤ 100 KB. Prints a Markdown table and the
largest files of the heaviest first visit; exits 1 when a budget is exceeded.
"""
from __future__ import annotations

import email.utils
import gzip
import http.server
import mimetypes
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_BUDGET, NEXT_BUDGET = 600_000, 100_000
COMPRESS = (".html", ".css", ".js", ".json", ".svg", ".xml", ".txt", ".map", ".py", ".ipynb")


def make_handler(site: Path, log: list):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            rel = self.path.split("?")[0].split("#")[0].lstrip("/")
            path = (site / rel).resolve()
            if path.is_dir():
                path = path / "index.html"
            if not path.is_relative_to(site.resolve()) or not path.is_file():
                path, status = site / "404.html", 404
            else:
                status = 200
            mtime = int(path.stat().st_mtime)
            ims = self.headers.get("If-Modified-Since")
            if status == 200 and ims and email.utils.parsedate_to_datetime(ims).timestamp() >= mtime:
                self._send(304, b"", path, mtime, rel)
                return
            body = path.read_bytes()
            gz = path.suffix in COMPRESS and "gzip" in self.headers.get("Accept-Encoding", "")
            self._send(status, gzip.compress(body, 6) if gz else body, path, mtime, rel, gz)

        def _send(self, status, body, path, mtime, rel, gz=False):
            headers = {"Content-Type": mimetypes.guess_type(path.name)[0] or "application/octet-stream",
                       "Content-Length": str(len(body)), "Last-Modified": email.utils.formatdate(mtime, usegmt=True),
                       "Cache-Control": "max-age=600"}
            if gz:
                headers["Content-Encoding"] = "gzip"
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if status != 304:
                self.wfile.write(body)
            head = len(f"HTTP/1.1 {status} OK\r\n") + sum(len(k) + len(v) + 4 for k, v in headers.items()) + 2
            log.append((rel or "index.html", status, head + (len(body) if status != 304 else 0)))

    return Handler


def measure(site: Path) -> list[dict]:
    from playwright.sync_api import sync_playwright

    log: list = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(site, log))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    pages = sorted(p.parent.relative_to(site).as_posix() + "/" for p in site.glob("**/index.html"))
    pages = ["" if p == "./" else p for p in pages if not p.startswith("assets/")]
    rows = []

    def visit(pg, url):
        pg.goto(url, wait_until="load")
        pg.wait_for_load_state("networkidle")
        time.sleep(0.3)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium",
                                     args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        for page in pages:
            ctx = browser.new_context()
            pg = ctx.new_page()
            del log[:]
            visit(pg, base + page)
            first = list(log)
            ctx.close()
            ctx = browser.new_context()
            pg = ctx.new_page()
            visit(pg, base)
            del log[:]
            visit(pg, base + page)
            further = list(log)
            ctx.close()
            rows.append({"page": page or "(landing)", "first": sum(b for *_, b in first),
                         "next": sum(b for *_, b in further), "files": first, "next_files": further})
        ctx = browser.new_context()
        pg = ctx.new_page()
        visit(pg, base)
        held = not any(rel.startswith("search/search_index.json") for rel, *_ in log)
        del log[:]
        pg.click("input.md-search__input")
        pg.fill("input.md-search__input", "ring")
        pg.wait_for_selector(".md-search-result__item", timeout=30000)
        pg.wait_for_load_state("networkidle")
        rows.append({"page": "(first search)", "first": sum(b for *_, b in log), "next": 0, "files": list(log),
                     "next_files": [], "index_held_back": held})
        ctx.close()
        browser.close()
    httpd.shutdown()
    return rows


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else ROOT / "build" / "site"
    if not (site / "index.html").exists():
        sys.exit(f"{site}: no built site (run: .venv/bin/mkdocs build --strict -d {site})")
    rows = measure(site)
    search = rows.pop()
    print("| page | first visit (KB, gzip) | further page (KB, gzip) |\n|---|---:|---:|")
    for r in rows:
        print(f"| {r['page']} | {r['first'] / 1000:.0f} | {r['next'] / 1000:.0f} |")
    worst = max(rows, key=lambda r: r["first"])
    worst_next = max(rows, key=lambda r: r["next"])
    print(f"\nheaviest first visit: {worst['page']} {worst['first'] / 1000:.0f} KB (budget {FIRST_BUDGET / 1000:.0f});"
          f" heaviest further page: {worst_next['page']} {worst_next['next'] / 1000:.0f} KB (budget {NEXT_BUDGET / 1000:.0f})")
    for rel, status, size in sorted(worst["files"], key=lambda f: -f[2])[:8]:
        print(f"  {size / 1000:7.1f} KB  {status}  {rel}")
    print(f"{worst_next['page']} as a further page:")
    for rel, status, size in sorted(worst_next["next_files"], key=lambda f: -f[2])[:8]:
        print(f"  {size / 1000:7.1f} KB  {status}  {rel}")
    landing = next(r for r in rows if r["page"] == "(landing)")
    print(f"first search (on top of the first visit): {search['first'] / 1000:.0f} KB, of which the index "
          f"{sum(b for rel, _, b in search['files'] if rel.startswith('search/')) / 1000:.0f} KB; "
          f"index held back until then: {search['index_held_back']}; landing page + first search: "
          f"{(landing['first'] + search['first']) / 1000:.0f} KB")
    return 0 if search["index_held_back"] and worst["first"] <= FIRST_BUDGET and worst_next["next"] <= NEXT_BUDGET else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

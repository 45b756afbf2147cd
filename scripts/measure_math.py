"""Compare KaTeX at build time with KaTeX in the browser: page weight and time to rendered math.

    python scripts/measure_math.py [page-url-path]   (default ch1-collective/03-ring-allreduce/)

Builds the site twice (MATH_RENDER=build and MATH_RENDER=browser) into build/math-*, serves each on
127.0.0.1, loads the page in headless Chromium with the cache disabled, and reports: bytes
transferred (HTML, CSS, JS, fonts), HTML bytes, and the time from navigation start until every math
element is rendered, polled every animation frame (median of 5 loads). The search index (loaded by
every page, cached by a real browser) is reported separately under XHR. Prints a Markdown table.
"""
from __future__ import annotations

import functools
import http.server
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def build(mode: str) -> Path:
    out = ROOT / "build" / f"math-{mode}"
    env = {**os.environ, "MATH_RENDER": mode, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)], cwd=ROOT,
                   env=env, check=True)
    return out


def measure(site: Path, page: str, loads: int = 5) -> dict:
    from playwright.sync_api import sync_playwright

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/{page}"
    times, sizes = [], {}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium",
                              args=["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for i in range(loads):
            ctx = b.new_context()
            pg = ctx.new_page()
            cdp = ctx.new_cdp_session(pg)
            cdp.send("Network.enable")
            cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
            got = {}
            cdp.on("Network.loadingFinished", lambda e: got.__setitem__(e["requestId"], e["encodedDataLength"]))
            kinds = {}
            cdp.on("Network.responseReceived", lambda e: kinds.__setitem__(e["requestId"], e["type"]))
            # poll every animation frame from the very start: when is every math element rendered?
            pg.add_init_script("""(() => { const tick = () => {
                const m = document.querySelectorAll('.arithmatex');
                if (m.length && [...m].every(e => e.querySelector('.katex'))) { window.__mathReady = performance.now(); }
                else { requestAnimationFrame(tick); } }; requestAnimationFrame(tick); })();""")
            pg.goto(url, wait_until="load")
            pg.wait_for_function("() => window.__mathReady !== undefined", timeout=30000)
            times.append(pg.evaluate("window.__mathReady"))
            pg.wait_for_load_state("networkidle")
            if i == 0:
                for rid, n in got.items():
                    k = kinds.get(rid, "Other")
                    sizes[k] = sizes.get(k, 0) + n
            ctx.close()
        b.close()
    httpd.shutdown()
    html = (site / page / "index.html").stat().st_size
    return {"ms": statistics.median(times), "bytes": sum(sizes.values()), "by_type": sizes, "html": html}


def main(argv):
    page = argv[0] if argv else "ch1-collective/03-ring-allreduce/"
    rows = []
    for mode in ("build", "browser"):
        site = build(mode)
        m = measure(site, page)
        rows.append((mode, m))
    print("| KaTeX | HTML bytes | transferred bytes (all) | by type | time to rendered math (median of 5) |")
    print("|---|---:|---:|---|---:|")
    for mode, m in rows:
        kinds = ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sorted(m["by_type"].items()))
        print(f"| {mode} | {m['html']:,} | {m['bytes']:,} | {kinds} | {m['ms']:.0f} ms |")


if __name__ == "__main__":
    main(sys.argv[1:])

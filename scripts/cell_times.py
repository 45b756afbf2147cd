"""Time every executed cell of the pages (GUIDE: one build-time cell under 1 s).

    python scripts/cell_times.py [docs/ch1-collective/03-ring-allreduce.md ...]   (default: every page)

Runs the ```python exec="on"``` cells of each page in order, one namespace per session, the way
markdown-exec does at build time, and prints the slowest cells with their ids.
"""
from __future__ import annotations

import contextlib
import io
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FENCE = re.compile(r'^(\s*)```python[^\n]*exec="on"[^\n]*$')


def cells(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            head, indent, body = lines[i], len(m.group(1)), []
            i += 1
            while not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            cid = re.search(r'id="([^"]+)"', head)
            sess = re.search(r'session="([^"]+)"', head)
            yield (cid.group(1) if cid else f"line{i}"), (sess.group(1) if sess else None), "\n".join(body)
        i += 1


def main(argv):
    import matplotlib

    matplotlib.use("Agg")
    pages = [Path(a) for a in argv] or sorted((ROOT / "docs").glob("ch*/[0-9][0-9]-*.md"))
    timings = []
    for page in pages:
        sessions: dict[str, dict] = {}
        for cid, sess, code in cells(page):
            ns = sessions.setdefault(sess, {}) if sess else {}
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(code, f"{page.name}:{cid}", "exec"), ns)
            timings.append((time.perf_counter() - t0, page.name, cid))
    for sec, page, cid in sorted(timings, reverse=True)[:25]:
        print(f"{sec:6.2f} s  {page}  {cid}")
    print(f"{len(timings)} cells, {sum(t for t, *_ in timings):.1f} s in all, "
          f"{sum(t > 1 for t, *_ in timings)} over 1 s")


if __name__ == "__main__":
    main(sys.argv[1:])

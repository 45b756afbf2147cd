"""Measure the author loop and the build against the book's budgets (a benchmark, not a test).

    python scripts/bench_build.py [--no-serve] [--out build/build-time.txt]

Works in a temporary copy of this checkout (tracked and untracked files; .venv and node_modules
linked), so nothing here is touched, and reports:

- cold strict build (empty cache: every cell and lab executed), wall and CPU seconds;
- warm strict build with no change (every page's cells reused from .cache/book/);
- under `mkdocs serve --dirty` (what `make serve` runs): seconds from saving an edit to the page
  being fresh, for one page edited (a new paragraph shows in the served HTML) and for one snippet
  module edited (the rebuild that re-executes its pages has finished), with the cells' own time;
- the machine-speed probe of tests/conftest.py, so figures can be read against the usual machine
  (slowdown = probe / reference; a figure divided by the slowdown is the usual machine's).

Writes the figures to build/build-time.txt and prints them.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = "docs/ch1-collective/03-ring-allreduce.md"
PAGE_URL = "ch1-collective/03-ring-allreduce/"
SNIPPET = "snippets/ch1_collective/d03_ring_allreduce.py"


def copy_checkout(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for link in (".venv", "node_modules"):
        (dest / link).symlink_to((ROOT / link).resolve())


def env_for(repo: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(repo), "NO_MKDOCS_2_WARNING": "1", "BOOK_CACHE": "1",
            "BOOK_CACHE_DIR": str(repo / ".cache" / "book")}


def _busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat; not the time a hypervisor
    gave to other guests), or None off Linux. Whatever else runs meanwhile counts too, so bench on an
    otherwise idle machine. The build's processes are not all children that get waited for (a lab's
    forkserver and workers are not), so resource.getrusage would miss part of them."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def build(repo: Path) -> tuple[float, float, str]:
    """One strict build: wall seconds, busy CPU seconds of the machine meanwhile (children's CPU where
    /proc/stat is missing), and the log."""
    before, busy0 = resource.getrusage(resource.RUSAGE_CHILDREN), _busy_cpu_seconds()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(repo / "site")],
                          cwd=repo, env=env_for(repo), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after, busy1 = resource.getrusage(resource.RUSAGE_CHILDREN), _busy_cpu_seconds()
    if proc.returncode:
        sys.exit(f"build failed:\n{proc.stderr[-4000:]}")
    if busy0 is not None and busy1 is not None:
        return wall, busy1 - busy0, proc.stderr
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode("utf-8")
    except OSError:
        return ""


def serve_figures(repo: Path) -> dict:
    port = _free_port()
    log = open(repo / "serve.log", "w+", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "--dirty", "--no-strict", "-a", f"127.0.0.1:{port}",
                             "-w", "snippets", "-w", "gpu_runs/results", "-w", "scripts"],
                            cwd=repo, env=env_for(repo), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    text = lambda: (repo / "serve.log").read_text(encoding="utf-8")  # noqa: E731
    out = {}
    try:
        t0 = time.perf_counter()
        while "Serving on" not in text():
            if proc.poll() is not None or time.perf_counter() - t0 > 600:
                sys.exit(f"mkdocs serve did not start:\n{text()[-3000:]}")
            time.sleep(0.1)
        out["serve_first"] = time.perf_counter() - t0
        url = f"http://127.0.0.1:{port}/{PAGE_URL}"
        time.sleep(1.0)

        # one page edited: a new paragraph must show in the served page
        marker = f"bench-marker-{time.time_ns()}"
        with open(repo / PAGE, "a", encoding="utf-8") as f:
            f.write(f"\n{marker}\n")
        t0 = time.perf_counter()
        while marker not in _fetch(url):
            if time.perf_counter() - t0 > 120:
                sys.exit(f"page never refreshed:\n{text()[-3000:]}")
            time.sleep(0.05)
        out["serve_page_edit"] = time.perf_counter() - t0
        time.sleep(1.5)
        import json

        index = json.loads(_fetch(f"http://127.0.0.1:{port}/search/search_index.json") or "{}")
        out["serve_index_pages"] = len({d["location"].split("#")[0] for d in index.get("docs", [])})

        # one snippet edited: the rebuild that re-executes its page(s) must finish
        n_built = text().count("Documentation built in")
        before = len(text())
        with open(repo / SNIPPET, "a", encoding="utf-8") as f:
            f.write(f"\n# {marker}\n")
        t0 = time.perf_counter()
        while text().count("Documentation built in") <= n_built:
            if time.perf_counter() - t0 > 180:
                sys.exit(f"no rebuild after the snippet edit:\n{text()[-3000:]}")
            time.sleep(0.05)
        out["serve_snippet_edit"] = time.perf_counter() - t0
        tail = text()[before:]  # this rebuild's log: BOOK_TIMING prints each page's render time
        m = re.findall(r"book cache: cells executed on (\d+) pages( \([^)]*\))?", tail)
        out["serve_snippet_pages"] = (m[-1][0] + m[-1][1]) if m else "?"
        rerun = re.findall(r"[\w/.-]+\.md", m[-1][1]) if m else []
        times = dict((uri, float(sec)) for sec, uri in re.findall(r"page time +([\d.]+) s \(.*?\)  (\S+\.md)$", tail, re.M))
        out["serve_snippet_renders"] = sum(times.get(uri, float("nan")) for uri in rerun) if rerun else float("nan")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        log.close()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-serve", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "build" / "build-time.txt"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.conftest import PROBE_REFERENCE_S, _probe, machine_speed_probe, write_build_time
    from snippets import book

    probe = machine_speed_probe()
    slow = max(1.0, probe / PROBE_REFERENCE_S)
    n_pages = len(book.written_docs())
    n_labs = sum((book.DOCS / c.lab_path).exists() for c in book.CHAPTERS)
    with tempfile.TemporaryDirectory(prefix="book-bench-") as tmp:
        repo = Path(tmp)
        copy_checkout(repo)
        cold_wall, cold_cpu, cold_log = build(repo)
        warm_wall, warm_cpu, warm_log = build(repo)
        assert re.search(r"cells executed on 0 pages", warm_log), warm_log[-2000:]
        os.environ["BOOK_TIMING"] = "1"
        serve = {} if args.no_serve else serve_figures(repo)
        probe_after = _probe()
    lines = [
        f"# scripts/bench_build.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"{n_pages} documents, {n_labs} labs, {os.cpu_count()} cores",
        f"probe {probe:.3f} s before, {probe_after:.3f} s after (reference {PROBE_REFERENCE_S} s, slowdown {slow:.2f})",
        f"cold strict build: wall {cold_wall:.2f} s, busy cpu {cold_cpu:.2f} s "
        f"({cold_wall / max(1, n_pages):.2f} s wall per document; usual machine ≈ {cold_wall / slow:.1f} s)",
        f"warm strict build, no change: wall {warm_wall:.2f} s, busy cpu {warm_cpu:.2f} s "
        f"(usual machine ≈ {warm_wall / slow:.1f} s)",
    ]
    if serve:
        lines += [
            f"serve --dirty, first build until serving: {serve['serve_first']:.2f} s",
            f"serve, one page edited → fresh in the browser: {serve['serve_page_edit']:.2f} s "
            f"(search index after that rebuild still covers {serve['serve_index_pages']} pages)",
            f"serve, one snippet edited → rebuild done: {serve['serve_snippet_edit']:.2f} s, pages re-executed: "
            f"{serve['serve_snippet_pages']}; those pages' renders (cells, Markdown, math): "
            f"{serve['serve_snippet_renders']:.2f} s, so the rest of the rebuild took "
            f"{serve['serve_snippet_edit'] - serve['serve_snippet_renders']:.2f} s (budget 2 s)",
        ]
    # keep what the test suite's build wrote there (tests/conftest.py: wall, cpu, probe); replace our section
    write_build_time(Path(args.out), "bench", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

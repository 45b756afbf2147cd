"""Build the book with the synthetic GPU fixtures in place, in a scratch copy of the checkout, and read
back which results each page shows.

    python -m tests.gpu_fixtures.build                       # whole book, into /tmp/gpu-fixture-site
    python -m tests.gpu_fixtures.build --only "ch5-zero-sharding/*" --dest /tmp/x

A page shows a results file when its provenance box names the file (`gpu_runs/results/<program>/<id>.json`).
Every fixture mirrors one CPU file at the same world size (cpu-gloo-2proc-… ↔ gpu-nccl-1x2-…), so a page
that shows a CPU file k times must show its GPU mirror k times (`missing_gpu`)."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "results"
SHOWN = re.compile(r"<th>파일</th><td><code>gpu_runs/results/([\w-]+)/([\w.-]+)\.json</code>")


def scratch_checkout(dest: Path, fixtures: Path = FIXTURES) -> Path:
    """A copy of the checkout (tracked and untracked-not-ignored files) with the fixtures added to
    gpu_runs/results/, and links to this checkout's .venv and node_modules."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_build import copy_checkout

    copy_checkout(dest)
    for f in fixtures.glob("*/*.json"):
        (dest / "gpu_runs" / "results" / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / "gpu_runs" / "results" / f.parent.name / f.name)
    return dest


def build(repo: Path, only: str = "", timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo), "NO_MKDOCS_2_WARNING": "1", "BOOK_CACHE": "0"}
    env.pop("BOOK_ONLY", None)
    if only:
        env["BOOK_ONLY"] = only
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(repo / "site")],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


def mirror(gpu_id: str) -> str | None:
    """gpu-nccl-1x4-nvidia-h200 -> cpu world 4 key 'w4' (the CPU file it was made from has world 4)."""
    m = re.match(r"gpu-nccl-(\d+)x(\d+)-", gpu_id)
    return f"w{int(m[1]) * int(m[2])}" if m else None


def shown(site: Path) -> dict[str, Counter]:
    """page (site-relative index.html) -> Counter of (program, 'cpu'|'gpu', 'w<world>') it shows."""
    out = {}
    for page in sorted(site.rglob("index.html")):
        text = page.read_text(encoding="utf-8")
        c = Counter()
        for program, hid in SHOWN.findall(text):
            if hid.startswith("cpu-"):
                m = re.match(r"cpu-\w+-(\d+)proc-", hid)
                c[(program, "cpu", f"w{m[1]}" if m else hid)] += 1
            else:
                c[(program, "gpu", mirror(hid) or hid)] += 1
        if c:
            out[page.relative_to(site).as_posix()] = c
    return out


def missing_gpu(counts: dict[str, Counter], fixture_programs: set[str]) -> dict[str, list]:
    """Per page, the CPU results shown more often than their GPU mirrors (programs with fixtures)."""
    bad = {}
    for page, c in counts.items():
        gaps = [(prog, w, n, c.get((prog, "gpu", w), 0)) for (prog, kind, w), n in c.items()
                if kind == "cpu" and prog in fixture_programs and c.get((prog, "gpu", w), 0) != n]
        if gaps:
            bad[page] = gaps
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="BOOK_ONLY globs, e.g. 'ch1-collective/*'")
    ap.add_argument("--dest", type=Path, default=None, help="scratch checkout (default: a new temp folder)")
    a = ap.parse_args(argv)
    dest = a.dest or Path(tempfile.mkdtemp(prefix="gpu-fixture-"))
    if dest.exists() and any(dest.iterdir()):
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    scratch_checkout(dest)
    proc = build(dest, a.only)
    print(proc.stderr[-6000:] if proc.returncode else "\n".join(
        ln for ln in proc.stderr.splitlines() if "WARNING" in ln)[-6000:])
    if proc.returncode:
        print(f"build FAILED (exit {proc.returncode}); scratch checkout kept at {dest}")
        return 1
    counts = shown(dest / "site")
    progs = {p.name for p in FIXTURES.glob("*/")}
    for page, c in counts.items():
        cpu = sum(n for k, n in c.items() if k[1] == "cpu")
        gpu = sum(n for k, n in c.items() if k[1] == "gpu")
        print(f"{page:<60} CPU boxes {cpu:3d}  GPU boxes {gpu:3d}")
    bad = missing_gpu(counts, progs)
    for page, gaps in bad.items():
        for prog, w, n, g in gaps:
            print(f"MISSING GPU  {page}: {prog} {w}: CPU shown {n}×, GPU mirror {g}×")
    print(f"site: {dest / 'site'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The build cache (scripts/book_cache.py) never shows stale output, and reuses what did not change.

Everything happens in a temporary copy of the repository: a small partial build (BOOK_ONLY) of two pages
that read different snippet modules and results files, plus a one-cell chapter lab. Each test edits one
input and checks, from the build's --verbose log, which pages' cells ran, and from the HTML that the
affected page shows the edit.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from snippets import book

ROOT = book.ROOT
pytestmark = pytest.mark.build

A = "ch1-collective/03-ring-allreduce.md"        # snippets.ch1_collective.d03_ring_allreduce, collectives_bench
B = "ch5-zero-sharding/02-zero-1.md"             # snippets.ch5_zero_sharding.d02_zero_1, zero_bench
LAB = "ch1-collective/lab.py"
ONLY = "ch1-collective/03-*,ch5-zero-sharding/02-*,ch1-collective/lab.py"
# the lab imports a shared module that page A also imports (through d03) and that no gpu_runs program imports:
# editing it must rerun both, and must not make a committed result stale (programs hash what they import)
TINY_LAB = ('# %% [markdown]\n# # Lab\n\n# %%\nfrom snippets.common import figures\n'
            'print("LAB-RAN", figures.__name__)\n')


def _copy(dest: Path) -> Path:
    """A copy of this checkout (what git tracks or would track, as on disk), made as scripts/bench_build.py
    makes its own, with a one-cell lab in place of the Ch1 lab."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_build_for_tests", ROOT / "scripts" / "bench_build.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.copy_checkout(dest)
    (dest / "docs" / LAB).write_text(TINY_LAB, encoding="utf-8")  # one kernel start, not a real lab's minute
    return dest


class Repo:
    def __init__(self, path: Path):
        self.path = path

    def build(self, cache: str = "1", check: bool = True):
        # BOOK_ONLY_BARE: no generated page (glossary, indexes …) in these ~17 builds; they follow no cache rule here
        env = {**os.environ, "PYTHONPATH": str(self.path), "NO_MKDOCS_2_WARNING": "1", "BOOK_ONLY": ONLY,
               "BOOK_ONLY_BARE": "1", "BOOK_CACHE": cache}
        env.pop("BOOK_CACHE_DIR", None)
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--verbose", "-d",
                               str(self.path / "site")], cwd=self.path, env=env, capture_output=True,
                              text=True, timeout=600)
        if check:
            assert proc.returncode == 0, proc.stderr[-5000:]
        return proc

    @staticmethod
    def ran(proc) -> dict[str, str]:
        """{page: 'executed' | 'reused'} from the build's debug lines."""
        found = dict(re.findall(r"book cache: (\S+\.md): \d+ cells (executed|reused)", proc.stderr))
        return {p: found[p] for p in (A, B) if p in found}  # (index.md has cells too: not followed here)

    def html(self, page: str) -> str:
        return (self.path / "site" / page.removesuffix(".md") / "index.html").read_text(encoding="utf-8")

    def edit(self, rel: str, fn) -> None:
        p = self.path / rel
        p.write_text(fn(p.read_text(encoding="utf-8")), encoding="utf-8")

    def entries(self) -> list[Path]:
        return sorted((self.path / ".cache" / "book").glob("*/*.json"))


def _article(html: str) -> str:
    return html[html.index("<article"): html.index("</article>")]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = Repo(_copy(tmp_path_factory.mktemp("cache-repo")))
    cold = r.build()
    assert Repo.ran(cold) == {A: "executed", B: "executed"}, cold.stderr[-3000:]
    assert "labs executed 1" in cold.stderr and "LAB-RAN" in (r.path / "site" / "ch1-collective/lab/index.html").read_text()
    r.cold = {p: _article(r.html(p)) for p in (A, B)}
    return r


def test_warm_build_reuses_every_page_and_lab_with_identical_html(repo):
    warm = repo.build()
    assert Repo.ran(warm) == {A: "reused", B: "reused"}
    assert "labs executed 0, reused 1" in warm.stderr
    for p in (A, B):
        assert _article(repo.html(p)) == repo.cold[p], p


def test_snippet_edit_reruns_only_the_pages_and_labs_that_import_it(repo):
    mark = "SNIPPET-EDIT-MARK"
    repo.edit("snippets/ch1_collective/d03_ring_allreduce.py",
              lambda t: t + f"\n\n_trace_markdown = trace_markdown\n\n\ndef trace_markdown(n):\n"
                            f"    return _trace_markdown(n) + '\\n\\n{mark}'\n")
    proc = repo.build()
    assert Repo.ran(proc) == {A: "executed", B: "reused"}
    assert mark in repo.html(A) and mark not in repo.html(B)
    assert "labs executed 0, reused 1" in proc.stderr  # the lab does not import d03
    # a module imported by the lab (and, through d03, by page A): both run again
    repo.edit("snippets/common/figures.py", lambda t: t + "\n# edited\n")
    proc = repo.build()
    assert Repo.ran(proc)[A] == "executed" and "labs executed 1" in proc.stderr


def test_results_edit_reruns_only_the_pages_that_read_it(repo):
    rel = next((repo.path / "gpu_runs/results/collectives_bench").glob("cpu-gloo-2proc-*.json")).relative_to(repo.path)
    repo.edit(rel, lambda t: json.dumps({**json.loads(t), "created_utc": "2031-01-02T03:04:05Z"}, indent=1))
    proc = repo.build()
    assert Repo.ran(proc) == {A: "executed", B: "reused"}
    assert "2031-01-02T03:04:05Z" in repo.html(A) and "2031-01-02T03:04:05Z" not in repo.html(B)
    # a new results file in a folder page B lists appears on page B (the folder listing is a dependency)
    src = next((repo.path / "gpu_runs/results/zero_bench").glob("cpu-gloo-2proc-*.json"))
    d = json.loads(src.read_text())
    d["hardware"]["cpu_model"] = "Bench CPU Model 9000"
    d["hardware"]["id"] = "cpu-gloo-2proc-bench-cpu-model-9000"
    (src.parent / "cpu-gloo-2proc-bench-cpu-model-9000.json").write_text(json.dumps(d, indent=1))
    proc = repo.build()
    assert Repo.ran(proc)[B] == "executed"
    assert "Bench CPU Model 9000" in repo.html(B)
    (src.parent / "cpu-gloo-2proc-bench-cpu-model-9000.json").unlink()
    assert Repo.ran(repo.build())[B] == "executed"


def test_page_edit_reruns_only_that_page_and_prose_edits_reuse_its_cells(repo):
    repo.edit(f"docs/{B}", lambda t: t + "\n\nPROSE-EDIT-MARK\n")
    proc = repo.build()
    assert Repo.ran(proc) == {A: "reused", B: "reused"} and "PROSE-EDIT-MARK" in repo.html(B)
    repo.edit(f"docs/{B}", lambda t: t + '\n```python exec="on" session="ch5-02" id="ch5-02-bench-cell"\n'
                               'print("CELL-EDIT-" + "MARK")\n```\n')
    proc = repo.build()
    assert Repo.ran(proc) == {A: "reused", B: "executed"} and "CELL-EDIT-MARK" in repo.html(B)


def test_unreadable_entry_is_discarded_named_and_recomputed(repo):
    entry = next(p for p in repo.entries() if "03-ring-allreduce" in p.name)
    entry.write_text('{"format": 1, "key": "tru', encoding="utf-8")
    proc = repo.build()
    assert f"discarded unreadable entry {entry}" in proc.stderr
    assert Repo.ran(proc)[A] == "executed"
    json.loads(entry.read_text(encoding="utf-8"))  # rewritten whole
    # an entry whose outputs were tampered with but whose key still matches is replaced, not half-used
    data = json.loads(entry.read_text(encoding="utf-8"))
    data["outputs"] = "not a list"
    entry.write_text(json.dumps(data), encoding="utf-8")
    proc = repo.build()
    assert f"discarded unreadable entry {entry}" in proc.stderr and Repo.ran(proc)[A] == "executed"


def test_a_failing_cell_fails_every_build_and_is_never_cached(repo):
    original = (repo.path / "docs" / B).read_text(encoding="utf-8")
    repo.edit(f"docs/{B}", lambda t: t + '\n```python exec="on" session="ch5-02" id="ch5-02-boom"\nraise RuntimeError("kaput")\n```\n')
    for _ in range(2):
        proc = repo.build(check=False)
        assert proc.returncode != 0 and "ch5-02-boom" in proc.stderr
    (repo.path / "docs" / B).write_text(original, encoding="utf-8")
    assert Repo.ran(repo.build())[B] == "executed"


def test_a_stale_result_fails_the_strict_build_even_when_cached(repo):
    script = repo.path / "gpu_runs" / "collectives_bench.py"
    original = script.read_text(encoding="utf-8")
    script.write_text(original + "\n# changed after the run\n", encoding="utf-8")
    try:
        proc = repo.build(check=False)
        assert proc.returncode != 0 and "stale result" in proc.stderr
        assert Repo.ran(proc)[A] == "executed"  # its provenance box must now say STALE
        assert Repo.ran(proc)[B] == "reused"
        proc = repo.build(check=False)  # and again: the page that warned was not stored
        assert proc.returncode != 0 and Repo.ran(proc)[A] == "executed"
    finally:
        script.write_text(original, encoding="utf-8")


def test_book_cache_0_executes_everything_and_writes_nothing(repo):
    shutil.rmtree(repo.path / ".cache", ignore_errors=True)
    proc = repo.build(cache="0")
    assert "book cache" not in proc.stderr
    assert not (repo.path / ".cache" / "book").exists()
    assert "LAB-RAN" in (repo.path / "site" / "ch1-collective/lab/index.html").read_text()

"""The 검증 방식 page's inventory and counts, against the repository read another way."""
from __future__ import annotations

import json
import subprocess

from snippets import book, results, verification


def test_inventory_lists_every_results_file_with_its_own_provenance():
    rows = verification.inventory()
    files = sorted((book.ROOT / "gpu_runs" / "results").glob("*/*.json"))
    assert len(rows) == len(files) > 0
    for row, path in zip(rows, files):
        data = json.loads(path.read_text(encoding="utf-8"))
        assert row["program"] == path.parent.name == data["program"]
        assert row["commit"] == data["git"]["commit"][:7] and row["world"] == data["hardware"]["world_size"]
        assert row["current"] == (not results.read(path).stale_reasons())
        # the commit a result names exists in this repository's history
        assert subprocess.run(["git", "cat-file", "-e", data["git"]["commit"] + "^{commit}"], cwd=book.ROOT).returncode == 0
    s = verification.summary(rows)
    assert s["files"] == s["cpu"] + s["gpu"] == len(files)


def test_counts_match_the_tree():
    c = verification.suite_counts()
    assert c["pages"] == len(list(book.DOCS.glob("ch*/0*.md")))
    assert c["cells"] >= 4 * c["pages"]  # every page has at least four experiments, each printed by a cell
    assert c["labs"] == len(list(book.DOCS.glob("ch*/lab.py")))
    assert c["test_modules"] == len(list((book.ROOT / "tests").rglob("test_*.py")))
    # the programs the page says have no results yet are the ones that need NCCL (they refuse gloo)
    for prog in c["without_results"]:
        assert not (book.ROOT / "gpu_runs" / "results" / prog).exists()
        assert "nccl" in (book.ROOT / "gpu_runs" / f"{prog}.py").read_text(encoding="utf-8").lower()

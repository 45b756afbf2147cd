"""The 검증 방식 page (docs/verification.md): what the book's numbers rest on, computed from the repository.

`inventory()` lists every committed results file with its provenance (hardware, world size, torch version,
commit, date, whether its inputs changed since); `summary()` counts them by hardware kind; `suite_counts()` counts
the pages, executed cells, labs and test modules the build and the suite check.
"""
from __future__ import annotations

import re
from collections import Counter

from snippets import book, results


def inventory() -> list[dict]:
    """One row per committed results file, program by program (CPU first within a program)."""
    rows = []
    for path in results.all_paths():
        r = results.read(path)
        h = r.hardware
        rows.append({
            "program": r.data["program"],
            "hardware": r.label.split(" — ", 1)[0] + " — " + (h["gpu_name"] if r.is_gpu else h["cpu_model"]),
            "world": h["world_size"],
            "torch": r.data["versions"]["torch"],
            "commit": r.data["git"]["commit"][:7],
            "date": r.data["created_utc"][:10],
            "current": not r.stale,
            "command": r.data["command"],
        })
    return rows


def summary(rows: list[dict] | None = None) -> dict:
    rows = inventory() if rows is None else rows
    kinds = Counter("GPU" if r["hardware"].startswith("GPU") else "CPU" for r in rows)
    return {"files": len(rows), "programs": len({r["program"] for r in rows}), "cpu": kinds["CPU"],
            "gpu": kinds["GPU"], "stale": sum(not r["current"] for r in rows)}


def inventory_table(rows: list[dict] | None = None) -> str:
    rows = inventory() if rows is None else rows
    return results.markdown_table(
        ["program", "하드웨어", "world", "torch", "commit · 날짜", "입력"],
        [[f"`{r['program']}`", r["hardware"], r["world"], r["torch"], f"`{r['commit']}` · {r['date']}",
          "그대로" if r["current"] else "⚠ 바뀜"] for r in rows])


CELL = re.compile(r'^```python exec="on"', re.M)


def suite_counts() -> dict:
    """Pages, executed cells, labs, snippets modules and test modules of the book as it is now."""
    docs = book.written_docs()
    cells = sum(len(CELL.findall((book.DOCS / d.path).read_text(encoding="utf-8"))) for d in docs)
    tests = sorted((book.ROOT / "tests").rglob("test_*.py"))
    programs = sorted(p.stem for p in (book.ROOT / "gpu_runs").glob("*.py")
                      if p.name not in ("__init__.py", "harness.py", "comm_counter.py"))
    measured = {p.parent.name for p in results.all_paths()}
    return {"pages": len(docs), "cells": cells,
            "labs": sum((book.DOCS / c.lab_path).exists() for c in book.CHAPTERS),
            "programs": len(programs), "without_results": [p for p in programs if p not in measured],
            "test_modules": len(tests)}

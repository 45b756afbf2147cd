"""The build cache's own rules, checked in this process (no site build): which fences count, what
a key covers, entries that were tampered with, cells that start processes, sessions between pages.
The holes these tests close were found by reviewing scripts/book_cache.py as an adversary."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from snippets import book

ROOT = book.ROOT


@pytest.fixture(scope="module")
def bc():
    mod = sys.modules.get("book_cache")
    if mod is None:  # loaded as hooks.py loads it
        spec = importlib.util.spec_from_file_location("book_cache", ROOT / "scripts" / "book_cache.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["book_cache"] = mod
        spec.loader.exec_module(mod)
    return mod


PAGE = '''# t

```python exec="on" session="t" id="t-1"
print(1)
```

{fence}
print("{body}")
```
'''


@pytest.mark.parametrize("fence", ['```python exec="y" session="t" id="t-2"',   # markdown-exec runs any value
                                   '```{.python exec="on" session="t" id="t-2"}',  # attribute-list form
                                   '```python exec=1 session="t" id="t-2"',
                                   '    ```python exec="True" id="t-2"'])            # inside an admonition
def test_every_fence_markdown_exec_runs_is_in_the_page_key(bc, fence):
    key1, n = bc.page_key(PAGE.format(fence=fence, body="a"))
    key2, _ = bc.page_key(PAGE.format(fence=fence, body="b"))
    assert n == 2 and key1 != key2  # editing that cell changes the key: it is never replayed stale


def test_the_key_covers_every_installed_library_not_only_the_named_ones(bc):
    from importlib import metadata

    installed = bc.versions()["installed"]
    assert f"mkdocs-material=={metadata.version('mkdocs-material')}" in installed
    assert f"PyYAML=={metadata.version('PyYAML')}" in installed or any(i.lower().startswith("pyyaml==") for i in installed)


def test_an_entry_tampered_with_is_discarded_not_trusted(bc, tmp_path, caplog):
    path = tmp_path / "pages" / "p.json"
    bc.write_entry(path, {"key": "k", "files": {}, "dirs": {}, "outputs": [["sha", "<p>42</p>"]]})
    assert bc.read_entry(path)["outputs"] == [["sha", "<p>42</p>"]]
    data = json.loads(path.read_text(encoding="utf-8"))
    data["outputs"][0][1] = "<p>43</p>"  # still valid JSON, still a well-formed entry, same key
    path.write_text(json.dumps(data), encoding="utf-8")
    with caplog.at_level("INFO"):
        assert bc.read_entry(path) is None
    assert not path.exists() and f"discarded unreadable entry {path}" in caplog.text


def test_a_page_whose_cell_starts_a_process_is_never_stored(bc, tmp_path):
    sys.addaudithook(bc._audit)  # inert unless a page is being recorded (as in the build)
    run = bc.PageRun(src="x.md", uri="x.md", key="k", path=tmp_path / "pages" / "x.json", n_fences=1)
    run.outputs.append(["sha", "out"])
    (tmp_path / "data.txt").write_text("read by a child process")
    bc.STATE.page = run
    try:
        subprocess.run([sys.executable, "-c", "open('data.txt').read()"], cwd=tmp_path, check=False)
    finally:
        bc.end_page()
    assert run.spawned and not run.path.exists()


def test_every_page_starts_with_no_session_left_by_another(bc):
    import markdown_exec._internal.formatters.python as mp

    mp._sessions_globals["ch9-01"]["defined_on_another_page"] = 1
    bc.fresh_sessions()
    assert "defined_on_another_page" not in mp._sessions_globals["ch9-01"]
    hooks = (ROOT / "scripts" / "hooks.py").read_text(encoding="utf-8")
    body = hooks[hooks.index("def on_page_markdown"):]
    assert body.index("bc.fresh_sessions()") < body.index("bc.begin_page(")  # for every page, cached or not


def test_serve_rebuilds_a_page_whose_included_code_changed(bc, tmp_path):
    rel = "snippets/ch1_collective/d03_ring_allreduce.py"
    dest = tmp_path / "index.html"
    dest.write_text("old")
    md = f'```python\n--8<-- "{rel}:ring"\n```\n'
    past = os.path.getmtime(ROOT / rel) - 60
    os.utime(dest, (past, past))
    assert bc.includes_newer_than(md, dest)
    now = time.time() + 60
    os.utime(dest, (now, now))
    assert not bc.includes_newer_than(md, dest)


def test_a_page_that_finds_no_results_folder_runs_again_when_one_appears(bc, tmp_path):
    """results.load on a missing folder only stats it (Path.glob): no audit event. A page that catches
    the 'no results' error must still depend on the list of results folders."""
    run = bc.PageRun(src="y.md", uri="y.md", key="k", path=tmp_path / "pages" / "y.json", n_fences=1)
    sys.addaudithook(bc._audit)
    bc.forget_repo_modules()
    bc.STATE.page = run
    try:
        from snippets import results

        with pytest.raises(results.ResultsError):
            results.load("no_such_program_yet")
        run.outputs.append(["sha", "GPU 결과 없음"])
    finally:
        bc.end_page()
    entry = bc.read_entry(run.path)
    assert "snippets/results.py" in entry["files"]
    assert entry["dirs"]["gpu_runs/results"] == bc.dir_sha(ROOT / "gpu_runs" / "results")

"""A reader who downloads a lab can run it: a kernelspec, the exact commands, and a guard that says what to do
instead of a bare ImportError when the notebook is opened outside the repository."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jupytext
import pytest
from snippets import book

sys.path.insert(0, str(book.ROOT / "scripts"))
# importing hooks.py drops this repository's modules from sys.modules (for mkdocs serve); keep the ones other
# test modules already hold, as tests/test_hooks.py does, so that their patches and `is` checks see one module
_kept = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("snippets", "gpu_runs")}
import hooks  # noqa: E402

sys.modules.update(_kept)

LABS = [c for c in book.CHAPTERS if (book.DOCS / c.lab_path).exists()]


@pytest.mark.parametrize("ch", LABS, ids=lambda c: c.folder)
def test_every_lab_source_names_its_kernel(ch):
    """`jupytext --execute` (the command the lab page gives) needs the kernelspec: without it jupytext looks
    for a kernel whose argv is this very interpreter and fails ("No kernel found")."""
    nb = jupytext.read(book.DOCS / ch.lab_path)
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_run_commands_name_the_lab_and_the_repository_only_when_known():
    with_url = hooks.lab_run_commands("ch4-pipeline-parallel/lab.py", "https://github.com/o/dist-book.git")
    assert with_url.splitlines()[0] == "git clone https://github.com/o/dist-book.git && cd dist-book"
    without = hooks.lab_run_commands("ch4-pipeline-parallel/lab.py", None)
    assert "http" not in without and "clone" in without.splitlines()[0]
    for text in (with_url, without):
        assert "make setup" in text and "--execute docs/ch4-pipeline-parallel/lab.py" in text
        assert (book.DOCS / "ch4-pipeline-parallel/lab.py").is_file()
    jupytext_cli = subprocess.run([sys.executable, "-m", "jupytext", "--help"], capture_output=True, text=True)
    assert "--execute" in jupytext_cli.stdout  # the flag the commands use exists in the pinned jupytext


def test_guard_explains_in_korean_outside_the_repository_and_finds_it_inside(tmp_path):
    """-S hides the .venv's site-packages (where make setup installs snippets): a Python without the book.
    Outside a checkout the guard raises with what to do; inside one (any sub-folder) it finds the root."""
    out = subprocess.run([sys.executable, "-S", "-c", hooks.LAB_GUARD], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0
    assert "ModuleNotFoundError" in out.stderr and "저장소를 clone" in out.stderr and "make setup" in out.stderr
    (tmp_path / "repo" / "snippets").mkdir(parents=True)
    (tmp_path / "repo" / "snippets" / "book.py").write_text("")
    (tmp_path / "repo" / "docs" / "ch1").mkdir(parents=True)
    probe = hooks.LAB_GUARD + "\nimport snippets, pathlib; print(pathlib.Path(snippets.__path__[0]).resolve())"
    inside = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path / "repo" / "docs" / "ch1",
                            capture_output=True, text=True)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.strip() == str((tmp_path / "repo" / "snippets").resolve())
    venv = subprocess.run([sys.executable, "-c", hooks.LAB_GUARD], cwd=tmp_path, capture_output=True, text=True)
    assert venv.returncode == 0 and venv.stdout == ""  # in make setup's .venv it does nothing, prints nothing


@pytest.mark.build
def test_published_labs_carry_kernelspec_commands_and_guard(built_site):
    site, _, _ = built_site
    assert LABS
    for ch in LABS:
        folder = site / ch.folder / "lab"
        nb = json.loads((folder / "lab.ipynb").read_text(encoding="utf-8"))
        assert nb["metadata"]["kernelspec"]["name"] == "python3"
        first, guard = ("".join(c["source"]) for c in nb["cells"][:2])
        assert nb["cells"][0]["cell_type"] == "markdown" and nb["cells"][1]["cell_type"] == "code"
        assert hooks.lab_run_commands(ch.lab_path, os.environ.get("REPO_URL")) in first
        assert guard == hooks.LAB_GUARD
        source = jupytext.read(book.DOCS / ch.lab_path)
        assert len(nb["cells"]) == len(source.cells) + 2  # the lab itself, whole, after the front matter
        assert any(c.get("outputs") for c in nb["cells"])  # executed at build
        py = jupytext.read(folder / "lab.py")
        assert py.metadata["kernelspec"]["name"] == "python3" and len(py.cells) == len(nb["cells"])
        html = (folder / "index.html").read_text(encoding="utf-8")
        assert "make setup" in html and f"--execute docs/{ch.lab_path}" in html

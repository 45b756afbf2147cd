"""The book's own structure rules (GUIDE.md): template, mirrored names, anchors, citations, nav."""
from __future__ import annotations

import importlib
import re
import sys

import pytest
import yaml

from snippets import book

ROOT = book.ROOT
SECTIONS = ["🎯", "🔍", "📐", "📖", "✏", "🔬", "💻", "🔗", "⚖", "📌", "🤔"]
EXEC = re.compile(r"^\s*```\s*python\b.*\bexec=\"on\"")
BLOCK = re.compile(r"^/// (definition|theorem|lemma|corollary|proof) \|")
ANCHOR = re.compile(r"^\s+attrs: \{id: ([A-Za-z0-9_-]+)\}")
CITE = re.compile(r"(?<!`)\[@([^\]]+)\]")
BANNED = ["예상 출력", "expected output", "todo", "tbd", "lorem ipsum", "placeholder", "준비 중"]

WRITTEN = book.written_docs()


def sections(text: str):
    """Split a page into its ## sections, ignoring fenced code."""
    out, cur, fence = [], None, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            cur = {"title": line[3:].strip(), "lines": []}
            out.append(cur)
        elif cur is not None:
            cur["lines"].append(line)
    return out


def test_some_pages_are_written():
    assert WRITTEN, "no document written yet"
    assert len(book.ALL_DOCS) == 35


@pytest.mark.parametrize("doc", WRITTEN, ids=lambda d: d.path)
def test_page_template(doc):
    text = (book.DOCS / doc.path).read_text(encoding="utf-8")
    secs = sections(text)
    heads = [s["title"] for s in secs]
    assert len(heads) == 11, heads
    for emoji, head in zip(SECTIONS, heads):
        assert head.startswith(emoji), (emoji, head)
    by = dict(zip(SECTIONS, secs))
    # experiments: ### 실험 1..k (k >= 4), each with an executed cell
    exp_lines = by["💻"]["lines"]
    exps, cur = [], None
    for line in exp_lines:
        if re.match(r"### 실험 \d+", line):
            cur = [line]
            exps.append(cur)
        elif cur is not None:
            cur.append(line)
    assert len(exps) >= 4, f"{len(exps)} experiments"
    for e in exps:
        assert any(EXEC.match(l) for l in e), f"{e[0]} has no executed cell"
        assert [int(re.search(r"\d+", e[0]).group())] == [exps.index(e) + 1]
    # proofs end with □ (one per proof block)
    proofs = text.count("/// proof |")
    assert proofs >= 1
    assert len(re.findall(r"\\square", "\n".join(by["🔬"]["lines"]))) >= proofs
    # exercises: 기초 / 심화 / 논문 비평, each with a collapsible solution
    ex = "\n".join(by["🤔"]["lines"])
    for level in ("기초", "심화", "논문 비평"):
        assert level in ex
    assert len(re.findall(r"^\?\?\?\+? ", ex, re.M)) >= 3
    low = text.lower()
    for word in BANNED:
        assert word not in low, word
    assert text.startswith("# "), "page starts with its H1 title"


@pytest.mark.parametrize("doc", WRITTEN, ids=lambda d: d.path)
def test_mirrored_module_and_test(doc):
    """One page, one module, one test (GUIDE): and the page really uses its module."""
    assert (ROOT / doc.module_path).exists(), doc.module_path
    assert (ROOT / doc.test_path).exists(), doc.test_path
    text = (book.DOCS / doc.path).read_text(encoding="utf-8")
    mod = f"snippets.{doc.package}.{doc.module}"
    assert doc.module_path in text or mod in text, f"{doc.path} never uses {mod}"
    importlib.import_module(mod)


def test_no_orphan_modules_or_tests():
    pages = {d.module_path for d in WRITTEN}
    tests = {d.test_path for d in WRITTEN}
    labs = {f"snippets/{c.package}/lab.py" for c in book.CHAPTERS}
    for p in ROOT.glob("snippets/ch*_*/*.py"):
        rel = p.relative_to(ROOT).as_posix()
        if p.name == "__init__.py" or rel in labs:
            continue
        assert rel in pages, f"orphan module {rel}: no page uses it"
    for p in ROOT.glob("tests/ch*_*/test_*.py"):
        rel = p.relative_to(ROOT).as_posix()
        assert rel in tests or p.name == "test_lab.py", f"orphan test {rel}"


def test_shared_modules_are_used():
    used = "\n".join(p.read_text(encoding="utf-8") for p in
                     [*ROOT.glob("snippets/**/*.py"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("gpu_runs/*.py"),
                      *ROOT.glob("docs/**/lab.py")])
    for p in ROOT.glob("snippets/common/*.py"):
        if p.name == "__init__.py":
            continue
        assert f"snippets.common.{p.stem}" in used or f"snippets.common import {p.stem}" in used, p


def _blocks():
    for doc in WRITTEN:
        lines = (book.DOCS / doc.path).read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = BLOCK.match(line)
            if m and m.group(1) != "proof":
                a = ANCHOR.match(lines[i + 1]) if i + 1 < len(lines) else None
                yield doc, m.group(1), line, a.group(1) if a else None


def test_theorem_blocks_have_unique_stable_anchors():
    seen = {}
    prefix = {"definition": "def-", "theorem": "thm-", "lemma": "lem-", "corollary": "cor-"}
    for doc, kind, line, anchor in _blocks():
        assert anchor, f"{doc.path}: '{line}' has no attrs id"
        assert anchor.startswith(prefix[kind]), (doc.path, anchor)
        assert anchor not in seen, f"anchor {anchor} in {doc.path} and {seen[anchor]}"
        seen[anchor] = doc.path
    assert seen


def test_every_citation_resolves():
    refs = yaml.safe_load((ROOT / "scripts/references.yml").read_text(encoding="utf-8"))
    pages = [*book.DOCS.glob("**/*.md")]
    for p in pages:
        for group in CITE.findall(p.read_text(encoding="utf-8")):
            for key in group.split(";"):
                assert key.strip().lstrip("@") in refs, f"{p}: unknown [@{key}]"


def test_references_have_links_and_metadata():
    refs = yaml.safe_load((ROOT / "scripts/references.yml").read_text(encoding="utf-8"))
    seed_papers = ["patarasuk2009", "thakur2005", "rajbhandari2020zero", "shoeybi2019", "huang2019gpipe",
                   "narayanan2019pipedream", "li2021chimera", "narayanan2021megatron", "korthikanti2022",
                   "zhao2023fsdp", "ren2021offload", "rajbhandari2021infinity", "goyal2017", "mccandlish2018",
                   "li2014ps", "lepikhin2021gshard", "fedus2022switch", "chen2016", "niu2011hogwild"]
    for key in seed_papers:
        assert key in refs
    for key, r in refs.items():
        assert r["authors"] and r["year"] and r["title"] and r["venue"], key
        assert r.get("arxiv") or r.get("doi") or r.get("url"), key


def test_labs_are_jupytext_percent_files():
    for ch in book.CHAPTERS:
        lab = book.DOCS / ch.lab_path
        if lab.exists():
            text = lab.read_text(encoding="utf-8")
            assert "# %%" in text and "# %% [markdown]" in text, lab


def _doccheck():
    import importlib.util

    spec = importlib.util.spec_from_file_location("doccheck", ROOT / "scripts" / "doccheck.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["doccheck"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_doccheck_passes_on_every_written_document():
    """The project's own template checker (scripts/doccheck.py) finds nothing short on any document."""
    doccheck = _doccheck()
    found = [doccheck.check(p) for p in doccheck.documents()]
    assert len(found) == len(WRITTEN)
    short = {f.doc: f.problems for f in found if f.problems}
    assert not short, short


def test_doccheck_finds_what_a_short_document_lacks(tmp_path):
    """The checker really checks: a page cut down from the model page is reported, point by point."""
    doccheck = _doccheck()
    text = (book.DOCS / "ch1-collective/03-ring-allreduce.md").read_text(encoding="utf-8")
    cut = text.split("### 실험 4")[0] + "\n## 🤔 생각해볼 문제\n\n기초 TODO\n"
    cut = cut.replace('id="ch1-03-exp1-trace"', "")
    page = tmp_path / "docs" / "ch1-collective" / "03-ring-allreduce.md"
    page.parent.mkdir(parents=True)
    page.write_text(cut, encoding="utf-8")
    problems = "\n".join(doccheck.check(page).problems)
    for expected in ("## sections are", "3 experiments", "executed cell without id=",
                     "exercise levels missing: ['심화', '논문 비평']", "collapsible solutions", "contains 'todo'"):
        assert expected in problems, (expected, problems)


def test_every_executed_cell_has_a_unique_id_and_a_page_session():
    """GUIDE: every cell has an id= (a failure names it); no state shared between pages."""
    seen = {}
    for doc in WRITTEN:
        for line in (book.DOCS / doc.path).read_text(encoding="utf-8").splitlines():
            if EXEC.match(line):
                cid = re.search(r'\bid="([^"]+)"', line)
                assert cid, f"{doc.path}: cell without id: {line.strip()}"
                assert cid.group(1) not in seen, f"cell id {cid.group(1)} in {doc.path} and {seen[cid.group(1)]}"
                seen[cid.group(1)] = doc.path
                sess = re.search(r'\bsession="([^"]+)"', line)
                prefix = f"ch{doc.chapter[2]}-{doc.number:02d}"
                assert sess and sess.group(1).startswith(prefix), f"{doc.path}: session should be {prefix}: {line}"


def test_every_test_file_is_collected():
    """pytest skips some folder names silently (its default norecursedirs has `dist`, `build`, `.*`,
    …): a test file it never collects is a test that can never fail. Ask pytest itself."""
    import subprocess, sys

    from tests import conftest

    if conftest.WHOLE_SUITE[0]:  # this session collected the whole suite: use what it collected
        collected = set(conftest.COLLECTED_FILES)
    else:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        collected = {line.split("::", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    assert on_disk, "no test files found"
    missing = sorted(on_disk - collected)
    assert not missing, f"test files pytest never collects (folder name in norecursedirs? no tests?): {missing}"


# issue 8: fsdp_bench still imports the Ch5-05 page module; the ch5 fix moves what both need to
# snippets/common/. Remove the entry once that has merged (the test then guards every program).
PAGE_MODULE_IMPORTS_PENDING: set[str] = set()


def test_programs_import_shared_modules_not_page_modules():
    """GUIDE: gpu_runs programs import from snippets/common/ only (a page's module is the page's)."""
    page_import = re.compile(r"^\s*(?:from|import) snippets\.(ch\d+_\w+)", re.M)
    for p in sorted((ROOT / "gpu_runs").glob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        found = page_import.findall(p.read_text(encoding="utf-8"))
        if rel in PAGE_MODULE_IMPORTS_PENDING:
            continue
        assert not found, f"{rel} imports a page module ({found}); move what it needs to snippets/common/"


DEPRECATED_COLLECTIVES = {"all_gather_into_tensor": "all_gather_single", "reduce_scatter_tensor": "reduce_scatter_single"}
# the one program that calls them on purpose: it records the warning torch 2.13 gives for each
DEPRECATED_DEMO = {"gpu_runs/collectives_semantics.py"}


def test_book_code_calls_no_collective_torch_deprecates():
    """torch 2.13 deprecates all_gather_into_tensor / reduce_scatter_tensor (FutureWarning). The book's own
    code calls the current names; only library code (DeepSpeed, FSDP internals) still calls the old ones.
    The deprecation itself is read from the installed torch, so this test follows torch."""
    import ast
    import inspect
    import warnings

    import torch
    import torch.distributed as dist

    for old, new in DEPRECATED_COLLECTIVES.items():
        assert hasattr(dist, new), f"torch {torch.__version__} has no {new}"
        assert "deprecated" in (inspect.getsource(getattr(dist, old)) + str(getattr(dist, old).__doc__)).lower()
    files = [*sorted((ROOT / "snippets").rglob("*.py")), *sorted((ROOT / "gpu_runs").glob("*.py")),
             *sorted((ROOT / "docs").glob("ch*/lab.py"))]
    bad = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if rel in DEPRECATED_DEMO:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DEPRECATED_COLLECTIVES:
                bad.append(f"{rel}:{node.lineno} {node.func.attr} (use {DEPRECATED_COLLECTIVES[node.func.attr]})")
    assert not bad, bad

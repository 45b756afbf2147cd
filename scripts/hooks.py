"""MkDocs hooks for the book. Every failure names the file and the reason.

- on_config: put the repository root on sys.path; generate the nav from snippets/book.py
  (written documents and chapter labs only: no placeholder pages).
- on_pre_build: validate every results file (schema, provenance); stale ones warn (strict fails).
- on_files: serve KaTeX (CSS, fonts; JS only in browser mode) from node_modules, no CDN.
- on_page_markdown: citations [@key] -> references page; generated blocks
  <!-- book:chapter-map -->, <!-- book:theorem-index -->, <!-- book:references -->.
- on_post_page: render math with KaTeX at build time (MATH_RENDER=build, the default), so a
  KaTeX error fails the build with the page and the formula.
"""
from __future__ import annotations

import html
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _load_script(name: str, fresh: bool = False):
    """scripts/<name>.py, loaded by its path (scripts/ is not a package), with the sha256 of the source it
    ran as `__book_sha__`. Loaded once per process; with fresh=True, loaded again when the file has
    changed since (mkdocs loads this file once per process, serve included). book_cache must stay one
    module per process: it wraps markdown-exec and holds the audit hook."""
    import hashlib
    import importlib.util

    path = ROOT / "scripts" / f"{name}.py"
    mod = sys.modules.get(name)
    source = path.read_bytes() if fresh or mod is None else None
    if (mod is None or Path(mod.__file__).resolve() != path
            or (fresh and getattr(mod, "__book_sha__", None) != hashlib.sha256(source).hexdigest())):
        source = source if source is not None else path.read_bytes()
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        exec(compile(source, str(path), "exec"), mod.__dict__)
        mod.__book_sha__ = hashlib.sha256(source).hexdigest()
    return mod


bc = _load_script("book_cache")
# forget this repository's modules, so that the nav, the results checks and the cells use the code as it
# is on disk (book_cache forgets them again before every page's cells: mkdocs loads this file once per
# process, and `mkdocs serve` rebuilds in the same process)
bc.forget_repo_modules()
_CACHE: dict = {"root": None}  # the cache folder of this build, None when BOOK_CACHE=0

import yaml  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

from snippets import book  # noqa: E402

log = logging.getLogger("mkdocs.plugins.book")

KATEX = ROOT / "node_modules" / "katex" / "dist"
MATH_RENDER = os.environ.get("MATH_RENDER", "build")  # "build" or "browser"
REFERENCES_YML = ROOT / "scripts" / "references.yml"
CITE = re.compile(r"(?<!`)\[@([A-Za-z0-9_:-]+(?:\s*;\s*@[A-Za-z0-9_:-]+)*)\]")
BLOCK = re.compile(
    r"^/// (definition|theorem|lemma|corollary) \| (.+?)\n\s+attrs: \{id: ([A-Za-z0-9_-]+)\}",
    re.M)
KIND_KO = {"definition": "정의", "theorem": "정리", "lemma": "보조정리", "corollary": "따름정리"}

# Author loop: BOOK_ONLY="ch2-data-parallel/*,ch1-collective/03-*" builds only those pages (and labs
# matching the globs) plus the generated pages; links to pages left out are reported at INFO level
# instead of failing the strict build. Never set in CI or `make build`.
BOOK_ONLY = [g.strip() for g in os.environ.get("BOOK_ONLY", "").split(",") if g.strip()]
_ALWAYS = {"index.md", "notation.md", "glossary.md", "theorems.md", "exercises.md", "verification.md", "thresholds.md", "cheatsheet.md", "references.md", "course-map.md"}


# BOOK_ONLY_BARE=1 (with BOOK_ONLY): the landing page and the matching pages only, no generated page
# (tests/site/test_cache.py builds a few pages about 17 times; the generated pages took ~6 s of each build).
BOOK_ONLY_BARE = bool(BOOK_ONLY) and os.environ.get("BOOK_ONLY_BARE", "") not in ("", "0")


def _selected(rel: str) -> bool:
    from fnmatch import fnmatch

    if BOOK_ONLY_BARE:
        return rel == "index.md" or any(fnmatch(rel, g) for g in BOOK_ONLY)
    return not BOOK_ONLY or rel in _ALWAYS or not rel.startswith("ch") or any(fnmatch(rel, g) for g in BOOK_ONLY)


# ------------------------------------------------------------------ config / nav

def _quiet_build_log() -> None:
    """A clean build prints nothing but mkdocs' own lines. Figures keep their text as SVG text
    (svg.fonttype none) that the reader's browser draws with its own Korean fonts, so matplotlib's
    complaints about a font family or glyph missing on the build machine are not the reader's concern."""
    import warnings

    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
    # mkdocs-jupyter announces every lab it converts (the lab page itself says it was executed)
    _drop_log_lines("mkdocs.mkdocs-jupyter", "Converting notebook")
    _drop_log_lines("mkdocs.plugins.mkdocs_jupyter", "Cache hit")  # its cache, on with the book cache
    # make serve runs `mkdocs serve --dirty` on purpose: its warning would fail every strict rebuild
    _drop_log_lines("mkdocs.commands.build", "A 'dirty' build is being performed")


def _drop_log_lines(logger: str, starts: str) -> None:
    lg = logging.getLogger(logger)
    if not any(getattr(f, "_book_drop", None) == starts for f in lg.filters):
        flt = logging.Filter()
        flt.filter = lambda record: not record.getMessage().startswith(starts)
        flt._book_drop = starts
        lg.addFilter(flt)


def _cells_out_of_search(config) -> None:
    """Wrap every executed cell (its code and what it printed) in a <div data-search-exclude>: the
    search index, which a reader downloads on the first visit, keeps the prose, not tables of numbers,
    figures and code. markdown-exec registered its fences in its own on_config, which runs before this."""
    from markupsafe import Markup

    fences = config["mdx_configs"].get("pymdownx.superfences", {}).get("custom_fences", [])
    for fence in fences:
        fmt = fence.get("format")
        if fence.get("name") == "python" and fmt is not None and not getattr(fmt, "_book_wrapped", False):
            def wrapped(*args, _fmt=fmt, **kw):
                html_ = _fmt(*args, **kw)
                options = args[3] if len(args) > 3 else kw.get("options", {})  # markdown-exec's: id= is there
                if html_ and options.get("id"):
                    html_ = _figure_ids(str(html_), options["id"])
                return (Markup(f'<!--book-cell--><div class="exec-cell" data-search-exclude>{html_}</div><!--/book-cell-->')
                        if html_ else html_)

            wrapped._book_wrapped = True
            fence["format"] = wrapped


CELL_SPAN = re.compile(r"<!--book-cell-->.*?<!--/book-cell-->", re.S)
FIGURE = '<figure class="book-figure">'


def _figure_ids(html_: str, cell_id: str) -> str:
    """Every figure a cell draws gets a stable anchor named after the cell (GUIDE: cells carry ids):
    fig-<cell id> for the first, fig-<cell id>-2 … for the next (one per hardware tab, say), so that a course
    can link a figure and scripts/published_anchors.json keeps it."""
    parts = html_.split(FIGURE)
    out = [parts[0]]
    for n, rest in enumerate(parts[1:], start=1):
        out.append(f'<figure class="book-figure" id="fig-{cell_id}{"" if n == 1 else f"-{n}"}">' + rest)
    return "".join(out)


EXERCISE = re.compile(r"^\*\*문제 (\d+) \(([^)]*)\)\.\*\*", re.M)


def exercise_anchor(doc_path: str, n: int | str) -> str:
    """ex-ch4-01-2: problem 2 of Ch4-01 (chapter number, document number, problem number)."""
    folder, name = doc_path.split("/")[-2:]
    return f"ex-{folder.split('-')[0]}-{name[:2]}-{n}"


def _exercise_anchors(markdown: str, doc_path: str) -> str:
    """Each exercise (a paragraph that opens with **문제 N (…).**) gets a stable anchor a course can link."""
    return EXERCISE.sub(lambda m: f'<a class="book-anchor" id="{exercise_anchor(doc_path, m.group(1))}"></a>{m.group(0)}',
                        markdown)


_SEARCH: dict = {}  # the search plugin's page_context method, and the pages it has indexed this build


def _search_skips_cells(config) -> None:
    """The search plugin parses every page's HTML and then drops what is marked data-search-exclude;
    the executed cells (inline SVG figures, tables of numbers) are most of that markup. Hand it each
    page without them: the same index, about a second less of every build.

    It also indexes each page as soon as the page's content is final (on_page_content, below) instead of
    in mkdocs' second pass (page_context): the first pass runs while the labs execute, and the main
    thread waits for them at the end of it anyway, whereas the second pass comes after the last lab."""
    from material.plugins.search.plugin import SearchPlugin

    events = config.plugins.events["page_context"]  # mkdocs calls the methods it registered at load
    for i, method in enumerate(events):
        if not isinstance(getattr(method, "__self__", None), SearchPlugin):
            continue

        def on_page_context(context, *args, page=None, _original=method, **kw):
            if page.file.src_uri in _SEARCH["done"]:
                return context
            full = page.content
            page.content = CELL_SPAN.sub("", full) if full else full
            try:
                return _original(context, *args, page=page, **kw)
            finally:
                page.content = full

        events[i] = on_page_context
        _SEARCH.update(index=on_page_context, done=set())


NB_CODE_CELL = re.compile(r'<div class="jp-Cell jp-CodeCell')
DIV_TAG = re.compile(r"<div\b|</div>")


def _without_code_cells(html_: str) -> str:
    """A lab page's HTML without its code cells (code, what it printed, its figures): the search index
    keeps the notebook's prose, as it does the pages'. (Marking the cells data-search-exclude does not
    work: the search plugin ends an excluded <div> at the first </div> inside it.)"""
    out, pos = [], 0
    while (m := NB_CODE_CELL.search(html_, pos)) is not None:
        depth, end = 0, None
        for t in DIV_TAG.finditer(html_, m.start()):
            depth += 1 if t.group(0) == "<div" else -1
            if depth == 0:
                end = t.end()
                break
        if end is None:  # unbalanced: index the rest as it is
            break
        out.append(html_[pos:m.start()])
        pos = end
    out.append(html_[pos:])
    return "".join(out)


def _notebook_search_html(html_: str) -> str:
    """What the search plugin reads of a lab page: no code cells, and no <div> wrappers. The plugin
    closes a section where the element around its heading ends, and each notebook cell is such an
    element: the prose of a section's later cells went to the top of the page in the index."""
    return DIV_TAG_ANY.sub("", _without_code_cells(html_))


DIV_TAG_ANY = re.compile(r"</?div\b[^>]*>")


def _index_for_search(html_: str, page, config) -> None:
    """Index a page with its final content (the search plugin reads page.content, toc, url and meta)."""
    index = _SEARCH.get("index")
    if index is None or page.file.src_uri in _SEARCH["done"]:
        return
    before = page.content
    page.content = _notebook_search_html(html_) if page.file.src_uri.endswith("lab.py") else html_
    try:
        index({}, page=page, config=config, nav=None)
    finally:
        page.content = before
    _SEARCH["done"].add(page.file.src_uri)


def _notebook_html_cache(config) -> None:
    """mkdocs-jupyter converts each lab's executed notebook to HTML (about 0.5 s a lab, every build). Its
    own cache is keyed by the notebook's bytes, outputs included, so it cannot show a stale lab: use it
    with the book cache, in a folder named by the versions of the converters, and not at all with
    BOOK_CACHE=0."""
    from importlib.metadata import version

    for plugin in config.plugins.values():
        if type(plugin).__module__.startswith("mkdocs_jupyter"):
            plugin.config["cache"] = _CACHE["root"] is not None
            if _CACHE["root"] is not None:
                tag = "-".join(version(p) for p in ("mkdocs-jupyter", "nbconvert", "pygments"))
                plugin.config["cache_dir"] = str(_CACHE["root"] / f"mkdocs-jupyter-{tag}")


def on_config(config, **kwargs):
    _quiet_build_log()
    _cells_out_of_search(config)
    _search_skips_cells(config)
    _CACHE["root"] = bc.cache_dir(config.config_file_path) if bc.enabled() else None
    if _CACHE["root"] is not None:
        bc.install()
    _notebook_html_cache(config)
    bc.reset_counts()
    docs = Path(config["docs_dir"])
    here = lambda rel: (docs / rel).exists() and _selected(rel)  # noqa: E731
    if BOOK_ONLY:
        import logging as _logging

        for key in ("not_found", "anchors", "unrecognized_links", "absolute_links"):
            config["validation"]["links"][key] = _logging.INFO
        config["validation"]["nav"]["omitted_files"] = _logging.INFO
        log.info("BOOK_ONLY=%s: partial build for authors (links to omitted pages not checked)",
                    ",".join(BOOK_ONLY))
    nav = [{"홈": "index.md"}] + [{t: f} for t, f in (("표기법", "notation.md"), ("용어집", "glossary.md")) if here(f)]
    for ch in book.CHAPTERS:
        items = [d.path for d in ch.docs if here(d.path)]
        if here(ch.lab_path):
            items.append({f"Ch{ch.number} 실습 노트북": ch.lab_path})
        if items:
            nav.append({f"Ch{ch.number} {ch.title.split(' ')[0]}": items})
    nav += [{t: f} for t, f in (("정리 색인", "theorems.md"), ("문제 색인", "exercises.md"), ("계산기", "calculators.md"), ("수업 지도", "course-map.md"),
                                 ("요약 카드", "cheatsheet.md"), ("숨는 조건 τ*", "thresholds.md"), ("검증 방식", "verification.md"),
                                 ("참고문헌", "references.md")) if here(f)]
    config["nav"] = nav
    if MATH_RENDER not in ("build", "browser"):
        raise PluginError(f"MATH_RENDER must be 'build' or 'browser', not {MATH_RENDER!r}")
    if not (KATEX / "katex.min.css").exists():
        raise PluginError(f"{KATEX}: KaTeX is missing; run `npm ci` (make venv does)")
    if MATH_RENDER == "browser":
        config["extra_javascript"] = [*config["extra_javascript"], "assets/katex/katex.min.js",
                                      "assets/katex/contrib/auto-render.min.js", "assets/katex-init.js"]
    config["extra_css"] = ["assets/katex/katex.min.css", *config["extra_css"]]
    return config


# ------------------------------------------------------------------ chapter labs, executed in parallel

_LABS: dict[str, dict] = {}
_BUILD_T0: list[float] = [0.0]


LAB_JOBS = max(1, int(os.environ.get("BOOK_LAB_JOBS", "2")))
_LAB_SLOTS = threading.BoundedSemaphore(LAB_JOBS)


def _execute_lab(src: Path, out: Path, box: dict) -> None:
    """Execute a jupytext lab with nbclient (errors not allowed) and write the executed .ipynb.

    At most LAB_JOBS notebooks run at once, beside the main thread that renders the pages: on 2 cores,
    two labs and the pages keep both cores busy (the labs wait on their worker processes part of the
    time), where all seven at once would thrash. The labs do not run at a lower priority. A kernel is
    started in a new session (jupyter_client launches it so), and where Linux groups processes by session
    (autogroup scheduling, for processes in the root cgroup, as on the book's build machine) a session
    competes with the build as a whole whatever its nice value; where nice does work, it would only slow the labs, which finish after the
    pages and so decide the build's time."""
    name = src.relative_to(ROOT).as_posix() if src.is_relative_to(ROOT) else str(src)
    if box.get("hit"):
        return
    with _LAB_SLOTS:
        box["t"] = [time.perf_counter()]
        _run_lab(src, out, box, name)
        box["t"].append(time.perf_counter())


def _run_lab(src: Path, out: Path, box: dict, name: str) -> None:
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    try:
        from traitlets.config import Config

        nb = jupytext.read(src)
        # IPC sockets in a private temporary folder instead of TCP on localhost: nothing listens on a
        # port, and ipykernel prints no "running over TCP without encryption" warning in the build log
        cfg = Config()
        cfg.KernelManager.transport = "ipc"
        cfg.KernelManager.ip = str(out.parent / f"{out.stem}.kernel")
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False, config=cfg,
                       resources={"metadata": {"path": str(src.parent)}}).execute()
        nbformat.write(nb, out)
        if box.get("entry"):
            bc.lab_store(box["entry"], box["key"], src, out)
    except CellExecutionError as exc:
        box["error"] = f"{name}: a cell failed: {str(exc)[-1500:]}"
    except Exception as exc:  # noqa: BLE001 - reported as a build error with the lab's path
        box["error"] = f"{name}: {type(exc).__name__}: {exc}"


def _start_labs(config) -> None:
    """Start every chapter lab's kernel now, in threads: the notebooks run on the second core while
    the main thread renders the Markdown pages. The lab page then renders the executed copy. The threads
    queue for LAB_JOBS slots in reverse chapter order: the later chapters' labs start the most processes
    (Ch7 runs torchrun with 4 workers), and a long lab started last would be the build's tail."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="book-labs-"))
    for lab in sorted(Path(config["docs_dir"]).glob("ch*/lab.py"), reverse=True):
        rel = lab.relative_to(config["docs_dir"]).as_posix()
        if not _selected(rel):
            continue
        box = {"out": tmp / rel.replace("/", "__").replace(".py", ".ipynb")}
        if _CACHE["root"] is not None:  # an executed notebook under an unchanged key is reused as it is
            box["key"], box["entry"], box["hit"] = bc.lab_lookup(_CACHE["root"], lab, box["out"])
        box["thread"] = threading.Thread(target=_execute_lab, args=(lab, box["out"], box), daemon=True)
        box["thread"].start()
        _LABS[rel] = box


def _executed_lab(page) -> None:
    box = _LABS.get(page.file.src_uri)
    if box is None:
        raise PluginError(f"{page.file.src_uri}: lab was not started")
    box["thread"].join()
    if "error" not in box and not box["out"].exists():
        box["error"] = f"{page.file.src_uri}: the executor wrote no notebook"
    if "error" in box:
        raise PluginError(f"lab execution failed: {box['error']}")
    page.file.abs_src_path = str(box["out"])  # mkdocs-jupyter (execute: false) renders the executed copy


LAB_KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}

# The guard a reader meets first: outside the repository (or in a Python without the book's .venv) the labs'
# `import snippets` would fail with a bare ModuleNotFoundError. It is added to the executed notebook after the
# run (it prints nothing where snippets is importable), so the book cache's executed copies stay valid.
LAB_GUARD = '''# 이 노트북은 책의 저장소에 있는 `snippets` 패키지를 씁니다 (위 칸의 명령으로 준비).
import importlib.util
import pathlib
import sys

if importlib.util.find_spec("snippets") is None:  # make setup 의 .venv 가 아니면: 저장소 루트를 찾아 import 경로에 넣습니다
    _root = next((d for d in [pathlib.Path.cwd(), *pathlib.Path.cwd().resolve().parents]
                  if (d / "snippets" / "book.py").is_file()), None)
    if _root is None:
        raise ModuleNotFoundError("이 노트북은 책의 저장소 안에서 실행합니다: 저장소를 clone 하고 그 폴더에서 `make setup` 을 한 뒤, "
                                  "`.venv` 의 Python 을 kernel 로 골라 여세요 (바로 위 칸의 명령).")
    sys.path.insert(0, str(_root))'''


def lab_run_commands(rel: str, repo_url: str | None) -> str:
    """The exact shell commands that run the lab docs/<rel> on a reader's machine (repo_url: REPO_URL)."""
    chapter = rel.split("/")[0]
    if repo_url:
        folder = repo_url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "book"
        clone = f"git clone {repo_url} && cd {folder}"
    else:
        clone = "# 이 책의 저장소를 clone 한 뒤 그 폴더로 갑니다"
    return (f"{clone}\n"
            "make setup    # .venv: CPU torch, deepspeed, jupytext, ipykernel (GPU 는 필요 없습니다)\n"
            f".venv/bin/jupytext --to ipynb --execute docs/{rel} -o {chapter}-lab.ipynb    # 전부 실행, 결과가 든 노트북\n"
            ".venv/bin/python -m ipykernel install --user --name dist-deep-dive    # 셀 하나씩: 이 kernel 로 여세요")


def lab_front(executed: Path, rel: str, repo_url: str | None):
    """The notebook a reader downloads: the executed lab with a kernelspec, a first cell saying how to run it
    locally (exact commands, the repository's address when REPO_URL is set) and the import guard (LAB_GUARD).
    The page itself renders the executed lab without them: its download box gives the same commands."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    nb.metadata["kernelspec"] = dict(LAB_KERNELSPEC)
    nb.metadata.setdefault("language_info", {"name": "python"})
    how = ("**이 노트북을 내 컴퓨터에서 실행하기.** 이 실습은 책의 저장소에 있는 `snippets` 패키지를 import 하므로, 저장소 안에서 "
           "`make setup` 이 만든 `.venv` 로 실행합니다. CPU 만 있으면 됩니다.\n\n```bash\n"
           + lab_run_commands(rel, repo_url) + "\n```\n\n"
           "두 번째 방법은 Jupyter 에서 kernel `dist-deep-dive` 를 고른 뒤 이 `.ipynb` 나 jupytext 원본 "
           f"`docs/{rel}` 를 여는 것입니다.")
    nb.cells[:0] = [nbformat.v4.new_markdown_cell(how), nbformat.v4.new_code_cell(LAB_GUARD)]
    for cell in nb.cells[:2]:
        cell.pop("id", None)
    nbformat.validator.normalize(nb)
    return nb


def on_pre_build(config, **kwargs):
    from snippets.results import ResultsError, validate_all

    _BUILD_T0[:] = [time.perf_counter()]
    for timing in (_PAGE_T0, _PAGE_SECONDS, _PAGE_CPU0, _PAGE_CPU):
        timing.clear()
    _SEARCH.get("done", set()).clear()
    _KATEX_DONE.clear()
    _LABS.clear()
    _keep_previous_index(config)
    _start_labs(config)

    try:
        validate_all()
    except ResultsError as exc:
        raise PluginError(f"malformed results file: {exc}") from exc
    _references()  # fail early on a malformed references.yml


def on_startup(command, dirty, **kwargs):
    bc.STATE.dirty = dirty


def _mark_dirty_pages(files, config) -> None:
    """`mkdocs serve --dirty` (make serve) rebuilds only pages whose file is newer than its HTML. A page
    also counts as changed when its cells would run again (a snippet, results file or version changed),
    a lab when its notebook was executed again; the generated pages always are (they read every page)."""
    generated = {"index.md", "theorems.md", "references.md", "notation.md", "glossary.md", "exercises.md", "cheatsheet.md",
                 "course-map.md"}
    for f in files.documentation_pages():
        changed = f.src_uri in generated
        if not changed and f.src_uri.endswith("lab.py"):
            box = _LABS.get(f.src_uri)
            changed = box is not None and not box.get("hit")
        elif not changed and f.src_uri.endswith(".md"):
            text = Path(f.abs_src_path).read_text(encoding="utf-8")
            changed = (bc.cells_would_run(_CACHE["root"], f.abs_src_path, text)
                       or bc.includes_newer_than(text, f.abs_dest_path))  # code shown with --8<--
        if changed:
            f.is_modified = lambda: True


def on_files(files, config, **kwargs):
    if bc.STATE.dirty:
        _mark_dirty_pages(files, config)
    wanted = ["katex.min.css", *(f"fonts/{p.name}" for p in sorted((KATEX / "fonts").glob("*.woff2")))]
    if MATH_RENDER == "browser":
        wanted += ["katex.min.js", "contrib/auto-render.min.js"]
    for rel in wanted:
        files.append(File.generated(config, f"assets/katex/{rel}", abs_src_path=str(KATEX / rel)))
    if BOOK_ONLY:
        for f in [f for f in files if (f.src_uri.startswith("ch") or BOOK_ONLY_BARE) and not _selected(f.src_uri)
                  and (f.src_uri.endswith(".md") or f.src_uri.endswith("lab.py"))]:
            files.remove(f)
    # Pages are rendered in the order of `files`: the lab pages go last, so that the main thread renders
    # every other page while the notebooks run, and waits for a lab only when nothing else is left. They
    # go in the order the labs start (_start_labs), which is about the order they finish: the main thread
    # renders the finished labs' pages while the last labs still run.
    labs = [f for f in files.documentation_pages() if f.src_uri.endswith("lab.py")]
    for f in sorted(labs, key=lambda f: f.src_uri, reverse=True):
        files.remove(f)
        files.append(f)
    return files


# ------------------------------------------------------------------ references / citations

_REFS: dict | None = None


def _references() -> dict:
    global _REFS
    if _REFS is None:
        data = yaml.safe_load(REFERENCES_YML.read_text(encoding="utf-8"))
        for key, ref in data.items():
            for field in ("authors", "year", "title", "venue"):
                if not ref.get(field):
                    raise PluginError(f"{REFERENCES_YML.relative_to(ROOT)}: entry '{key}' lacks '{field}'")
            if not (ref.get("arxiv") or ref.get("doi") or ref.get("url")):
                raise PluginError(f"{REFERENCES_YML.relative_to(ROOT)}: entry '{key}' needs arxiv, doi or url")
        _REFS = data
    return _REFS


def _base_label(ref: dict) -> str:
    authors = ref["authors"]
    if "short" in ref:  # a group author ("Llama Team", "PyTorch contributors") names itself
        return f"{ref['short']} {ref['year']}"
    if authors[-1].strip() == "et al.":  # [First Author, et al.]: three or more authors
        who = f"{authors[0].split()[-1]} et al."
    elif len(authors) == 1:
        who = authors[0].split()[-1]
    elif len(authors) == 2:
        who = f"{authors[0].split()[-1]} & {authors[1].split()[-1]}"
    else:
        who = f"{authors[0].split()[-1]} et al."
    return f"{who} {ref['year']}"


_LABELS: dict | None = None


def _labels() -> dict[str, str]:
    """Every key's citation label; keys whose labels would coincide (three Qi et al. 2024 papers) get
    2024a, 2024b, ... in the order of scripts/references.yml, so a reader can tell them apart."""
    global _LABELS
    if _LABELS is None:
        refs, groups = _references(), {}
        for key, ref in refs.items():
            groups.setdefault(_base_label(ref), []).append(key)
        _LABELS = {}
        for base, keys in groups.items():
            for i, key in enumerate(keys):
                _LABELS[key] = base if len(keys) == 1 else f"{base}{chr(ord('a') + i)}"
    return _LABELS


def _short(ref_or_key) -> str:
    if isinstance(ref_or_key, str):
        return _labels()[ref_or_key]
    return _base_label(ref_or_key)


def _rel_md(page, target: str) -> str:
    """Relative link from the page's source file to another source file (mkdocs resolves it)."""
    import posixpath

    return posixpath.relpath(target, posixpath.dirname(page.file.src_uri) or ".")


def _cite(markdown: str, page) -> str:
    refs = _references()

    def sub(m):
        keys = [k.strip().lstrip("@") for k in m.group(1).split(";")]
        parts = []
        for k in keys:
            if k not in refs:
                raise PluginError(f"{page.file.src_uri}: unknown citation key '@{k}' "
                                  f"(add it to scripts/references.yml)")
            parts.append(f"[{_short(k)}]({_rel_md(page, 'references.md')}#{k})")
        return "[" + "; ".join(parts) + "]"

    return CITE.sub(sub, markdown)


def _references_block() -> str:
    out = []
    for key, r in sorted(_references().items(), key=lambda kv: (kv[1]["authors"][0].split()[-1], kv[1]["year"], _short(kv[0]))):
        link = (f"[arXiv:{r['arxiv']}](https://arxiv.org/abs/{r['arxiv']})" if r.get("arxiv")
                else f"[doi:{r['doi']}](https://doi.org/{r['doi']})" if r.get("doi")
                else f"[{r['url']}]({r['url']})")
        out.append(f'- <span id="{key}"></span>**[{_short(key)}]** `{key}` — {", ".join(r["authors"])}. '
                   f'*{r["title"]}*. {r["venue"]}, {r["year"]}. {link}')
    return "\n".join(out)


# ------------------------------------------------------------------ generated blocks

def _theorem_index() -> str:
    out = []
    for ch in book.CHAPTERS:
        rows = []
        for d in ch.docs:
            if not d.written:
                continue
            text = (book.DOCS / d.path).read_text(encoding="utf-8")
            for kind, title, anchor in BLOCK.findall(text):
                rows.append(f"| {KIND_KO[kind]} | [{title.strip()}]({d.path}#{anchor}) | "
                            f"[{d.number:02d}. {d.title}]({d.path}) | `#{anchor}` |")
        if rows:
            out.append(f"## Chapter {ch.number}: {ch.title}\n")
            out.append("| 종류 | 이름 | 문서 | anchor |\n|---|---|---|---|")
            out += rows
            out.append("")
    return "\n".join(out) or "아직 정리가 있는 문서가 없습니다."


def _chapter_map() -> str:
    """Every chapter and its documents: a link, one line (book.SUMMARIES) and the reading time (book.reading_minutes)."""
    out = []
    for ch in book.CHAPTERS:
        minutes = sum(book.reading_minutes(d) for d in ch.docs if d.written)
        out.append(f"### Chapter {ch.number}: {ch.title}\n")
        out.append(f"문서 {len(ch.docs)} 개, 읽는 데 약 {minutes // 60} 시간 {minutes % 60} 분.\n")
        for d in ch.docs:
            label = f"{d.number:02d}. {d.title}"
            # "01\\." : a bullet's text "01. Title" would otherwise start a nested ordered list
            if d.written:
                out.append(f"- [{label}]({d.path}) — {book.SUMMARIES[book.key(d)]} *약 {book.reading_minutes(d)} 분*")
            else:
                out.append(f"- {d.number:02d}\\. {d.title}")
        if (book.DOCS / ch.lab_path).exists():
            out.append(f"- [Chapter {ch.number} 실습 노트북]({ch.lab_path}) — 노트북 PC 의 CPU 에서 1 분 안팎")
        out.append("")
    return "\n".join(out)


def _tour() -> str:
    """The introductory tour (book.TOUR): per day its pages, their reading time and what each builds on."""
    rows = ["| 일 | 문서 | 먼저 읽은 문서 | 시간 |", "|---|---|---|---|"]
    for day, keys in enumerate(book.TOUR, start=1):
        docs = [book.by_key(k) for k in keys]
        pages = ", ".join(f"[{book.key(d)} {d.title}]({d.path})" for d in docs)
        pre = ", ".join(dict.fromkeys(book.key(p) for d in docs for p in book.prerequisites(d) if book.key(p) not in keys))
        rows.append(f"| {day} | {pages} | {pre or '—'} | {sum(book.reading_minutes(d) for d in docs)} 분 |")
    return "\n".join("    " + r for r in rows) + "\n"  # indented: it sits in a content tab of the landing page


def _glossary() -> str:
    """The glossary table from snippets/glossary.py: each term with its Korean forms, gloss and the two
    written pages that use it most (counted in their Markdown), each row with an anchor pages can link."""
    from snippets import glossary

    texts = {d.path: (book.DOCS / d.path).read_text(encoding="utf-8") for d in book.written_docs()}
    titles = {d.path: f"Ch{d.chapter[2]}-{d.number:02d}" for d in book.written_docs()}
    rows = ["| English | 한국어 | 뜻 | 많이 쓰는 문서 |", "|---|---|---|---|"]
    for term in sorted(glossary.TERMS, key=lambda t: t.en.lower()):
        counts = sorted(((glossary.count(term, txt), path) for path, txt in texts.items()), reverse=True)
        where = ", ".join(f"[{titles[path]}]({path})" for n, path in counts[:2] if n)
        also = f" ({', '.join(term.also)})" if term.also else ""
        rows.append(f'| <a class="book-anchor" id="{term.anchor}"></a>**{term.en}**{also} | {", ".join(term.ko)} | '
                    f'{term.gloss} | {where} |')
    return "\n".join(rows) + "\n"


def _exercise_index() -> str:
    """Every exercise of every written page, by chapter: its link, its kind (기초 / 심화 / 논문 비평), its page, its anchor."""
    out = []
    for ch in book.CHAPTERS:
        rows = []
        for d in ch.docs:
            if not d.written:
                continue
            text = (book.DOCS / d.path).read_text(encoding="utf-8")
            for m in EXERCISE.finditer(text):
                anchor = exercise_anchor(d.path, m.group(1))
                rows.append(f"| [{book.key(d)} 문제 {m.group(1)}]({d.path}#{anchor}) | {m.group(2)} | {d.title} | `#{anchor}` |")
        if rows:
            out.append(f"## Chapter {ch.number}: {ch.title}\n")
            out.append("| 문제 | 종류 | 문서 | anchor |\n|---|---|---|---|")
            out += rows
            out.append("")
    return "\n".join(out)


CALC_HEADING = re.compile(r"^## (.*\(Ch\d[^)]*\).*)$", re.M)


def _calculators_by_chapter() -> dict[int, list[tuple[str, str]]]:
    """Chapter number -> [(calculator heading, its anchor)] read from docs/calculators.md: a calculator
    belongs to every chapter its heading names ('(Ch5 모델 상태 + Ch6 activation)')."""
    from snippets.slugs import slugify

    out: dict[int, list[tuple[str, str]]] = {}
    text = (book.DOCS / "calculators.md").read_text(encoding="utf-8")
    for m in CALC_HEADING.finditer(text):
        title = m.group(1).strip()
        for n in dict.fromkeys(re.findall(r"Ch(\d)", title)):
            out.setdefault(int(n), []).append((title, slugify(title, "-")))
    return out


def _course_map(graders: dict[str, str] | None = None) -> str:
    """For an instructor planning a week: per chapter its pages (reading time), exercises by stable anchor,
    its lab with the command that runs it, and the calculators that use its formulas. The assignment's
    autograder command comes from book.GRADERS (chapter folder -> command): a chapter with an entry gets a
    '과제 채점' line; none is listed until an autograder exists (the hook for adding it later)."""
    graders = book.GRADERS if graders is None else graders
    calcs = _calculators_by_chapter()
    out = []
    for ch in book.CHAPTERS:
        out.append(f"## Chapter {ch.number}: {ch.title}\n")
        rows = ["| 문서 | 읽는 시간 | 문제 (anchor, 종류) |", "|---|---|---|"]
        for d in ch.docs:
            if not d.written:
                continue
            text = (book.DOCS / d.path).read_text(encoding="utf-8")
            ex = "<br>".join(f"[{a}]({d.path}#{a}) {m.group(2)}" for m in EXERCISE.finditer(text)
                             for a in [exercise_anchor(d.path, m.group(1))])
            rows.append(f"| [{book.key(d)} {d.title}]({d.path}) | {book.reading_minutes(d)} 분 | {ex} |")
        out += rows + [""]
        if (book.DOCS / ch.lab_path).exists():
            out.append(f"**실습.** [Chapter {ch.number} 실습 노트북]({ch.lab_path}) — 저장소에서 `make setup` 뒤 이렇게 실행합니다.\n")
            out.append(f"```bash\n.venv/bin/jupytext --to ipynb --execute docs/{ch.lab_path} -o {ch.folder}-lab.ipynb\n```\n")
        if ch.folder in graders:
            out.append(f"**과제 채점.** `{graders[ch.folder]}`\n")
        if calcs.get(ch.number):
            links = ", ".join(f"[{t}](calculators.md#{a})" for t, a in calcs[ch.number])
            out.append(f"**계산기.** {links}\n")
    return "\n".join(out)


PINNED = re.compile(r"^## 📌[^\n]*\n(.*?)(?=^## |\Z)", re.S | re.M)
MD_LINK_TARGET = re.compile(r"\]\((?!https?:|#)([^)\s]+)\)")


def _cheatsheets() -> str:
    """One cheat-sheet per chapter: every page's 📌 핵심 정리 section, as the page has it (so the two cannot
    drift), under the page's title; links rewritten for the cheat-sheet's place at the site root."""
    import posixpath

    out = []
    for ch in book.CHAPTERS:
        out.append(f"## Chapter {ch.number}: {ch.title}\n")
        for d in ch.docs:
            if not d.written:
                continue
            m = PINNED.search((book.DOCS / d.path).read_text(encoding="utf-8"))
            if not m:
                raise PluginError(f"{d.path}: no 📌 section for the cheat-sheet")
            body = MD_LINK_TARGET.sub(lambda l: "](" + posixpath.normpath(posixpath.join(ch.folder, l.group(1))) + ")",
                                      m.group(1).strip())
            out.append(f"### [{book.key(d)} {d.title}]({d.path})\n\n{body}\n")
    return "\n".join(out)


GENERATED = {
    "<!-- book:chapter-map -->": _chapter_map,
    "<!-- book:cheatsheets -->": _cheatsheets,
    "<!-- book:tour -->": _tour,
    "<!-- book:exercise-index -->": _exercise_index,
    "<!-- book:course-map -->": _course_map,
    "<!-- book:glossary -->": _glossary,
    "<!-- book:theorem-index -->": _theorem_index,
    "<!-- book:references -->": _references_block,
}


def _isolate_display_math(markdown: str) -> str:
    """Give every $$…$$ display block its own paragraph (blank line before and after).

    arithmatex only sees a display block that starts a paragraph; authors naturally write
    "… 는\n$$ … $$\n이다." inside a sentence, which would otherwise leave raw $$ on the page."""
    lines, out, fence, in_math, pad_next = markdown.split("\n"), [], None, False, False
    for line in lines:
        st = line.strip()
        if pad_next:
            if st:
                out.append("")
            pad_next = False
        if not in_math and (st.startswith("```") or st.startswith("~~~")):
            mark = st[:3]
            fence = None if fence == mark else (fence or mark)
        if fence or not st.startswith("$$") and not in_math:
            out.append(line)
            continue
        if not in_math:  # an opening line
            if out and out[-1].strip():
                out.append("")
            out.append(line)
            if len(st) >= 4 and st.endswith("$$"):
                pad_next = True
            else:
                in_math = True
            continue
        out.append(line)  # inside a block
        if st.endswith("$$"):
            in_math, pad_next = False, True
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri in _LABS:
        _executed_lab(page)
        return markdown
    for marker, fn in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, fn())
    if page.file.src_uri.startswith("ch"):
        markdown = _exercise_anchors(markdown, page.file.src_uri)
    markdown = _cite(_isolate_display_math(markdown), page)
    bc.fresh_sessions()  # no cell sees a session left by another page or an earlier serve rebuild
    if _CACHE["root"] is not None:  # the page's cells run, or replay their cached output (book_cache.py)
        bc.begin_page(_CACHE["root"], page.file.abs_src_path, page.file.src_uri, markdown)
    return markdown


# ------------------------------------------------------------------ math at build time

MATH = re.compile(
    r'<(span|div) class="arithmatex">(\\\(|\\\[)(.*?)(\\\)|\\\])</\1>', re.S)
_NODE_RENDER = r"""
const katex = require(process.argv[1]);
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', line => {
  const out = [];
  for (const [tex, display] of JSON.parse(line)) {
    try { out.push({html: katex.renderToString(tex, {displayMode: display, throwOnError: true, output: 'html'})}); }
    catch (e) { out.push({error: String(e.message || e)}); }
  }
  process.stdout.write(JSON.stringify(out) + '\n');
});
"""
_NODE = None
# (tex, display) -> KaTeX's answer, filled while the pages are rendered (on_page_content), read when the
# finished page is written (on_post_page): the rendering happens in mkdocs' first pass, which overlaps
# the labs, not in its second pass, which comes after the last lab and which every reader of the log waits for
_KATEX_DONE: dict[tuple[str, bool], dict] = {}


def _math_items(html_: str) -> list[tuple[str, bool]]:
    return [(html.unescape(m.group(3)), m.group(2) == "\\[") for m in MATH.finditer(html_)]


def _katex_prefetch(items: list[tuple[str, bool]]) -> None:
    todo = list(dict.fromkeys(i for i in items if i not in _KATEX_DONE))
    if todo:
        _KATEX_DONE.update(zip(todo, _katex_render(todo)))


def _katex_render(items: list[tuple[str, bool]]) -> list[dict]:
    """Render with one long-lived node process (one JSON line per page, one line back)."""
    global _NODE
    if _NODE is None or _NODE.poll() is not None:
        _NODE = subprocess.Popen(["node", "-e", _NODE_RENDER, str(KATEX / "katex.js")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8")
    _NODE.stdin.write(json.dumps(items) + "\n")
    _NODE.stdin.flush()
    line = _NODE.stdout.readline()
    if not line:
        raise PluginError(f"KaTeX renderer (node) died: {_NODE.stderr.read()[:500]}")
    return json.loads(line)


def _close_katex():
    global _NODE
    if _NODE is not None:
        _NODE.stdin.close()
        _NODE.wait(timeout=10)
        _NODE = None


TOC_MATH = re.compile(r"\\\((.*?)\\\)", re.S)
ELLIPSIS = re.compile(r'(<span class="md-ellipsis">)(.*?)(</span>)', re.S)


NB_MARKDOWN = re.compile(r'(<div class="jp-RenderedHTMLCommon jp-RenderedMarkdown[^"]*"[^>]*>)(.*?)(</div>)', re.S)
NB_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$<>\n]+?)\$", re.S)


def _notebook_math(output: str) -> str:
    """Chapter labs (mkdocs-jupyter): turn $…$ / $$…$$ in markdown cells into arithmatex spans,
    and drop the empty MathJax <script src=""> of the notebook template (the site loads no MathJax)."""
    output = output.replace('<script src=""> </script>', "")

    def cell(m):
        def one(t):
            if t.group(1) is not None:
                return f'<div class="arithmatex">\\[{t.group(1)}\\]</div>'
            return f'<span class="arithmatex">\\({t.group(2)}\\)</span>'
        return m.group(1) + NB_MATH.sub(one, m.group(2)) + m.group(3)

    return NB_MARKDOWN.sub(cell, output)


def _lab_downloads(output: str, page, config) -> str:
    """Chapter labs: write <lab>.ipynb (from the jupytext source) beside the page and link both files."""
    import jupytext

    import shutil

    src = Path(config["docs_dir"]) / page.file.src_uri  # the jupytext source
    executed = Path(page.file.abs_src_path)  # the executed .ipynb rendered on the page
    dest = Path(page.file.abs_dest_path).parent
    dest.mkdir(parents=True, exist_ok=True)
    repo = config.get("repo_url")
    if executed.suffix == ".ipynb":  # the executed notebook with the front matter a reader needs (lab_front)
        import nbformat

        nb = lab_front(executed, page.file.src_uri, repo)
        nbformat.write(nb, dest / f"{src.stem}.ipynb")
        nb.metadata["jupytext"] = {"notebook_metadata_filter": "kernelspec,-all"}  # the .py keeps the kernelspec
        jupytext.write(nb, dest / src.name, fmt="py:percent")
    else:
        shutil.copyfile(src, dest / src.name)
        jupytext.write(jupytext.read(src), dest / f"{src.stem}.ipynb")
    where = (f'이 책의 저장소 (<a href="{html.escape(repo)}">{html.escape(repo)}</a>)' if repo else "이 책의 저장소")
    box = ('<div class="admonition tip"><p class="admonition-title">이 노트북 내려받기, 내 컴퓨터에서 실행하기</p>'
           f'<p><a href="{src.stem}.ipynb" download>Jupyter 노트북 (.ipynb, 이 빌드의 실행 결과 포함)</a> · '
           f'<a href="{src.name}" download>jupytext 원본 (.py)</a>. 노트북이 <code>snippets</code> 패키지를 import 하므로 '
           f'{where} 안에서 실행합니다:</p><pre><code>{html.escape(lab_run_commands(page.file.src_uri, repo))}</code></pre></div>')
    return output.replace('<div class="jupyter-wrapper">', box + '<div class="jupyter-wrapper">', 1)


NB_STYLE = re.compile(r'<style type="text/css">\s*(@charset "UTF-8";\.jupyter-wrapper\{.*?)</style>', re.S)


def _notebook_css(output: str, page) -> str:
    """mkdocs-jupyter inlines JupyterLab's whole stylesheet (575 KB, 87 KB gzip) into every lab page.
    Keep, inline, only the rules this page can use (scripts/css_prune.py): about 3 KB gzip.

    With the book cache on, the pruned sheet is kept per lab page under a key made of the whole sheet,
    the rest of the page and css_prune.py itself (pruning takes about 0.15 s a page, every build)."""
    m = NB_STYLE.search(output)
    if not m:
        return output
    rest = output[:m.start()] + output[m.end():]
    pruner = _load_script("css_prune", fresh=True)  # the key names the pruner that runs, edited or not
    pruned, entry = None, None
    if _CACHE["root"] is not None:
        entry, key, pruned = bc.text_lookup(_CACHE["root"], "css", page.file.src_uri,
                                            [m.group(1), rest, pruner.__book_sha__])
    if pruned is None:
        pruned = pruner.prune(m.group(1), rest)
        if entry is not None:
            bc.text_store(entry, key, pruned)
    return output[:m.start()] + '<style type="text/css">' + pruned + "</style>" + output[m.end():]


def on_post_page(output, page, config, **kwargs):
    """Replace every arithmatex span (and TeX left in TOC entries) with KaTeX HTML."""

    if page.file.src_uri.endswith("lab.py"):
        output = _lab_downloads(output, page, config)
    output = output.replace("<!--book-cell-->", "").replace("<!--/book-cell-->", "")  # search's markers

    t0 = time.perf_counter()
    try:
        output = _post_page(output, page)
    finally:
        _PAGE_SECONDS[page.file.src_uri + " (KaTeX)"] = time.perf_counter() - t0
    if page.file.src_uri.endswith("lab.py"):  # after the math: the page's final markup decides the CSS
        output = _notebook_css(output, page)
    return output


def _post_page(output, page):
    if page.file.src_uri.endswith(".py"):
        output = _notebook_math(output)
    if MATH_RENDER != "build":
        return output
    found = list(MATH.finditer(output))
    toc = [m for m in ELLIPSIS.finditer(output) if "\\(" in m.group(2)]
    items = _math_items(output)
    toc_items = [(html.unescape(t.group(1)), False) for m in toc for t in TOC_MATH.finditer(m.group(2))]
    if not items and not toc_items:
        return output
    _katex_prefetch(items + toc_items)  # what on_page_content did not render yet (TOC, nav, notebook math)
    rendered = iter([_KATEX_DONE[i] for i in items + toc_items])

    def checked(tex):
        r = next(rendered)
        if "error" in r:
            raise PluginError(f"{page.file.src_uri}: KaTeX cannot render {tex[:80]!r}: {r['error']}")
        return r["html"]

    spans = {}
    for m, (tex, display) in zip(found, items):
        tag = "div" if display else "span"
        spans[m.span()] = f'<{tag} class="arithmatex">{checked(tex)}</{tag}>'
    for m in toc:
        inner = TOC_MATH.sub(lambda t: checked(html.unescape(t.group(1))), m.group(2))
        spans[m.span()] = m.group(1) + inner + m.group(3)
    pieces, last = [], 0
    for (a, b), new in sorted(spans.items()):
        pieces.append(output[last:a])
        pieces.append(new)
        last = b
    pieces.append(output[last:])
    return "".join(pieces)


NB_HEADING = re.compile(r'<h([1-6]) id="([^"]*)">(.*?)<a class="anchor-link" href="#[^"]*">', re.S)


def _lab_anchors(html_: str, page) -> str:
    """A lab page's heading ids, and its TOC's links to them, agree.

    mkdocs-jupyter gives a notebook heading an ASCII-only id (a Korean heading such as '더 해보기' gets
    the id ""), and builds the page's TOC separately, with Python-Markdown's own slugs ("_1", and "2" for
    a heading whose id is "2-torchdistributedpipelining"): those TOC links went nowhere. The ids it gives
    are kept (they are published: scripts/published_anchors.json); an empty one becomes the book's slug
    of the heading (snippets.slugs); and the TOC entries take the headings' ids, in document order."""
    from snippets.slugs import slugify

    used: set[str] = set()
    ids: list[str] = []

    def fix(m: re.Match) -> str:
        level, hid, inner = m.group(1), m.group(2), m.group(3)
        if not hid:
            hid = slugify(html.unescape(re.sub(r"<[^>]+>", "", inner)), "-") or "section"
        base, n = hid, 1
        while hid in used:
            hid, n = f"{base}_{n}", n + 1
        used.add(hid)
        ids.append(hid)
        return f'<h{level} id="{hid}">{inner}<a class="anchor-link" href="#{hid}">'

    html_ = NB_HEADING.sub(fix, html_)
    entries = []
    stack = list(reversed(list(page.toc or [])))
    while stack:
        item = stack.pop()
        entries.append(item)
        stack.extend(reversed(item.children))
    if len(entries) != len(ids):
        raise PluginError(f"{page.file.src_uri}: the notebook has {len(ids)} headings but its TOC {len(entries)}")
    for item, hid in zip(entries, ids):
        item.id = hid
        item.title = _plain_tex(item.title)
    return html_


def _plain_tex(title: str) -> str:
    """A notebook heading's TOC title as plain text: mkdocs-jupyter's TOC keeps the heading's TeX source
    ("2. $N = 3$: …", "$\\mathsf{f}$ 와 …"), which no math renderer reaches in the sidebar. Drop the $ delimiters
    and unwrap one-argument commands (\\mathsf{f} → f); the heading in the page body stays typeset."""
    def inner(m: re.Match) -> str:
        return re.sub(r"\\[A-Za-z]+\{([^{}]*)\}", r"\1", m.group(1)).replace("\\", "")
    return re.sub(r"\$([^$]+)\$", inner, title)


_PAGE_T0: dict[str, float] = {}
_PAGE_SECONDS: dict[str, float] = {}
_PAGE_CPU0: dict[str, float] = {}
_PAGE_CPU: dict[str, float] = {}


def on_pre_page(page, config, files, **kwargs):

    _PAGE_T0[page.file.src_uri] = time.perf_counter()
    _PAGE_CPU0[page.file.src_uri] = time.thread_time()
    return page


def on_page_content(html_, page, config, files, **kwargs):
    bc.end_page()
    if page.file.src_uri.endswith("lab.py"):
        html_ = _lab_anchors(html_, page)
    # collapsed blocks (exercise solutions, folded plumbing) stay out of the search index
    html_ = html_.replace("<details class=", "<details data-search-exclude class=")
    _index_for_search(html_, page, config)
    if MATH_RENDER == "build":
        _katex_prefetch(_math_items(html_))
    _PAGE_SECONDS[page.file.src_uri] = time.perf_counter() - _PAGE_T0.get(page.file.src_uri, time.perf_counter())
    _PAGE_CPU[page.file.src_uri] = time.thread_time() - _PAGE_CPU0.get(page.file.src_uri, time.thread_time())
    return html_


def on_post_build(config, **kwargs):
    """Search shows plain text: drop TeX delimiters from the search index (math stays readable).
    With BOOK_TIMING=1, print the seconds each page took to render (cells, notebooks, math)."""
    _close_katex()
    if _CACHE["root"] is not None:
        log.info(bc.summary())
    if os.environ.get("BOOK_TIMING"):
        log.info("post-build started %6.2f s after the build started", time.perf_counter() - _BUILD_T0[0])
        for uri, sec in sorted(_PAGE_SECONDS.items(), key=lambda kv: -kv[1]):
            log.info("page time %6.2f s (main thread CPU %5.2f s)  %s", sec, _PAGE_CPU.get(uri, 0.0), uri)
        t0 = _BUILD_T0[0]
        for rel, box in _LABS.items():
            if len(box.get("t", ())) == 2:
                log.info("lab ran %6.2f s .. %6.2f s after the build started  %s", box["t"][0] - t0, box["t"][1] - t0, rel)
        for uri, start in _PAGE_T0.items():
            log.info("page started %6.2f s  %s", start - t0, uri)
    index = Path(config["site_dir"]) / "search" / "search_index.json"
    if index.exists():
        _slim_search_index(index)


_PREVIOUS_INDEX: list = []


def _keep_previous_index(config) -> None:
    """serve --dirty: the search plugin indexes only the pages it rebuilt; remember the last index so
    that the pages not rebuilt stay searchable."""
    _PREVIOUS_INDEX.clear()
    index = Path(config["site_dir"]) / "search" / "search_index.json"
    if bc.STATE.dirty and index.exists():
        try:
            _PREVIOUS_INDEX.extend(json.loads(index.read_text(encoding="utf-8")).get("docs", []))
        except (OSError, ValueError):
            pass


PRE = re.compile(r"<pre>.*?</pre>", re.S)
TEX_DELIMS = re.compile(r"\\[()\[\]]")
DISPLAY_TEX = re.compile(r"\\\[.*?\\\]", re.S)


def _slim_search_index(index: Path) -> None:
    """The search index is fetched on a reader's first visit: keep the prose, headings and inline math
    (without TeX delimiters, so it reads as text); leave out code blocks, display equations, executed
    cells and the collapsed exercise solutions (see on_page_content), which a reader does not search
    by their words. Written as UTF-8, not as \\uXXXX escapes."""
    data = json.loads(index.read_text(encoding="utf-8"))
    if _PREVIOUS_INDEX:
        rebuilt = {d["location"].split("#")[0] for d in data.get("docs", [])}
        data["docs"] = data.get("docs", []) + [d for d in _PREVIOUS_INDEX if d["location"].split("#")[0] not in rebuilt]
    from snippets import glossary

    for doc in data.get("docs", []):
        doc["text"] = TEX_DELIMS.sub("", DISPLAY_TEX.sub("", PRE.sub("", doc.get("text", ""))))
        doc["title"] = TEX_DELIMS.sub("", doc.get("title", ""))
        # Korean search: a section that writes "bubble" is found by "버블" (snippets/glossary.py). The Korean
        # forms of the terms in a section's title go into the title (searched with the title's boost), those
        # of its text once at the end of the text; a form the section already contains is not added.
        in_title = [t.ko[0] for t in glossary.terms_in(doc["title"]) if t.ko[0] not in doc["title"]]
        if in_title:
            doc["title"] += " · " + " ".join(dict.fromkeys(in_title))
        in_text = [k for k in glossary.korean_forms(doc["text"]) if k not in in_title]
        if in_text:
            doc["text"] += " " + " ".join(in_text)
    index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")

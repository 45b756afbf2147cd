"""Content-addressed cache of the build's executed code: page cells (markdown-exec) and chapter labs.

A page's cells share one session, so a page is cached as a whole: the printed output of each of its
cells, in order. An entry is used only when all of these are unchanged since it was written:

- the static key: the text of every executed fence on the page, every file the page includes with
  `--8<--`, every module of this repository the cells import (transitively, from the AST), the
  versions of Python and of the libraries that shape the output, and this file and hooks.py;
- the files the cells read and the folders they listed while they ran (recorded with an audit hook:
  results files, the gpu_runs script a result's staleness is checked against, data files), each by
  its sha256 (a folder by its sorted listing).

A page whose cells printed a warning or failed is never stored, so a failing cell or a stale result
fails a strict build every time. A lab is cached as its executed notebook under a static key (lab
source, imported modules, versions, and the results files and gpu_runs scripts when it reads results).

Entries live in `.cache/book/` beside mkdocs.yml (BOOK_CACHE_DIR overrides), one file per page or
lab, written atomically. An entry that cannot be read is discarded and recomputed, with a log line
naming it. BOOK_CACHE=0 turns the cache off (nothing read, nothing written); CI builds from a clean
clone, where there is no cache. With `mkdocs build --verbose` every page says whether its cells ran.

A page's cells re-import this repository's modules (forget_repo_modules), so the audit hook also sees
every module they import at run time (from source or from __pycache__, recorded as the source file),
including one imported by name with importlib, and every file a module reads when it is imported.
A page whose cell starts a process (subprocess, os.system, ...) is never stored: what the child reads is
not seen. Every page's cells start with empty markdown-exec sessions (fresh_sessions), so no page can
lean on another page's session or on an earlier serve rebuild. An entry carries a digest of its content;
one that does not match is discarded like an unreadable one.

Limits: the audit hook does not see a stat (os.path.exists) of a file that is never opened, nor files
opened by a cell's own worker threads (results.load's missing-folder case is covered: pages that use
snippets.results depend on the list of results folders). A lab's key sees its imports and (when it
reads results) every results file, not other files the notebook reads.
"""
from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
FORMAT = 2  # bump when the entry layout changes
log = logging.getLogger("mkdocs.plugins.book.cache")

# the libraries whose version can change what a cell prints or a lab computes
VERSIONED = ("torch", "numpy", "matplotlib", "deepspeed", "markdown-exec", "jsonschema", "pyyaml",
             "jupytext", "nbclient", "nbformat", "ipykernel")
OWN_SOURCES = (ROOT / "scripts" / "hooks.py", Path(__file__).resolve())
# ... as this process loaded them: mkdocs loads the hooks once per process (serve too), so an edit made
# while `mkdocs serve` runs changes no key until the server restarts, and no entry is ever stored under
# a key of code that did not produce it
_OWN_SHAS = {p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else str(p): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in OWN_SOURCES}
# folders whose files the audit hook never records (outputs, caches, the environment)
_SKIP_PARTS = {".cache", ".git", ".venv", "node_modules", "__pycache__", "site", "build", ".pytest_cache"}

# every fence that names exec= at all (markdown-exec runs any value but no/off/false/0, and accepts the
# {.python exec="on"} form): a fence counted here that does not run only makes the key wider
EXEC_FENCE = re.compile(r"""^(?P<indent>[ \t]*)(?P<mark>`{3,}|~{3,})[^\n]*?\bexec\s*=""", re.M)
INCLUDE = re.compile(r"""-{1,}8<-{1,}\s+["']([^"':]+)(?::[^"']*)?["']""")


def enabled() -> bool:
    return os.environ.get("BOOK_CACHE", "1").strip().lower() not in ("0", "off", "no", "false")


def cache_dir(config_file: str | Path) -> Path:
    env = os.environ.get("BOOK_CACHE_DIR")
    return Path(env) if env else Path(config_file).resolve().parent / ".cache" / "book"


# ------------------------------------------------------------------ hashing

def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def file_sha(path: Path | str) -> str | None:
    try:
        return _sha(Path(path).read_bytes())
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def dir_sha(path: Path | str) -> str | None:
    try:
        return _sha("\n".join(sorted(os.listdir(path))))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


_VERSIONS: dict | None = None


def versions() -> dict:
    global _VERSIONS
    if _VERSIONS is None:
        from importlib import metadata

        found = {"python": sys.version}
        for name in VERSIONED:
            try:
                found[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                found[name] = None
        # and every other installed distribution: a cell may import a library not named above
        found["installed"] = sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                                     if d.metadata['Name']})
        _VERSIONS = found
    return _VERSIONS


# ------------------------------------------------------------------ imports, resolved to files of this repository

def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if not parts[0] or not (ROOT / parts[0]).is_dir():
        return None
    base = ROOT.joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


_NAMES: dict[tuple[str, str], set[str]] = {}


def imported_names(source: str, package: str = "") -> set[str]:
    """Module names imported by a piece of Python (absolute and relative imports, `from m import sub`)."""
    memo = (_sha(source), package)
    if memo not in _NAMES:
        _NAMES[memo] = _imported_names(source, package)
    return _NAMES[memo]


def _imported_names(source: str, package: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell with an --8<-- line or an IPython magic: read the import lines alone
        names: set[str] = set()
        for line in source.splitlines():
            if m := re.match(r"\s*from\s+([\w.]+)\s+import\s+\(?([\w, ]*)", line):
                names.add(m.group(1))
                names |= {f"{m.group(1)}.{a.strip()}" for a in m.group(2).split(",") if a.strip()}
            elif m := re.match(r"\s*import\s+([\w., ]+)", line):
                names |= {a.split(" as ")[0].strip() for a in m.group(1).split(",") if a.strip()}
        return names
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                mod = node.module or ""
            if mod:
                names.add(mod)
                names |= {f"{mod}.{a.name}" for a in node.names}
    return names


# this build's reading of each module: {path: (sha256, names it imports)}. Every page walks much the same
# modules; each is read once per build (reset_counts, at the start of every build, empties it).
_MODULES: dict[Path, tuple[str, set[str]]] = {}


def _module_facts(path: Path) -> tuple[str, set[str]]:
    if path not in _MODULES:
        text = path.read_text(encoding="utf-8")
        pkg = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
        _MODULES[path] = (_sha(text), imported_names(text, pkg))
    return _MODULES[path]


def import_closure(sources: list[str]) -> dict[str, str]:
    """{repo-relative path: sha256} of every module of this repository that the sources import,
    transitively, with the packages' __init__ files that importing them runs."""
    todo = [n for s in sources for n in imported_names(s)]
    seen: dict[str, str] = {}
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the packages on the way run their __init__
            path = _module_file(".".join(parts[:i]))
            if path is None or _rel(path) in seen:
                continue
            seen[_rel(path)], names = _module_facts(path)
            todo += names
    return dict(sorted(seen.items()))


# ------------------------------------------------------------------ static keys

def exec_fences(markdown: str) -> list[str]:
    """The full text (opening line and body) of every executed fence of a page."""
    out = []
    for m in EXEC_FENCE.finditer(markdown):
        mark = m.group("mark")
        end = re.compile(rf"^[ \t]*{re.escape(mark[0])}{{{len(mark)},}}[ \t]*$", re.M).search(markdown, m.end())
        out.append(markdown[m.start(): end.end() if end else len(markdown)])
    return out


def _static_key(kind: str, sources: list[str], includes: set[str], extra: dict | None = None) -> str:
    payload = {
        "format": FORMAT, "kind": kind, "sources": sources,
        "includes": {p: file_sha(ROOT / p) for p in sorted(includes)},
        "imports": import_closure(sources + [(ROOT / p).read_text(encoding="utf-8") for p in sorted(includes)
                                            if p.endswith(".py") and (ROOT / p).is_file()]),
        "versions": versions(),
        "own": _OWN_SHAS,
        **(extra or {}),
    }
    return _sha(json.dumps(payload, sort_keys=True))


def page_key(markdown: str) -> tuple[str | None, int]:
    """(static key, number of executed fences) of a page; (None, 0) when it executes nothing."""
    fences = exec_fences(markdown)
    if not fences:
        return None, 0
    includes = set(INCLUDE.findall(markdown))
    return _static_key("page", fences, includes), len(fences)


def results_state() -> dict:
    """Every results file and every gpu_runs script (a result's staleness depends on its script)."""
    files = sorted((ROOT / "gpu_runs").glob("results/*/*.json")) + sorted((ROOT / "gpu_runs").glob("*.py"))
    return {_rel(p): file_sha(p) for p in files}


def lab_key(lab: Path) -> str:
    text = lab.read_text(encoding="utf-8")
    closure = import_closure([text])
    reads_results = "snippets/results.py" in closure or "results" in text
    extra = {"lab": _rel(lab), "results": results_state() if reads_results else None}
    return _static_key("lab", [text], set(), extra)


# ------------------------------------------------------------------ entries on disk

def _entry_path(root: Path, kind: str, src: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", Path(src).as_posix().split("/docs/")[-1])[-60:].strip("-")
    return root / kind / f"{slug}-{_sha(src)[:12]}.json"


def read_entry(path: Path) -> dict | None:
    """The entry at path, or None; an unreadable or malformed entry is deleted and logged."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("key"), str):
            raise ValueError("not a cache entry of this format")
        body = {k: v for k, v in data.items() if k != "digest"}
        if data.get("digest") != _digest(body):
            raise ValueError("its content does not match its digest")
        return data
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.info("book cache: discarded unreadable entry %s (%s); recomputing", path, exc)
        try:
            path.unlink()
        except OSError:
            pass
        return None


def _digest(body: dict) -> str:
    return _sha(json.dumps(body, sort_keys=True, ensure_ascii=False))


def write_entry(path: Path, data: dict) -> None:
    body = {"format": FORMAT, **data}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({**body, "digest": _digest(body)}, f, ensure_ascii=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------ pages: record and replay cell outputs

@dataclass
class PageRun:
    src: str                      # the page's source path (unique across sites)
    uri: str                      # for log lines
    key: str
    path: Path                    # the entry file
    n_fences: int
    replay: list | None = None    # cached [code sha, output] pairs when the entry is valid
    outputs: list = field(default_factory=list)
    files: set = field(default_factory=set)
    dirs: set = field(default_factory=set)
    failed: bool = False
    spawned: bool = False
    warnings: int = 0
    thread: int = field(default_factory=threading.get_ident)


SPAWN = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.startfile"}


class _State:
    page: PageRun | None = None
    dirty: bool = False  # mkdocs serve --dirty: only pages whose source or cells changed are rebuilt
    executed: list = []
    replayed: list = []
    labs_executed: list = []
    labs_replayed: list = []


STATE = _State()


class CacheMismatch(PluginError):
    """The cells met on a page are not the ones its entry holds: the entry is dropped, the build stops."""


def _audit(event: str, args: tuple) -> None:
    run = STATE.page
    if run is None or run.replay is not None:
        return
    if event in SPAWN and threading.get_ident() == run.thread:
        run.spawned = True  # what a child process reads is not seen here: never store this page
        return
    if event not in ("open", "os.scandir", "os.listdir"):
        return
    if threading.get_ident() != run.thread or not args or args[0] is None or isinstance(args[0], int):
        return
    try:
        p = os.path.abspath(os.fsdecode(os.fspath(args[0])))
    except (TypeError, ValueError):
        return
    root = str(ROOT)
    if not p.startswith(root + os.sep):
        return
    parts = Path(p).relative_to(ROOT).parts
    if event == "open" and len(parts) > 2 and parts[-2] == "__pycache__" and p.endswith(".pyc"):
        # a module imported from its bytecode: the dependency is its source file
        p = os.path.join(os.path.dirname(os.path.dirname(p)), os.path.basename(p).split(".")[0] + ".py")
        parts = Path(p).relative_to(ROOT).parts
    if _SKIP_PARTS.intersection(parts):
        return
    (run.files if event == "open" else run.dirs).add(p)


class _WarningCounter(logging.Handler):
    def emit(self, record):
        if STATE.page is not None and record.levelno >= logging.WARNING:
            STATE.page.warnings += 1


def install() -> None:
    """Once per process: wrap markdown-exec's Python runner, add the audit hook and warning counter."""
    import markdown_exec._internal.formatters.python as mp
    from markdown_exec._internal.formatters.base import ExecutionError

    if getattr(mp._run_python, "_book_cache", False):
        return
    original = mp._run_python

    def run_python(code, returncode=None, session=None, id=None, **extra):  # noqa: A002
        run = STATE.page
        if run is None:
            return original(code, returncode=returncode, session=session, id=id, **extra)
        if run.replay is not None:
            i = len(run.outputs)
            if i >= len(run.replay) or run.replay[i][0] != _sha(code):
                run.path.unlink(missing_ok=True)
                raise CacheMismatch(f"{run.uri}: cell {i + 1} ({id or 'no id'}) is not the cell cached in {run.path} (entry dropped: build again)")
            run.outputs.append(run.replay[i])
            return run.replay[i][1]
        try:
            out = original(code, returncode=returncode, session=session, id=id, **extra)
        except ExecutionError:
            run.failed = True
            raise
        run.outputs.append([_sha(code), out])
        return out

    run_python._book_cache = True
    mp._run_python = run_python
    sys.addaudithook(_audit)
    logging.getLogger("mkdocs").addHandler(_WarningCounter())


def reset_counts() -> None:
    """At the start of every build (serve rebuilds included)."""
    _MODULES.clear()
    STATE.page = None
    STATE.executed, STATE.replayed, STATE.labs_executed, STATE.labs_replayed = [], [], [], []


def _valid_outputs(root: Path, src: str, key: str) -> list | None:
    """The cached outputs of a page when its entry matches the key and the files its cells read."""
    path = _entry_path(root, "pages", src)
    entry = read_entry(path)
    if entry is None or entry.get("key") != key or not _deps_unchanged(entry):
        return None
    outputs = entry.get("outputs")
    if isinstance(outputs, list) and all(isinstance(o, list) and len(o) == 2 and all(isinstance(x, str) for x in o)
                                         for o in outputs):
        return outputs
    log.info("book cache: discarded malformed entry %s; recomputing", path)
    path.unlink(missing_ok=True)
    return None


def begin_page(root: Path, src: str, uri: str, markdown: str) -> None:
    key, n = page_key(markdown)
    STATE.page = None
    if key is None:
        return
    run = PageRun(src=src, uri=uri, key=key, path=_entry_path(root, "pages", src), n_fences=n)
    run.replay = _valid_outputs(root, src, key)
    if run.replay is None:
        forget_repo_modules()
    STATE.page = run


def fresh_sessions() -> None:
    """Before a page's cells run: forget every markdown-exec session. markdown-exec keeps the sessions'
    globals for the life of the process, so under `mkdocs serve` a page re-executed would still see names
    its deleted cells once defined, and a page could use another page's session; either works while
    that state happens to exist and fails in a clean build (or when the other page's cells are replayed
    from the cache). Every page starts empty, cached or not, warm or cold."""
    import markdown_exec._internal.formatters.python as mp

    mp._sessions_globals.clear()


def forget_repo_modules() -> None:
    """Drop this repository's modules (snippets, gpu_runs) from sys.modules before a page's cells run:
    they import them afresh, so the audit hook sees every file a module reads when it is imported, the
    code that runs is the code on disk (mkdocs serve keeps one process), and no module state is shared
    between pages."""
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None) or ""
        if name.split(".")[0] in ("snippets", "gpu_runs") and f.startswith(str(ROOT) + os.sep):
            del sys.modules[name]


def cells_would_run(root: Path | None, src: str, markdown: str) -> bool:
    """Whether building this page now would execute its cells (serve --dirty rebuilds such pages)."""
    key, _ = page_key(markdown)
    if key is None:
        return False
    return root is None or _valid_outputs(root, src, key) is None


def includes_newer_than(markdown: str, dest: Path | str) -> bool:
    """serve --dirty: whether a file the page includes with --8<-- changed after the page's HTML was written."""
    try:
        built = os.path.getmtime(dest)
    except OSError:
        return True
    for rel in INCLUDE.findall(markdown):
        try:
            if os.path.getmtime(ROOT / rel) > built:
                return True
        except OSError:
            continue
    return False


def _deps_unchanged(entry: dict) -> bool:
    files, dirs = entry.get("files"), entry.get("dirs")
    if not isinstance(files, dict) or not isinstance(dirs, dict):
        return False
    return (all(file_sha(ROOT / p) == h for p, h in files.items())
            and all(dir_sha(ROOT / p) == h for p, h in dirs.items()))


def end_page() -> None:
    """After the page's Markdown is converted: store what its cells printed (when all went well)."""
    run, STATE.page = STATE.page, None
    if run is None:
        return
    if run.replay is not None:
        if len(run.outputs) != len(run.replay):
            run.path.unlink(missing_ok=True)
            raise CacheMismatch(f"{run.uri}: {len(run.outputs)} cells ran, {len(run.replay)} cached in {run.path}")
        STATE.replayed.append(run.uri)
        log.debug("book cache: %s: %d cells reused", run.uri, len(run.outputs))
        return
    STATE.executed.append(run.uri)
    log.debug("book cache: %s: %d cells executed", run.uri, len(run.outputs))
    if run.failed or run.warnings or not run.outputs:
        run.path.unlink(missing_ok=True)  # never keep an entry for a page that failed or warned
        return
    if run.spawned:
        run.path.unlink(missing_ok=True)
        log.info("book cache: %s: a cell started a process (what it reads is not tracked); not cached", run.uri)
        return
    if str(ROOT / "snippets" / "results.py") in run.files:
        # results.load("prog") on a folder that does not exist yet only stats it (not seen by the audit
        # hook), and a page may catch its "no results" error: a new program's folder must run it again
        run.dirs.add(str(ROOT / "gpu_runs" / "results"))
    files = {_rel(Path(p)): file_sha(p) for p in sorted(run.files)}
    dirs = {_rel(Path(p)): dir_sha(p) for p in sorted(run.dirs)}
    write_entry(run.path, {"key": run.key, "page": run.uri, "files": files, "dirs": dirs, "outputs": run.outputs})


# ------------------------------------------------------------------ labs: the executed notebook

def lab_lookup(root: Path, lab: Path, out: Path) -> tuple[str, Path, bool]:
    """(key, entry path, hit). On a hit the executed notebook is written to out."""
    import nbformat

    key = lab_key(lab)
    path = _entry_path(root, "labs", str(lab.resolve()))
    entry = read_entry(path)
    if entry is not None and entry.get("key") == key:
        try:
            nb = nbformat.from_dict(entry["notebook"])
            nbformat.validate(nb)
            nbformat.write(nb, out)
            STATE.labs_replayed.append(_rel(lab))
            return key, path, True
        except Exception as exc:  # noqa: BLE001 - any defect: discard, execute again
            log.info("book cache: discarded unreadable entry %s (%s); recomputing", path, exc)
            path.unlink(missing_ok=True)
    STATE.labs_executed.append(_rel(lab))
    return key, path, False


def lab_store(path: Path, key: str, lab: Path, executed: Path) -> None:
    write_entry(path, {"key": key, "lab": _rel(lab), "notebook": json.loads(executed.read_text(encoding="utf-8"))})


def text_lookup(root: Path, kind: str, src: str, parts: list[str]) -> tuple[Path, str, str | None]:
    """A text derived from `parts` (e.g. a lab page's pruned stylesheet), kept one entry per `src` under
    root/kind: (entry path, key, the stored text when its key matches, else None)."""
    key = _sha("\0".join(parts))
    path = _entry_path(root, kind, src)
    entry = read_entry(path)
    found = entry.get("text") if entry is not None and entry.get("key") == key else None
    return path, key, found if isinstance(found, str) else None


def text_store(path: Path, key: str, text: str) -> None:
    write_entry(path, {"key": key, "text": text})


def summary() -> str:
    def names(xs):
        return f" ({', '.join(xs)})" if 0 < len(xs) <= 4 else ""

    return (f"book cache: cells executed on {len(STATE.executed)} pages{names(STATE.executed)}, reused on "
            f"{len(STATE.replayed)}; labs executed {len(STATE.labs_executed)}{names(STATE.labs_executed)}, "
            f"reused {len(STATE.labs_replayed)}")

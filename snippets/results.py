"""Results files of gpu_runs programs: schema, validation, loading, staleness and rendering.

A results file is gpu_runs/results/<program>/<hardware id>.json. Pages call `experiment` (every
results file of a program, every hardware) and `hardware_tabs` (one content tab per hardware, each
with its provenance boxes); the build hook calls `validate_all` before anything is rendered, so a
malformed file stops the build with its path and the field at fault.

Staleness rule: a result is stale when any of its `inputs` (every repository module the run
imported: entry script, gpu_runs/harness.py, gpu_runs/comm_counter.py, snippets/common/..., with
their sha256) is missing or differs now. A schema-1 file (written before `inputs` existed) is read
and rendered, but is always stale: it cannot show which modules it ran.

Staleness policy, by who can refresh a result:
  * a stale CPU result is a build warning, which `strict: true` turns into an error: anyone can rerun
    it on a laptop (`make runs`, from a clean tree);
  * a stale GPU result is a fact about the commit it was measured at. It stays on the page under a
    visible badge ("measured at commit X; since then: files ..."), and the build prints a warning on
    the `book.results` logger, which is outside mkdocs' logger tree, so strict mode does not count
    it: a maintainer without a GPU can still edit a shared module and build.
While writing, BOOK_ALLOW_STALE=1 treats stale CPU results the same way (never set in CI or
`make build`; `make runs` then refreshes them from a clean tree).
"""
from __future__ import annotations

import hashlib
import html
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "gpu_runs" / "results"
SCHEMA = ROOT / "gpu_runs" / "results.schema.json"

log = logging.getLogger("mkdocs.plugins.book.results")  # counted by `mkdocs build --strict`


def _gpu_log() -> logging.Logger:
    """Warnings that strict mode must not count (stale GPU results): a logger outside 'mkdocs.'."""
    lg = logging.getLogger("book.results")
    if not lg.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(levelname)-7s -  %(message)s"))
        lg.addHandler(h)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    return lg


class ResultsError(ValueError):
    """A results file that cannot be used; the message names the file and the field."""


def _rel(path: Path) -> Path:
    path = Path(path)
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))


def validate(data: dict, path: Path | str = "<memory>") -> None:
    """Raise ResultsError naming the file and the first offending field."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        field = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ResultsError(f"{path}: field '{field}': {e.message}")
    rel = Path(path)
    if rel.suffix == ".json" and rel.parent.name != data["program"]:
        raise ResultsError(f"{path}: field 'program': '{data['program']}' but the file lies in "
                           f"'{rel.parent.name}/'")
    if rel.suffix == ".json" and rel.stem != data["hardware"]["id"]:
        raise ResultsError(f"{path}: field 'hardware/id': '{data['hardware']['id']}' but the file "
                           f"is named '{rel.name}'")
    if (data["hardware"]["kind"] == "gpu") != (data["hardware"]["backend"] == "nccl"):
        raise ResultsError(f"{path}: field 'hardware/backend': {data['hardware']['backend']} "
                           f"does not match kind {data['hardware']['kind']}")
    if data["hardware"]["kind"] == "gpu" and not data["hardware"]["gpu_count"]:
        raise ResultsError(f"{path}: field 'hardware/gpu_count': a GPU result needs GPUs")


def _cpu_log() -> logging.Logger:
    """Stale CPU results fail the strict build, unless an author set BOOK_ALLOW_STALE=1 while writing."""
    return _gpu_log() if os.environ.get("BOOK_ALLOW_STALE") == "1" else log


@dataclass
class Result:
    path: Path
    data: dict

    @property
    def hardware(self) -> dict:
        return self.data["hardware"]

    @property
    def measurements(self):
        return self.data["measurements"]

    @property
    def params(self) -> dict:
        return self.data["params"]

    @property
    def inputs(self) -> dict[str, str]:
        """path -> sha256 of every repository module the run imported (schema 2); schema 1: the script."""
        script = self.data["script"]
        return {**self.data.get("inputs", {}), script["path"]: script["sha256"]}

    def stale_reasons(self, root: Path | None = None) -> list[str]:
        """Why this result no longer describes the code in `root` (default: this repository); [] if current."""
        root = Path(root or ROOT)
        out = []
        if self.data["schema_version"] < 2:
            out.append(f"schema {self.data['schema_version']}: no input hashes")
        for rel, sha in self.inputs.items():
            p = root / rel
            if not p.is_file():
                out.append(f"{rel} missing")
            elif sha256_of(p) != sha:
                out.append(f"{rel} changed")
        return out

    @property
    def stale(self) -> bool:
        return bool(self.stale_reasons())

    @property
    def is_gpu(self) -> bool:
        return self.hardware["kind"] == "gpu"

    @property
    def strict_stale(self) -> bool:
        """Stale and refreshable here, so the strict build fails: CPU results only (module docstring)."""
        return self.stale and not self.is_gpu

    @property
    def label(self) -> str:
        h = self.hardware
        if h["kind"] == "gpu":
            return f"GPU 결과 — {_gpu_shape(h)} {h['gpu_name']}, {h['backend']}, world {h['world_size']}"
        return f"CPU 결과 — {h['cpu_model']}, {h['backend']}, {h['world_size']} processes"


def _gpu_shape(h: dict) -> str:
    """'8×' on one node, '2 nodes × 8' on several (world size = nodes × GPUs per node)."""
    nodes = int(h.get("nnodes") or 1)
    if nodes > 1:
        return f"{nodes} nodes × {h['gpu_count'] // nodes}×"
    return f"{h['gpu_count']}×"


def read(path: Path) -> Result:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc})") from exc
    validate(data, path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return Result(path, data)


def all_paths() -> list[Path]:
    return sorted(RESULTS.glob("*/*.json"))


def validate_all() -> list[Result]:
    """Validate every committed results file; report stale ones (policy: module docstring). Build hook."""
    results = [read(p) for p in all_paths()]
    for r in results:
        reasons = r.stale_reasons()
        if not reasons:
            continue
        if r.is_gpu:
            _gpu_log().warning("GPU result %s was measured at commit %s; since then: %s. The page shows it with "
                               "a badge; refresh it on a GPU with `make gpu-runs`", _rel(r.path),
                               r.data["git"]["commit"][:12], "; ".join(reasons))
        else:
            _cpu_log().warning("stale result %s (%s): rerun it (make runs)", _rel(r.path), "; ".join(reasons))
    return results


def _order(r: Result):
    h = r.hardware
    return (h["kind"] != "cpu", h.get("gpu_name") or "", int(h.get("nnodes") or 1), h["world_size"], r.path.name)


def load(program: str, kind: str | None = None) -> list[Result]:
    """Every results file of a program (optionally only 'cpu' or 'gpu'), CPU first.

    Pages call `experiment` (all hardware); `kind` is for a cell that can only use one kind, and
    that cell says why beside the call."""
    found = [read(p) for p in sorted((RESULTS / program).glob("*.json"))]
    if kind:
        found = [r for r in found if r.hardware["kind"] == kind]
    if not found:
        raise ResultsError(f"gpu_runs/results/{program}/: no {kind or ''} results file; run `make runs`")
    return sorted(found, key=_order)


# --8<-- [start:experiment]
def experiment(program: str) -> list[Result]:
    """Every results file of one experiment, on every hardware it ran on: CPU first, then each GPU
    kind, each by world size. The one helper pages use to read results."""
    return load(program)


@dataclass
class Platform:
    """The results of one experiment on one kind of hardware (CPU + gloo, or one GPU model + NCCL),
    at every world size measured there."""
    kind: str
    label: str
    runs: list[Result]

    @property
    def by_world(self) -> dict[int, Result]:
        return {r.hardware["world_size"]: r for r in self.runs}

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"


def platforms(runs: list[Result]) -> list[Platform]:
    """Group results by hardware: one Platform for the CPU runs, one per (GPU model, backend, nodes)."""
    groups: dict[tuple, list[Result]] = {}
    for r in sorted(runs, key=_order):
        h = r.hardware
        key = ("cpu", h["backend"]) if h["kind"] == "cpu" else \
            ("gpu", h["gpu_name"], h["backend"], int(h.get("nnodes") or 1))
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        worlds = "·".join(str(w) for w in sorted({r.hardware["world_size"] for r in rs}))
        h = rs[0].hardware
        if key[0] == "cpu":
            label = f"CPU — {h['backend']}, {worlds} processes"
        else:
            nodes = key[3]
            where = f"{nodes} nodes × " if nodes > 1 else ""
            counts = "·".join(str(r.hardware["gpu_count"] // nodes) for r in
                              sorted({r.hardware["gpu_count"]: r for r in rs}.values(), key=_order))
            label = f"GPU — {where}{counts}× {h['gpu_name']}, {h['backend'].upper()}"
        if any(r.stale for r in rs):
            label += " ⚠"
        out.append(Platform(key[0], label, rs))
    return out


_MD = None


def md_to_html(text: str) -> str:
    """The Markdown a renderer returns, as HTML (tables, admonitions, fenced code, raw HTML such as SVG
    figures, and $…$ math as arithmatex spans, which the build's KaTeX pass renders like any other)."""
    global _MD
    import markdown

    if _MD is None:
        _MD = markdown.Markdown(extensions=["tables", "attr_list", "md_in_html", "admonition", "pymdownx.details",
                                            "pymdownx.superfences", "pymdownx.arithmatex"],
                                extension_configs={"pymdownx.arithmatex": {"generic": True}})
    _MD.reset()
    return _MD.convert(text)


def hardware_tabs(runs: list[Result] | str, render, provenance: bool = True) -> str:
    """HTML: one content tab per hardware ("CPU — gloo, 2·4 processes" | "GPU — 8× NVIDIA H200, NCCL"),
    each holding render(platform) and the provenance box of every file it read. Print it from a cell
    with html="true".

    `render` takes a Platform and returns Markdown (a table, prose, an SVG figure). The tabs are Material's
    own tabbed markup (the `content.tabs.link` feature keeps the same hardware selected across a page),
    written as HTML because a figure indented inside Markdown tab syntax would not stay raw HTML."""
    import hashlib

    runs = experiment(runs) if isinstance(runs, str) else runs
    plats = platforms(runs)
    bodies = []
    for plat in plats:
        body = md_to_html(render(plat))
        if provenance:
            body += "\n" + "\n".join(provenance_box(r) for r in plat.runs)
        bodies.append(body)
    uid = "hw" + hashlib.sha1("\0".join(p.label for p in plats).encode() + "\0".join(bodies).encode()).hexdigest()[:10]
    inputs = "".join(f'<input {"checked " if k == 0 else ""}id="{uid}_{k}" name="{uid}" type="radio">'
                     for k in range(len(plats)))
    labels = "".join(f'<label for="{uid}_{k}">{html.escape(p.label)}</label>' for k, p in enumerate(plats))
    blocks = "".join(f'<div class="tabbed-block">\n{b}\n</div>' for b in bodies)
    return (f'<div class="tabbed-set tabbed-alternate hardware-tabs" data-tabs="{uid}:{len(plats)}">{inputs}'
            f'<div class="tabbed-labels">{labels}</div><div class="tabbed-content">{blocks}</div></div>')
# --8<-- [end:experiment]


# --8<-- [start:render]
def provenance_box(r: Result) -> str:
    """Markdown for a collapsible provenance box; a stale result is flagged in red."""
    d, v = r.data, r.data["versions"]
    rows = [
        ("하드웨어", r.label),
        ("명령", f"<code>{html.escape(d['command'])}</code>"),
        ("스크립트", f"<code>{d['script']['path']}</code> sha256 <code>{d['script']['sha256'][:12]}</code>"),
        ("입력 모듈", ", ".join(f"<code>{p}</code>" for p in r.inputs)),
        ("커밋", f"<code>{d['git']['commit'][:12]}</code>" + (" (작업 트리 수정됨)" if d["git"]["dirty"] else "")),
        ("시각 (UTC)", d["created_utc"]),
        ("버전", ", ".join(f"{k} {val}" for k, val in v.items() if val)),
        ("파일", f"<code>{_rel(r.path)}</code>"),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{val}</td></tr>" for k, val in rows)
    reasons = r.stale_reasons()
    if reasons and r.is_gpu:
        # a GPU result this machine cannot refresh: shown, under a visible badge, and not a strict failure
        commit = d["git"]["commit"][:12]
        badge = (f'<p class="stale-badge" markdown="0"><strong>⚠ {html.escape(commit)} 커밋에서 잰 GPU 결과</strong>'
                 f' — 그 뒤로 바뀐 입력: {html.escape(", ".join(reasons))}. 숫자는 그 커밋의 코드가 잰 것입니다 '
                 f'(GPU 에서 <code>make gpu-runs</code> 로 새로 잽니다).</p>')
        title = f"측정 시점 commit {commit} 이후 입력이 바뀜 — " + r.label
        _gpu_log().info("page renders GPU result %s measured at %s (since then: %s)", _rel(r.path), commit,
                        ", ".join(reasons))
        return (badge + f'<details class="warning provenance" markdown="0"><summary>{html.escape(title)}</summary>'
                f'<table class="provenance-table">{body}</table></details>')
    kind = "danger" if reasons else "info"
    title = (f"STALE — 실행 이후 바뀐 입력 ({', '.join(reasons)}): " if reasons else "출처 (provenance) — ") + r.label
    if reasons:
        _cpu_log().warning("page renders stale result %s (%s)", _rel(r.path), ", ".join(reasons))
    return (f'<details class="{kind} provenance" markdown="0"><summary>{html.escape(title)}</summary>'
            f'<table class="provenance-table">{body}</table></details>')


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table from a header and rows of already-formatted cells ('|' inside a cell is escaped)."""
    cell = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(map(cell, header)) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
# --8<-- [end:render]

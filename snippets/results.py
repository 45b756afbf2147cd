"""Results files of gpu_runs programs: schema, validation, loading, staleness and rendering.

A results file is gpu_runs/results/<program>/<hardware id>.json. Pages call `load` and the
renderers; the build hook calls `validate_all` before anything is rendered, so a malformed file
stops the build with its path and the field at fault, and a stale file is reported as a build
warning, which `strict: true` turns into an error.

Staleness rule: a result is stale when any of its `inputs` (every repository module the run
imported: entry script, gpu_runs/harness.py, gpu_runs/comm_counter.py, snippets/common/..., with
their sha256) is missing or differs now. A schema-1 file (written before `inputs` existed) is read
and rendered, but is always stale: it cannot show which modules it ran. Rerun it (`make runs`).
"""
from __future__ import annotations

import hashlib
import html
import json
import logging
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "gpu_runs" / "results"
SCHEMA = ROOT / "gpu_runs" / "results.schema.json"

log = logging.getLogger("mkdocs.plugins.book.results")


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
    def label(self) -> str:
        h = self.hardware
        if h["kind"] == "gpu":
            return f"GPU 결과 — {h['gpu_count']}× {h['gpu_name']}, {h['backend']}, world {h['world_size']}"
        return f"CPU 결과 — {h['cpu_model']}, {h['backend']}, {h['world_size']} processes"


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
    """Validate every committed results file; report stale ones. Used by the build hook."""
    results = [read(p) for p in all_paths()]
    for r in results:
        reasons = r.stale_reasons()
        if reasons:
            log.warning("stale result %s (%s): rerun it (make runs, or make gpu-runs for a GPU result)",
                        r.path.relative_to(ROOT), "; ".join(reasons))
    return results


def load(program: str, kind: str | None = None) -> list[Result]:
    """Every results file of a program (optionally only 'cpu' or 'gpu'), CPU first."""
    found = [read(p) for p in sorted((RESULTS / program).glob("*.json"))]
    if kind:
        found = [r for r in found if r.hardware["kind"] == kind]
    if not found:
        raise ResultsError(f"gpu_runs/results/{program}/: no {kind or ''} results file; run `make runs`")
    return sorted(found, key=lambda r: (r.hardware["kind"] != "cpu", r.path.name))


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
    kind = "danger" if reasons else "info"
    title = (f"STALE — 실행 이후 바뀐 입력 ({', '.join(reasons)}): " if reasons else "출처 (provenance) — ") + r.label
    if reasons:
        log.warning("page renders stale result %s (%s)", _rel(r.path), ", ".join(reasons))
    return (f'<details class="{kind} provenance" markdown="0"><summary>{html.escape(title)}</summary>'
            f'<table class="provenance-table">{body}</table></details>')


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table from a header and rows of already-formatted cells ('|' inside a cell is escaped)."""
    cell = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(map(cell, header)) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
# --8<-- [end:render]

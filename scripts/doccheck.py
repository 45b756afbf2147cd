"""Check the book's written documents against the page template (CONTRIBUTING.md).

    python scripts/doccheck.py [PAGE.md ...] [--strict] [--json]

Without arguments, checks every document that snippets/book.py lists and that exists under docs/.
Prints one line per document (ok / SHORT and what falls short) and a summary; --strict exits 1 when
any document falls short; --json prints the findings as JSON. tests/test_structure.py runs it.

What a document must have (code fences are skipped when reading headings and markers):
- an H1 title on its first line, then exactly the 11 `##` sections of the template, in order;
- under `## 💻`, `### 실험 1` … `### 실험 k` (k ≥ 4, numbered in order), each with an executed cell;
- every executed cell with an `id=` and a `session=` named after the page (`chN-NN…`);
- in `## 🔬`, at least one `/// proof` block, and every proof ending with \\square;
- in `## 🤔`, the three levels 기초 / 심화 / 논문 비평 and at least three collapsible solutions (`???`);
- none of the words that mark unfinished text (예상 출력, TODO, placeholder, …).
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ["🎯", "🔍", "📐", "📖", "✏", "🔬", "💻", "🔗", "⚖", "📌", "🤔"]  # without U+FE0F
LEVELS = ("기초", "심화", "논문 비평")
UNFINISHED = ("예상 출력", "expected output", "todo", "tbd", "준비 중", "lorem ipsum", "placeholder")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
EXECUTED = re.compile(r"""^\s*(`{3,}|~{3,})\s*\w+[^\n]*\bexec=["']?(on|1|true|yes)\b""", re.I)
EXPERIMENT = re.compile(r"^### 실험\s*(\d+)")
COLLAPSIBLE = re.compile(r"^\s*\?\?\?\+?\s")
QED = re.compile(r"\\square|∎|□")


@dataclass
class Section:
    title: str
    lines: list = field(default_factory=list)   # (is_code, text) pairs


@dataclass
class Finding:
    doc: str
    experiments: int = 0
    cells: int = 0
    problems: list = field(default_factory=list)


def sections(text: str) -> list[Section]:
    out, mark = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        in_code = mark is not None
        if m and mark is None:
            mark = m.group(1)
        elif m and line.strip().startswith(mark[0] * len(mark)) and line.strip().strip(mark[0]) == "":
            mark = None
        if not in_code and mark is None and line.startswith("## "):
            out.append(Section(line[3:].strip()))
        elif out:
            out[-1].lines.append((in_code or m is not None, line))
    return out


def check(path: Path) -> Finding:
    text = path.read_text(encoding="utf-8")
    rel = path.resolve().relative_to(ROOT).as_posix() if path.resolve().is_relative_to(ROOT) else str(path)
    f = Finding(rel)
    if not text.startswith("# "):
        f.problems.append("first line is not the H1 title")
    secs = sections(text)
    heads = [s.title.replace("\ufe0f", "") for s in secs]
    if len(heads) != len(TEMPLATE) or not all(h.startswith(e) for h, e in zip(heads, TEMPLATE)):
        f.problems.append(f"## sections are {[h.split()[0] if h else h for h in heads]}, "
                          f"the template wants {TEMPLATE} in this order")
    by = {e: s for s in secs for e in TEMPLATE if s.title.replace("\ufe0f", "").startswith(e)}

    page = re.match(r"ch(\d)-[a-z0-9-]+/(\d\d)-", rel.split("docs/")[-1])
    session = f"ch{page.group(1)}-{page.group(2)}" if page else None
    for line in text.splitlines():
        if EXECUTED.match(line):
            f.cells += 1
            if not re.search(r'\bid="[^"]+"', line):
                f.problems.append(f"executed cell without id=: {line.strip()[:80]}")
            s = re.search(r'\bsession="([^"]+)"', line)
            if session and not (s and s.group(1).startswith(session)):
                f.problems.append(f"executed cell not in session {session}…: {line.strip()[:80]}")

    if "💻" in by:
        exps: list[list] = []
        for is_code, line in by["💻"].lines:
            m = None if is_code else EXPERIMENT.match(line)
            if m:
                exps.append([int(m.group(1)), 0])
            elif exps and EXECUTED.match(line):
                exps[-1][1] += 1
        f.experiments = len(exps)
        if len(exps) < 4:
            f.problems.append(f"{len(exps)} experiments (### 실험 N), at least 4 wanted")
        if [n for n, _ in exps] != list(range(1, len(exps) + 1)):
            f.problems.append(f"experiments numbered {[n for n, _ in exps]}")
        dry = [n for n, cells in exps if cells == 0]
        if dry:
            f.problems.append(f"experiments without an executed cell: {dry}")

    if "🔬" in by:
        body = "\n".join(line for _, line in by["🔬"].lines)
        proofs = body.count("/// proof")
        if proofs == 0:
            f.problems.append("no /// proof block in 🔬")
        elif len(QED.findall(body)) < proofs:
            f.problems.append(f"{proofs} proofs but {len(QED.findall(body))} end marks (\\square)")

    if "🤔" in by:
        body = [line for is_code, line in by["🤔"].lines if not is_code]
        missing = [lv for lv in LEVELS if not any(lv in line for line in body)]
        if missing:
            f.problems.append(f"exercise levels missing: {missing}")
        n = sum(bool(COLLAPSIBLE.match(line)) for line in body)
        if n < 3:
            f.problems.append(f"{n} collapsible solutions (??? …), 3 wanted")

    low = text.lower()
    f.problems += [f"contains '{w}'" for w in UNFINISHED if w in low]
    return f


def documents() -> list[Path]:
    sys.path.insert(0, str(ROOT))
    from snippets import book

    return [book.DOCS / d.path for d in book.ALL_DOCS if (book.DOCS / d.path).exists()]


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv if not a.startswith("--")] or documents()
    found = [check(p) for p in paths]
    if "--json" in argv:
        print(json.dumps([asdict(f) for f in found], ensure_ascii=False, indent=1))
    else:
        for f in found:
            head = "ok   " if not f.problems else "SHORT"
            print(f"{head} {f.doc}: {f.experiments} experiments, {f.cells} executed cells"
                  + ("" if not f.problems else " | " + "; ".join(f.problems)))
        print(f"{sum(not f.problems for f in found)}/{len(found)} documents follow the template")
    return 1 if "--strict" in argv and any(f.problems for f in found) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

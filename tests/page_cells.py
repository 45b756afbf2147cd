"""Helpers the page tests of every chapter share: run a page's own cell against a results folder that holds the
committed CPU files and the synthetic GPU fixtures (tests/gpu_fixtures/results), and read one hardware's tab.

A page cell calls results.hardware_tabs("<program>", render), which reads results.RESULTS: pointing that
at a scratch folder lets a test build the very tab a reader would see once a GPU file is committed, and
perturb a fixture first so that a number can only come from that file.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "gpu_fixtures" / "results"
_FENCE = re.compile(r'^(\s*)```python exec="on"[^\n]*\bsession="([^"]+)"[^\n]*\bid="([^"]+)"')


def page_cells(md: str | Path) -> list[tuple[str, str, str]]:
    """(id, session, code) of every executed cell of a page, in order (indented cells dedented)."""
    lines = (ROOT / "docs" / md).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            m2 = re.match(r'^(\s*)```python exec="on"[^\n]*\bid="([^"]+)"[^\n]*\bsession="([^"]+)"', lines[i])
            m = m2 and (m2.group(1), m2.group(3), m2.group(2))
        else:
            m = (m.group(1), m.group(2), m.group(3))
        if m:
            indent, session, cid = m
            j = i + 1
            while lines[j] != indent + "```":
                j += 1
            out.append((cid, session, textwrap.dedent("\n".join(lines[i + 1:j]))))
            i = j
        i += 1
    return out


def results_dir(tmp: Path, programs, gpu=True, keep=None) -> Path:
    """A results folder with the committed files of `programs` and (gpu=True) their GPU fixtures.
    keep: optional {program: predicate(file name) -> bool} to drop some fixture files (e.g. keep one world size)."""
    dest = tmp / "results"
    for prog in programs:
        (dest / prog).mkdir(parents=True, exist_ok=True)
        srcs = list((ROOT / "gpu_runs" / "results" / prog).glob("*.json"))
        if gpu:
            srcs += [p for p in (FIXTURES / prog).glob("*.json") if not keep or prog not in keep or keep[prog](p.name)]
        for p in srcs:
            shutil.copy2(p, dest / prog / p.name)
    return dest


def edit(path: Path, change) -> None:
    """Rewrite one results file in place: change(data) mutates the parsed JSON."""
    d = json.loads(path.read_text(encoding="utf-8"))
    change(d)
    path.write_text(json.dumps(d), encoding="utf-8")


def run_cell(md: str, cid: str, results_path: Path, monkeypatch) -> str:
    """Run the page's cells of `cid`'s session in order, up to and including `cid`, with results.RESULTS at
    `results_path`; return what `cid` printed."""
    from snippets import results

    monkeypatch.setattr(results, "RESULTS", results_path)
    cells = page_cells(md)
    session = next(s for c, s, _ in cells if c == cid)
    env: dict = {"__name__": "__cell__"}
    for c, s, code in cells:
        if s != session:
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, f"<cell {c}>", "exec"), env)  # noqa: S102
        if c == cid:
            return buf.getvalue()
    raise KeyError(cid)


def tabs(html: str) -> dict[str, str]:
    """label -> body HTML of every hardware tab in a cell's output (first tab set wins on equal labels)."""
    out = {}
    for tabset in html.split('<div class="tabbed-set tabbed-alternate hardware-tabs"')[1:]:
        labels = re.findall(r'<label for="[^"]+">([^<]+)</label>', tabset)
        bodies = tabset.split('<div class="tabbed-block">')[1:]
        for label, body in zip(labels, bodies):
            out.setdefault(label, body)
    return out


def tab(html: str, kind: str) -> str:
    """The body of the first tab whose label starts with 'CPU' or 'GPU'."""
    found = [b for label, b in tabs(html).items() if label.startswith(kind)]
    assert found, f"no {kind} tab in {list(tabs(html))}"
    return found[0]


def synthetic_gemm(res: Path, like: Path, peak_tflops: float, sweep: list[dict]) -> Path:
    """A gemm_bench results file (gpu_runs/gemm_bench.py's measurement shape: {"peak": {..., "tflops"}, "sweep": [...]})
    on the hardware of the results file `like`, written into the scratch results folder `res`."""
    d = json.loads(like.read_text(encoding="utf-8"))
    d.update(program="gemm_bench", script={"path": "gpu_runs/gemm_bench.py", "sha256": "0" * 64},
             params={"dtype": "bfloat16"},
             measurements={"peak": {"m": 16384, "n": 16384, "k": 16384, "dtype": "bfloat16", "tflops": peak_tflops},
                           "sweep": sweep})
    out = res / "gemm_bench" / f"{d['hardware']['id']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(d), encoding="utf-8")
    return out


def gpu_copies(res: Path, program: str) -> list[Path]:
    """Beside every CPU file of `program` in the scratch results folder `res`, its GPU-shaped copy as
    tests/gpu_fixtures/make.py makes it (fixture_from_cpu, which applies augment/<program>.py)."""
    from tests.gpu_fixtures.make import fixture_from_cpu

    out = []
    for cpu in sorted((res / program).glob("cpu-*.json")):
        d = fixture_from_cpu(json.loads(cpu.read_text()), f"gpu_runs/results/{program}/{cpu.name}")
        out.append(res / program / f"{d['hardware']['id']}.json")
        out[-1].write_text(json.dumps(d))
    assert out, f"no committed CPU result gpu_runs/results/{program}/cpu-*.json to mirror: run `make runs`"
    return out


def table_rows(html: str) -> list[list[str]]:
    """The cells' text of every table row of a tab."""
    import html as H

    return [[H.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)]
            for tr in re.findall(r"<tr>(.*?)</tr>", html, re.S)]


def outside_fences(text: str):
    """(line number, line) of a page's Markdown outside fenced code blocks (``` or ~~~, indented or not):
    what the glossary and landing tests read as the page's prose."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.lstrip()
        if fence:
            fence = None if s.startswith(fence) else fence
            continue
        if s.startswith(("```", "~~~")):
            fence = s[:3]
            continue
        yield n, line

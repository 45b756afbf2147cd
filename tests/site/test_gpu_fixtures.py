"""With GPU results in place, every page that shows a CPU result also shows the GPU one.

The synthetic fixtures (tests/gpu_fixtures/results: one GPU-shaped file per CPU file of every GPU-plan
program, hardware as harness.hardware() writes it on CUDA) are copied into a scratch checkout, whose pages
are built strictly (the labs read no results and are left out: BOOK_ONLY). A page shows a file when a
provenance box names it. Counted per page: each CPU file shown k times has its GPU mirror shown k times,
under a GPU tab and a GPU label; every fixture is shown on some page; and the CPU boxes are the same as
in the real site's build (adding GPU files takes nothing away)."""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from snippets import book
from tests.gpu_fixtures import build as gfx

pytestmark = pytest.mark.build
ROOT = book.ROOT


@pytest.fixture(scope="module")
def fixture_site(tmp_path_factory):
    repo = gfx.scratch_checkout(tmp_path_factory.mktemp("gpu-fixture-checkout"))
    proc = gfx.build(repo, only="ch*/[0-9]*")
    if proc.returncode:
        pytest.fail(f"strict build with the GPU fixtures failed:\n{proc.stderr[-6000:]}")
    return repo / "site", proc.stderr


def test_strict_build_with_gpu_results_passes_and_warns_only_about_gpu_staleness(fixture_site):
    _, log = fixture_site
    warnings = [w for w in re.findall(r"^(?:WARNING|ERROR)\s+-.*$", log, re.M)
                if not re.match(r"WARNING -  GPU result gpu_runs/results/\S+ was measured at commit ", w)]
    assert not warnings, warnings


def test_every_cpu_result_on_a_page_has_its_gpu_result_beside_it(fixture_site):
    site, _ = fixture_site
    counts = gfx.shown(site)
    programs = {p.name for p in gfx.FIXTURES.glob("*/")}
    assert gfx.missing_gpu(counts, programs) == {}
    pages_with_gpu = [p for p, c in counts.items() if any(k[1] == "gpu" for k in c)]
    assert len(pages_with_gpu) >= 25, pages_with_gpu  # the book's results pages (59 cells on 30 pages)
    for page in pages_with_gpu:
        html = (site / page).read_text(encoding="utf-8")
        gpu_boxes = sum(n for k, n in counts[page].items() if k[1] == "gpu")
        assert html.count("GPU 결과 — ") >= gpu_boxes, page             # each box labelled GPU
        assert re.search(r'<label for="hw\w+">GPU — [^<]*NVIDIA H200, NCCL', html), page  # and a GPU tab


def test_every_gpu_fixture_is_shown_on_some_page(fixture_site):
    site, _ = fixture_site
    shown = set()
    for page in site.rglob("index.html"):
        shown |= set(gfx.SHOWN.findall(page.read_text(encoding="utf-8")))
    fixtures = {(f.parent.name, f.stem) for f in gfx.FIXTURES.glob("*/*.json")}
    assert fixtures - shown == set()


def test_gpu_files_take_no_cpu_result_off_a_page(fixture_site, built_site):
    site, _ = fixture_site
    real, _, _ = built_site
    cpu = lambda counts: {p: Counter({k: n for k, n in c.items() if k[1] == "cpu"})  # noqa: E731
                          for p, c in counts.items() if any(k[1] == "cpu" for k in c)}
    assert cpu(gfx.shown(site)) == cpu(gfx.shown(real))


def test_fixture_hardware_is_what_the_harness_writes_on_cuda():
    """tests/gpu_fixtures/make.py builds each fixture's hardware block with harness.hardware() on mocked
    CUDA; here the block is also checked against the schema's rules written out by hand."""
    for f in gfx.FIXTURES.glob("*/*.json"):
        h = json.loads(f.read_text())["hardware"]
        n = h["world_size"]
        assert (h["kind"], h["backend"], h["gpu_name"], h["gpu_count"], h["nnodes"]) == \
            ("gpu", "nccl", "NVIDIA H200", n, 1), f
        assert h["id"] == f"gpu-nccl-1x{n}-nvidia-h200" == f.stem, f

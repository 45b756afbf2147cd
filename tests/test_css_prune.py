"""scripts/css_prune.py: which rules a page keeps. The browser test (tests/site/test_browser.py) checks
that a real lab page looks the same under the pruned and the whole stylesheet."""
from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("css_prune_under_test", ROOT / "scripts" / "css_prune.py")
cp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cp)

PAGE = '<div class="jp-Cell jp-CodeCell" id="cell-1" data-mime-type="text/plain"><pre>x</pre></div>'


def test_rules_for_absent_classes_ids_and_attributes_go():
    css = (".jp-Cell{color:red}.jp-Absent{color:blue}#cell-1{margin:0}#nope{margin:1px}"
           "[data-mime-type]{padding:0}[data-other]{padding:1px}pre{font-size:1em}")
    assert cp.prune(css, PAGE) == ".jp-Cell{color:red}#cell-1{margin:0}[data-mime-type]{padding:0}pre{font-size:1em}"


def test_a_selector_list_keeps_its_usable_selectors_and_not_never_needs_a_class():
    css = ".jp-Absent .x,.jp-Cell pre{color:red}.jp-Cell:not(.jp-Absent)::before{content:''}"
    assert cp.prune(css, PAGE) == ".jp-Cell pre{color:red}.jp-Cell:not(.jp-Absent)::before{content:''}"


def test_a_class_named_only_by_a_script_counts_as_used():
    page = PAGE + '<script>el.classList.add("jp-mod-warning")</script>'
    assert cp.prune(".jp-mod-warning{color:orange}", page) == ".jp-mod-warning{color:orange}"


def test_media_blocks_are_pruned_inside_and_dropped_when_empty():
    css = "@media (max-width:600px){.jp-Cell{margin:0}.jp-Absent{margin:1px}}@media print{.jp-Absent{x:y}}"
    assert cp.prune(css, PAGE) == "@media (max-width:600px){.jp-Cell{margin:0}}"


def test_unused_custom_properties_go_and_a_chain_of_them_stays():
    css = ".jupyter-wrapper{--a:1px;--b:var(--a);--unused:2px;--also-unused:var(--unused)}.jp-Cell{margin:var(--b)}"
    out = cp.prune(css, '<div class="jupyter-wrapper">' + PAGE + "</div>")
    assert out == ".jupyter-wrapper{--a:1px;--b:var(--a)}.jp-Cell{margin:var(--b)}"


def test_an_inline_style_keeps_the_variable_it_reads():
    css = ".jupyter-wrapper{--w:3px;--unused:1px}"
    page = '<div class="jupyter-wrapper" style="width:var(--w)"></div>'
    assert cp.prune(css, page) == ".jupyter-wrapper{--w:3px}"


def test_at_rules_other_than_media_stay_and_strings_do_not_confuse_the_parser():
    css = '@charset "UTF-8";@keyframes spin{0%{x:y}to{x:z}}.jp-Cell::after{content:"{;}"}'
    assert cp.prune(css, PAGE) == css


def test_an_unbalanced_stylesheet_is_an_error():
    with pytest.raises(ValueError, match="unbalanced"):
        cp.prune(".jp-Cell{color:red", PAGE)


def test_the_real_notebook_stylesheet_shrinks_to_a_few_kilobytes():
    from mkdocs_jupyter.nbconvert2 import nb2html
    import re

    html = nb2html(str(ROOT / "docs" / "ch1-collective" / "lab.py"), theme="auto")
    m = re.search(r'<style type="text/css">\s*(@charset "UTF-8";\.jupyter-wrapper\{.*?)</style>', html, re.S)
    whole = m.group(1)
    kept = cp.prune(whole, html[:m.start()] + html[m.end():])
    assert len(gzip.compress(whole.encode())) > 60_000
    assert len(gzip.compress(kept.encode())) < 10_000
    assert ".jp-Cell" in kept or ".jp-CodeCell" in kept

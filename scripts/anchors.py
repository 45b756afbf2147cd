"""Published URLs and anchors: once published they do not change (GUIDE.md).

    python scripts/anchors.py build/site     # rewrite scripts/published_anchors.json from a built site

The file lists, for every page URL, the ids of its headings, of its definition/theorem blocks, and of its
exercises (ex-…), figures (fig-…) and glossary terms (term-…).
tests/site/test_build.py fails when a listed URL or anchor disappears from the build, and when the
build has anchors the file does not list yet (run this script after adding a page or a heading).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "scripts" / "published_anchors.json"
HEADING = re.compile(r'<h[2-4] id="([^"]+)"')
BLOCK = re.compile(r'<div class="admonition (?:definition|theorem|lemma|corollary)" id="([^"]+)"')
LINKABLE = re.compile(r'<(?:a class="book-anchor"|figure class="book-figure") id="((?:ex|fig|term)-[^"]+)"')  # exercises, figures, glossary terms


def collect(site: Path) -> dict[str, list[str]]:
    out = {}
    for html in sorted(site.glob("**/index.html")):
        rel = html.parent.relative_to(site).as_posix()
        if rel.startswith(("assets", "404")):
            continue
        text = html.read_text(encoding="utf-8")
        ids = sorted(set(HEADING.findall(text)) | set(BLOCK.findall(text)) | set(LINKABLE.findall(text)))
        out["/" if rel == "." else f"/{rel}/"] = ids
    return out


def main(argv):
    site = Path(argv[0]) if argv else ROOT / "build" / "site"
    data = {"generated_by": "scripts/anchors.py", "pages": collect(site)}
    PUBLISHED.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {PUBLISHED.relative_to(ROOT)}: {len(data['pages'])} pages, "
          f"{sum(map(len, data['pages'].values()))} anchors")


if __name__ == "__main__":
    main(sys.argv[1:])

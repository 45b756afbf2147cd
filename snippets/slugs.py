"""Heading anchors: readable Korean, stable, no leading/doubled separators (mkdocs.yml toc.slugify).

'🎯 핵심 질문' -> '핵심-질문'; '실험 1 — $N=4$ ring' -> '실험-1-n4-ring'. Changing this function changes
published anchors: tests/site/test_build.py compares them with scripts/published_anchors.json.
"""
from __future__ import annotations

import re

from pymdownx.slugs import slugify as _pymdownx_slugify

_base = _pymdownx_slugify(case="lower")


def slugify(text: str, sep: str) -> str:
    slug = _base(text, sep)
    return re.sub(re.escape(sep) + "{2,}", sep, slug).strip(sep)

"""Versions of the libraries the site was built with; pages print them (no typed-in versions)."""
from __future__ import annotations

import platform
from importlib import metadata

PACKAGES = ("torch", "deepspeed", "numpy", "mkdocs", "mkdocs-material", "markdown-exec", "pymdown-extensions")


def version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    return {"python": platform.python_version(), **{p: version(p) for p in PACKAGES}}


def versions_table(packages=None) -> str:
    v = versions()
    keys = ["python", *(packages or PACKAGES)]
    return "| package | version |\n|---|---|\n" + "\n".join(f"| {k} | {v.get(k, version(k))} |" for k in keys)

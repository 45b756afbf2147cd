"""Keep only the CSS a page can use: the lab pages' JupyterLab stylesheet, cut to what the page needs.

mkdocs-jupyter puts JupyterLab's whole stylesheet (575 KB, 87 KB gzip) into every notebook page. A lab
page uses a small part of it. `prune(css, page_html)` drops

- every selector that names a class, an id or an attribute whose name appears nowhere in the page (not
  in its markup and not in its scripts: a script that adds a class names it, so its rules stay);
- a rule left without selectors, an @media or @supports block left empty;
- the declarations of custom properties (`--name: ...`) that no kept rule and no inline style reads with
  `var(--name)`, repeated until nothing more goes (a variable may be read only by another variable).

@font-face, @keyframes and the other at-rules are kept as they are. The test that this changes nothing a
reader sees is tests/site/test_browser.py: the computed style of every element of a lab page is the same
under the pruned sheet and under the whole one.
"""
from __future__ import annotations

import re

WORD = re.compile(r"-?[_a-zA-Z][\w-]*")
CLASS = re.compile(r"\.(-?[_a-zA-Z][\w-]*)")
ID = re.compile(r"#(-?[_a-zA-Z][\w-]*)")
ATTR = re.compile(r"\[\s*([\w-]+)")
PSEUDO = re.compile(r"::?[\w-]+(\((?:[^()]|\([^()]*\))*\))?")  # :hover, ::before, :not(...), :nth-child(2n)
VAR_USE = re.compile(r"var\(\s*(--[\w-]+)")


def rules(css: str):
    """Top-level rules of a stylesheet as (prelude, body); body is None for a statement (@charset ...;)."""
    i, n = 0, len(css)
    while i < n:
        while i < n and css[i].isspace():
            i += 1
        if i >= n:
            return
        j, depth, quote, start = i, 0, None, i
        while j < n:
            c = css[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == ";" and depth == 0:
                yield css[i:j].strip(), None
                break
            elif c == "{":
                if depth == 0:
                    start = j
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    yield css[i:start].strip(), css[start + 1:j]
                    break
            j += 1
        else:
            raise ValueError(f"unbalanced stylesheet near {css[i:i + 60]!r}")
        i = j + 1


def _split(text: str, sep: str) -> list[str]:
    """Split at `sep` outside parentheses and quotes."""
    out, depth, quote, cur = [], 0, None, []
    for c in text:
        if quote:
            quote = None if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == sep and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(c)
    out.append("".join(cur))
    return out


def _selector_used(selector: str, words: set[str]) -> bool:
    # a pseudo-class never makes a selector need a class: :not(.a) matches where .a is absent
    s = PSEUDO.sub("", selector)
    names = CLASS.findall(s) + ID.findall(s) + ATTR.findall(s)
    return all(name in words for name in names)


def _walk(css: str, style_rule) -> str:
    """Rebuild `css`, passing each style rule (inside @media and @supports too) through
    `style_rule(prelude, body)`, which returns the rule's new text or "" to drop it. Blocks left empty go."""
    out = []
    for prelude, body in rules(css):
        if body is None:
            out.append(prelude + ";")
        elif prelude.startswith(("@media", "@supports")):
            inner = _walk(body, style_rule)
            if inner:
                out.append(prelude + "{" + inner + "}")
        elif prelude.startswith("@"):
            out.append(prelude + "{" + body + "}")
        else:
            out.append(style_rule(prelude, body))
    return "".join(out)


def _prune_rules(css: str, words: set[str]) -> str:
    def rule(prelude: str, body: str) -> str:
        kept = [s.strip() for s in _split(prelude, ",") if s.strip() and _selector_used(s, words)]
        return ",".join(kept) + "{" + body + "}" if kept else ""

    return _walk(css, rule)


def _drop_variables(css: str, used: set[str]) -> str:
    def rule(prelude: str, body: str) -> str:
        decls = [d for d in _split(body, ";") if d.strip()]
        decls = [d for d in decls if not d.strip().startswith("--") or d.split(":", 1)[0].strip() in used]
        return prelude + "{" + ";".join(decls) + "}" if decls else ""

    return _walk(css, rule)


def _prune_variables(css: str, html: str) -> str:
    while True:
        new = _drop_variables(css, set(VAR_USE.findall(css)) | set(VAR_USE.findall(html)))
        if new == css:
            return css
        css = new


def prune(css: str, page_html: str) -> str:
    """The rules of `css` that can apply to `page_html` (see the module docstring)."""
    words = set(WORD.findall(page_html))
    return _prune_variables(_prune_rules(css, words), page_html)

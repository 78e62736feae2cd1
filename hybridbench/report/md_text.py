"""Text from a run (a build's version string, a server log's tail, a model's answer, a config's names) placed in
Markdown that GitHub renders (a job summary, a PR comment, compare.md, report.md): as text it cannot add an image,
a link, HTML (``<img>``, ``<!--`` hiding the verdict below it) or emphasis (a fake **PASS**), close its code span or
split a table row. Standard library only: the PR summary runs on a runner with nothing installed."""

from __future__ import annotations

import re

__all__ = ["md_code", "md_forms", "md_text"]

# Backslash-escaped, each shows as itself (CommonMark escapes any ASCII punctuation). An underscore inside a word
# (token_hit_rate) is never emphasis and stays as it is.
_ACTIVE = re.compile(r"[\\`*\[\]<|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_text(text: object) -> str:
    """``text`` on one line, shown as written in a Markdown paragraph or table cell."""
    return _ACTIVE.sub(lambda m: "\\" + m.group(0), " ".join(str(text).split()))


def md_code(text: object, *, cell: bool = False) -> str:
    """A code span ``text`` cannot close: fenced by more backticks than it holds in a row. In a table ``cell`` a
    ``|`` is escaped even there (a GFM table splits on it before reading code spans)."""
    text = " ".join(str(text).split())
    if cell:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_forms(values: frozenset[str]) -> frozenset[str]:
    """``values`` as written raw, as Markdown text and in a table cell: what masking a secret in rendered Markdown
    must look for (the run's text is escaped after its own redaction may have missed it)."""
    return values | {md_text(v) for v in values} | {v.replace("|", "\\|") for v in values}

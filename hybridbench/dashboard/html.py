"""HTML pieces of the static site: one page layout, tables, charts with the command that reproduces them.

Pages work from ``file://`` with no network: plotly.js is one file beside the pages (written once, loaded by a
relative ``<script src>``) and every chart's data is inline in its page; nothing is fetched.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

import plotly.graph_objects as go

__all__ = ["PLOTLY_JS", "Page", "Raw", "chart", "command", "link", "table", "verdict_badge"]

PLOTLY_JS = "plotly.min.js"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#1b1f23}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #e1e4e8}
table{border-collapse:collapse;margin:8px 0;font-size:.9em}td,th{border:1px solid #e1e4e8;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}pre.cmd{background:#f6f8fa;padding:6px 10px;
font-size:.8em;overflow-x:auto;margin:2px 0 18px}.v-pass{color:#1a7f37;font-weight:600}
.v-fail,.v-error{color:#cf222e;font-weight:600}.v-inconclusive,.v-interrupted,.v-skip{color:#9a6700;
font-weight:600}nav a{margin-right:14px}.verdict-line{font-size:1.2em;margin:10px 0 16px}.muted{color:#6a737d}
"""


class Raw(str):
    """Markup this module built (a link, a badge): a table cell that is not escaped again."""


def verdict_badge(verdict: str, text: str = "") -> Raw:
    v = html.escape(verdict)
    return Raw(f'<span class="v-{v}">{html.escape(text or verdict)}</span>')


def link(href: str, text: str) -> Raw:
    return Raw(f'<a href="{html.escape(href, quote=True)}">{html.escape(text)}</a>')


def command(cmd: str) -> str:
    """The command that reproduces what is shown just above it."""
    return f'<pre class="cmd">$ {html.escape(cmd)}</pre>' if cmd else ""


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table; every cell is escaped except this module's own markup (``Raw``)."""

    def esc(cell: str) -> str:
        return cell if isinstance(cell, Raw) else html.escape(cell)

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c if isinstance(c, Raw) else str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def chart(fig: go.Figure, div_id: str, cmd: str) -> str:
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})
    return f'<div class="chart">{body}</div>{command(cmd)}'


class Page:
    """One HTML page, built section by section."""

    def __init__(self, title: str, *, charts: bool = True) -> None:
        self.title = title
        self.charts = charts
        self.parts: list[str] = []

    def add(self, *parts: str) -> Page:
        self.parts.extend(parts)
        return self

    def render(self) -> str:
        script = f'<script src="{PLOTLY_JS}"></script>' if self.charts else ""
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(self.title)}'
                f"</title><style>{_CSS}</style>{script}</head><body>"
                f'<nav>{link("index.html", "runs")}{link("trends.html", "trends")}</nav>'
                f"<h1>{html.escape(self.title)}</h1>{''.join(self.parts)}</body></html>")

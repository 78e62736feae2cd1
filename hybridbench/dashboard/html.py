"""HTML pieces of the static site: one page layout, tables, charts with the command that reproduces them.

Pages work from ``file://`` with no network: plotly.js is one file beside the pages (written once, loaded by a
relative ``<script src>``) and every chart's data is inline in its page; nothing is fetched.

Every string from a run directory, a config or an engine reaches a page through Jinja2 with autoescape on
(``fragment``); markup this module builds is ``Markup`` and is not escaped again. Each page carries a
Content-Security-Policy that runs only plotly.min.js and the page's own inline chart scripts, by their SHA-256:
an injected ``<script>`` or ``onerror=`` would not run even if something slipped through, and no request can
leave the page (``default-src 'none'``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2
import plotly.graph_objects as go
from markupsafe import Markup

__all__ = ["PLOTLY_JS", "Markup", "Page", "Raw", "chart", "command", "csp", "fragment", "link", "table",
           "verdict_badge"]

PLOTLY_JS = "plotly.min.js"
Raw = Markup  # markup this module built: a table cell that is not escaped again

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#1b1f23}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #e1e4e8}
table{border-collapse:collapse;margin:8px 0;font-size:.9em}td,th{border:1px solid #e1e4e8;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}pre.cmd{background:#f6f8fa;padding:6px 10px;
font-size:.8em;overflow-x:auto;margin:2px 0 18px}.v-pass{color:#1a7f37;font-weight:600}
.v-fail,.v-error{color:#cf222e;font-weight:600}.v-interrupted,.v-skip{color:#9a6700;
font-weight:600}.v-inconclusive{color:#8250df;font-weight:600;font-style:italic}
.mark{color:#9a6700;font-size:.85em;margin-left:6px}nav a{margin-right:14px}
.verdict-line{font-size:1.2em;margin:10px 0 16px}.muted{color:#6a737d}
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_TEMPLATES = {
    "badge": '<span class="v-{{ cls }}">{{ text }}</span>'
             '{% for m in marks %}<span class="mark">[{{ m }}]</span>{% endfor %}',
    "link": '<a href="{{ href }}">{{ text }}</a>',
    "command": '<pre class="cmd">$ {{ cmd }}</pre>',
    "table": "<table><thead><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr></thead><tbody>"
             "{% for row in rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</tbody></table>",
    "page": '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta http-equiv="Content-Security-Policy" content="{{ csp }}">'
            '<title>{{ title }}</title><style>{{ css }}</style>'
            '{% if charts %}<script src="{{ plotly }}"></script>{% endif %}</head><body>'
            '<nav>{{ link("index.html", "runs") }}{{ link("trends.html", "trends") }}</nav>'
            "<h1>{{ title }}</h1>{% for p in parts %}{{ p }}{% endfor %}</body></html>",
}


def fragment(source: str, **values: Any) -> Markup:
    """``source`` (a Jinja2 template) rendered with autoescape: every value is escaped unless it is Markup."""
    return Markup(_ENV.from_string(source).render(**values))


def _named(name: str, **values: Any) -> Markup:
    return fragment(_TEMPLATES[name], **values)


def verdict_badge(verdict: str, text: str = "", marks: Sequence[str] = ()) -> Markup:
    """A verdict in its colour (``inconclusive`` its own); ``marks`` say where it comes from (re-scored, ...)."""
    cls = re.sub(r"[^a-z-]", "", str(verdict).lower())[:24] or "none"
    return _named("badge", cls=cls, text=text or verdict, marks=marks)


def link(href: str, text: str) -> Markup:
    return _named("link", href=href, text=text)


def command(cmd: str) -> Markup:
    """The command that reproduces what is shown just above it."""
    return _named("command", cmd=cmd) if cmd else Markup("")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Markup:
    """A table; every cell is escaped except this module's own markup."""
    return _named("table", header=header, rows=[[c if isinstance(c, Markup) else str(c) for c in r] for r in rows])


def chart(fig: go.Figure, div_id: str, cmd: str) -> Markup:
    # plotly writes its figure JSON with "<" as \\u003c: data cannot close the script element it sits in.
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=re.sub(r"[^A-Za-z0-9_.-]", "_", div_id),
                       config={"displaylogo": False, "responsive": True})
    return Markup('<div class="chart">') + Markup(body) + Markup("</div>") + command(cmd)


_INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.S)


def csp(body: str, *, charts: bool) -> str:
    """The page's policy: nothing loads from anywhere but plotly.min.js beside it and the inline scripts in
    ``body`` (by hash); styles inline (plotly sets them); images only as data: (plotly's own icons)."""
    hashes = sorted({"'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
                     for s in _INLINE_SCRIPT.findall(body)})
    scripts = " ".join([*(["'self'"] if charts else []), *hashes]) or "'none'"
    return (f"default-src 'none'; script-src {scripts}; style-src 'unsafe-inline'; img-src data:; font-src data:; "
            "base-uri 'none'; form-action 'none'")


class Page:
    """One HTML page, built section by section."""

    def __init__(self, title: str, *, charts: bool = True) -> None:
        self.title = title
        self.charts = charts
        self.parts: list[Markup] = []

    def add(self, *parts: str) -> Page:
        # A plain str is text, escaped; markup is built with ``fragment`` and friends.
        self.parts.extend(p if isinstance(p, Markup) else Markup.escape(p) for p in parts)
        return self

    def render(self) -> str:
        body = "".join(self.parts)
        return _named("page", csp=csp(body, charts=self.charts), title=self.title, css=Markup(_CSS),
                      charts=self.charts, plotly=PLOTLY_JS, link=link, parts=self.parts)

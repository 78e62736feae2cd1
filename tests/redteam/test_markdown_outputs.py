"""compare.md and report.md, which a pull request's job summary shows (ci/pr.yml cats both under the PR summary),
rendered as CommonMark with GFM tables: text from a run (the build's own version string, a server log's tail in a
check detail, an infrastructure error) stays text; it adds no image, link or HTML, and hides no verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hostile import FIXTURE, clean, cli, load, make_run, second_repeat
from markdown_it import MarkdownIt

from hybridbench.config.redact import scrub
from hybridbench.report.markdown import render_report
from hybridbench.report.md_text import md_forms, md_text

pytestmark = pytest.mark.redteam

EVIL = "0.5.24` ![PASS](https://evil.test/p.png) <img src=https://evil.test/i.png> [ok](https://evil.test) `"


def _html(md: str) -> str:
    return str(MarkdownIt("commonmark").enable("table").render(md))


def _clean_html(html: str) -> None:
    assert "<img" not in html and 'href="https://evil' not in html, html


def test_a_build_version_string_in_compare_md_stays_text(tmp_path: Path) -> None:
    # The candidate's label carries its build's version (a pull request's SGLang reports its own): a backtick in it
    # closed the label's code span and the image after it showed on the job summary.
    def version(b: dict[str, Any]) -> None:
        b["provenance"]["engine"]["version"] = EVIL

    base = second_repeat(make_run(tmp_path, "main", night=1))
    cand = second_repeat(make_run(tmp_path, "pr", night=2, bundle=version), stretch=1.02)
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    html = _html((cand / "compare" / "compare.md").read_text())
    _clean_html(html)
    assert "evil.test/p.png" in html  # shown, as text
    assert html.count("<tr>") == 1 + len(load(cand / "compare" / "compare.json")["deltas"])


def _bundle(**edits: Any) -> dict[str, Any]:
    bundle = load(FIXTURE / "bundle.json")
    bundle.update(edits)
    return bundle


def test_a_server_log_tail_in_a_check_detail_stays_text_in_report_md() -> None:
    bundle = _bundle(verdict="fail")
    bundle["checks"][0].update(status="fail", detail=f"server log tail: {EVIL} | **PASS**")
    html = _html(render_report(bundle))
    _clean_html(html)
    assert "<strong>PASS</strong>" not in html
    row = next(r for r in html.split("<tr>") if "server log tail" in r)
    assert row.count("<td>") == 6  # one row, the detail in one cell


def test_an_infrastructure_error_cannot_hide_the_verdict_below_it() -> None:
    # The whole message is shown; one with a blank line and "<!--" opened an HTML comment that hid every line
    # after it on GitHub, the verdict included.
    bundle = _bundle(verdict="error", infrastructure_error="server died\n\n<!-- the rest is hidden\n")
    html = _html(render_report(bundle))
    assert "<!--" not in html
    assert html.rstrip().endswith("<p>verdict: <strong>error</strong></p>"), html[-300:]


def test_a_secret_is_masked_in_the_form_markdown_writes_it() -> None:
    secret = "hf_*secret*|0123"
    text = f"| gsp | {md_text('token ' + secret)} | raw {secret} |"
    masked = scrub(text, md_forms(frozenset({secret})))
    assert "secret" not in masked, masked


def test_question_ids_and_command_line_overrides_stay_text_in_report_md() -> None:
    # A local data set's question ids (lost/gained against cache-off) and the run's own scoring overrides were
    # pasted raw: an id could add an image; an override with a backtick closed its code span.
    bundle = _bundle(accuracy=[{"arm": "lru", "pass": "cold", "correct": 1, "questions": 2, "cached_tokens": 0,
                                "lost": ["q1 ![PASS](https://evil.test/p.png)"], "gained": []}])
    bundle["provenance"]["command"] = f"python -m hybridbench +experiment=smoke checks.ttft_regression=0.5{EVIL}"
    md = render_report(bundle)
    html = _html(md)
    _clean_html(html)
    assert "evil.test/p.png" in html and "Scoring set on its command line" in md

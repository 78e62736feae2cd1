"""Hypothesis over what a run directory can hold: names with markup and control characters (run directory,
model, engine version, check detail, created) and arbitrary bytes in its JSON files. Whatever it holds, the
store reads every other run, the dashboard escapes every string, and ``results ls`` prints no control
character."""

from __future__ import annotations

import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hostile import clean, cli, make_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridbench.dashboard.site import _run_page
from hybridbench.results.store import load_store

pytestmark = [pytest.mark.redteam, pytest.mark.fuzz]

# Markup, quotes, controls, bidi overrides and plain text, mixed.
_PIECES = st.sampled_from(["<", ">", "&", '"', "'", "<script>", "</script>", "onerror=", "\x1b[2J", "\x07", "\x00",
                           "\u202e", "\u2028", "\\", "javascript:", "{{ 7*7 }}", "{% raw %}", "é", "日本"])
TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=6)), min_size=1, max_size=6).map("".join)
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _dir_name(text: str) -> str:
    name = text.replace("/", "_").replace("\x00", "_").strip() or "x"
    return "x" + name[:60] if name in (".", "..") or name.startswith(".") else name[:60]


class _Tags(HTMLParser):
    """The page's element structure: each tag with its attribute names (values are text, and may differ)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, tuple[str, ...]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, tuple(sorted(k for k, _ in attrs))))


def _structure(page: str) -> list[tuple[str, tuple[str, ...]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


@SETTINGS
@given(run_name=TEXT, model=TEXT, version=TEXT, detail=TEXT, created=TEXT)
def test_any_names_are_escaped_in_pages_and_shown_in_the_terminal(run_name: str, model: str, version: str,
                                                                 detail: str, created: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        make_run(root, "good", night=1)
        name = _dir_name(run_name)
        hostile = make_run(root, name, night=2, bundle=lambda b: (
            b["provenance"]["engine"].update(version=version), b["checks"][0].update(detail=detail)),
            plan=lambda p: p["config"].update(model={**p["config"]["model"], "name": model}))
        store = load_store(root)
        assert set(store.loaded) == {"good", name}
        # Whatever the names hold, the hostile run's page has the plain run's elements, no more: nothing injected.
        assert _structure(_run_page(store.loaded[name], name)) == _structure(_run_page(store.loaded["good"], "good"))
        proc = cli("hybridbench.results", "ls", root)
        clean(proc)
        assert proc.returncode == 0
        assert not any((ord(c) < 32 and c != "\n") or 0x7f <= ord(c) < 0xa0 for c in proc.stdout + proc.stderr)
        # A damaged created on the same run is its skipped line (or a time it reads); the good run still lists.
        bundle = (hostile / "bundle.json").read_text()
        (hostile / "bundle.json").write_text(bundle.replace('"created": "', '"created": "' + created.replace(
            "\\", "").replace('"', ""), 1))
        again = load_store(root)
        assert "good" in again.loaded and len(again.loaded) + len(again.skipped) == 2


@settings(max_examples=15, deadline=None)
@given(data=st.binary(max_size=400), which=st.sampled_from(["bundle.json", "plan.json", "records.jsonl"]),
       keep=st.integers(min_value=0, max_value=4000))
def test_any_bytes_in_a_run_file_are_that_runs_skipped_line(data: bytes, which: str, keep: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        make_run(root, "good", night=1)
        bad = make_run(root, "bad", night=2)
        path = bad / which
        path.write_bytes(path.read_bytes()[:keep] + data)  # cut short, then garbage
        store = load_store(root)
        assert "good" in store.loaded
        assert ("bad" in store.loaded) != any(line.startswith(f"skipped {bad}:") for line in store.skipped)
        for rel, run in store.loaded.items():
            _run_page(run, rel)

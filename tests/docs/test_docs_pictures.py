"""The dashboard pictures the docs show are the browser tests' own screenshots, and every evidence page is dated
and names the commit it measured."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_docs_show_exactly_the_screenshots_the_browser_test_takes() -> None:
    taken = set(re.findall(r'_keep_screenshot\(page, "([\w.-]+\.png)"',
                           (ROOT / "tests" / "dashboard" / "test_dashboard_browser.py").read_text()))
    assert taken, "the browser test no longer keeps screenshots"
    on_disk = {p.name for p in DOCS.glob("*.png")}
    image = re.compile(r"!\[[^\]]*\]\(([^)]+\.png)\)")
    shown = {Path(m).name for page in DOCS.rglob("*.md") for m in image.findall(page.read_text())}
    assert on_disk == taken, f"docs/*.png are the browser test's screenshots: extra {on_disk - taken}, " \
                             f"missing {taken - on_disk}"
    assert shown == taken, f"every screenshot shown, nothing else: not shown {taken - shown}, unknown {shown - taken}"


def test_every_evidence_page_is_dated_and_stamped_with_a_commit() -> None:
    pages = [p for p in (DOCS / "evidence").glob("*.md") if p.name != "index.md"]
    assert len(pages) >= 5
    bad = [p.name for p in pages
           if not (re.search(r"20\d\d-\d\d-\d\d", p.name + p.read_text())
                   and re.search(r"`[0-9a-f]{7,40}`", p.read_text()))]
    assert not bad, f"evidence pages without a date and a commit: {bad}"

"""The docs site builds offline with --strict, and a broken link or an orphan page fails the build."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]'; the test extra pulls it)")


def build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    # No -q: it drops the warnings --strict counts, and a broken link would pass.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # its end-of-life banner, not a build problem
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, timeout=300, check=False, env=env)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()


def test_the_site_fetches_nothing_at_build_time() -> None:
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert cfg["theme"]["font"] is False  # Google fonts would be fetched at build time
    assert [p if isinstance(p, str) else next(iter(p)) for p in cfg.get("plugins", [])] == ["search"]


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    page = root / "docs" / "guides" / "compare.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr + done.stdout


def test_every_page_is_in_the_nav() -> None:
    nav = re.findall(r"[\w./-]+\.md", (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1].split("\n# ", 1)[0])
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == set(nav), f"pages not in the nav: {pages - set(nav)}; nav without a page: {set(nav) - pages}"

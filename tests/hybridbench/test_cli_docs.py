"""docs/reference/cli.md is what the parsers print today (regenerate: python -m hybridbench.cli_docs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridbench.cli import COMMANDS
from hybridbench.cli_docs import render

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_reference_is_generated_from_the_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    page = render() + "\n"
    assert page == (ROOT / "docs" / "reference" / "cli.md").read_text(), \
        "docs/reference/cli.md is stale: python -m hybridbench.cli_docs > docs/reference/cli.md"
    for name in COMMANDS:
        assert f"## hybridbench {name}" in page
    assert "usage: hybridbench plan" in page and "--forecast-requests N" in page

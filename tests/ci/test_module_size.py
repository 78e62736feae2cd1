"""The code rule "small modules named for what they hold (< 400 lines)", kept by CI rather than by review: a
module that grows past it fails here, naming itself, before it lands."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400


def test_every_package_module_is_under_400_lines() -> None:
    modules = [p for pkg in ("hybridbench", "reference_impl") for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(modules) > 100  # the packages are where this test thinks they are
    too_long = {str(p.relative_to(ROOT)): n for p in modules
                if (n := len(p.read_text(encoding="utf-8").splitlines())) >= LIMIT}
    assert not too_long, f"modules of {LIMIT} lines or more (split them by what they hold): {too_long}"

"""pytest imports test files without packages by basename ("rootdir/prepend" import mode): two files named
alike in different folders make one of them an import-file-mismatch collection error, and only on the xdist
worker that happens to import both. Caught here, naming the pair, rather than by chance in CI."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def duplicate_basenames(tests: Path) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = defaultdict(list)
    for p in sorted(tests.rglob("*.py")):
        if p.name.startswith("test_") or p.name.endswith("_test.py"):
            seen[p.name].append(str(p.relative_to(tests)))
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_no_two_test_files_share_a_basename() -> None:
    assert len(list((ROOT / "tests").rglob("test_*.py"))) > 50  # the tests are where this looks
    assert not duplicate_basenames(ROOT / "tests"), duplicate_basenames(ROOT / "tests")


def test_the_rule_finds_a_shared_basename(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_sizing.py").write_text("")
    assert duplicate_basenames(tmp_path) == {"test_sizing.py": ["a/test_sizing.py", "b/test_sizing.py"]}

"""Nothing in the repository points outside it: no design or research notes, no sibling checkout, no seed numbers.
Sources are cited by their public address; what users need from notes is written into docs/."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Built from parts so this file's own source never matches its patterns.
_D, _R, _S = "DESIGN", "research", "shared"
FORBIDDEN = [
    (re.compile(_D + r"(\.md| §)"), "a design note outside the repository"),
    (re.compile(r"\b" + _R + r"/\w"), "a research note outside the repository"),
    (re.compile(r"\b\w+\.md §\d"), "a section of a note outside the repository"),
    (re.compile(r"\.\./" + _S + r"\b|\b" + _S + r"/(seeds|fixtures|" + _R + r")\b|/work/" + _S), "a sibling checkout"),
    (re.compile(r"\b[Ss]eeds? 00\d"), "a seed number (cite the pull request or paper it was)"),
]


def offending_lines(text: str) -> list[tuple[int, str]]:
    return [(n, why) for n, line in enumerate(text.splitlines(), start=1)
            for pattern, why in FORBIDDEN if pattern.search(line)]


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / f for f in listed if (ROOT / f).is_file() and (ROOT / f).suffix not in (".png", ".gz", ".whl")]


def test_nothing_in_the_repository_refers_outside_it() -> None:
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {why}" for n, why in offending_lines(text)]
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_each_kind_of_outside_reference_is_caught() -> None:
    planted = ["see " + _D + ".md §4", "(" + _R + "/sglang.md)", "sglang.md " + "§2 flag table",
               "../" + _S + "/fixtures/sglang-cpu", "as seed " + "001 measured"]
    assert sorted({n for n, _ in offending_lines("\n".join(planted))}) == [1, 2, 3, 4, 5]
    assert offending_lines("SGLang PR #11214 (https://github.com/sgl-project/sglang/pull/11214); seed=3; "
                           "docs/engines/tokenspeed.md; arXiv 2411.19379") == []

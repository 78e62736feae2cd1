"""benchmarks/sglang_semantics_by_release.py refuses what it cannot read before any work: one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sglang_semantics_by_release.py"


@pytest.mark.parametrize(("args", "says"), [
    (["{tmp}"], "0.5.9/sglang/srt missing: unzip sglang 0.5.9's wheel there or pass --download"),
    (["{tmp}", "--show", "-1"], "argument --show: must be >= 0, got -1"),
    (["{tmp}/nowhere"], "argument folder: {tmp}/nowhere: no such directory (pass --download to fill a new one)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), *(a.format(tmp=tmp_path) for a in args)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert says.format(tmp=tmp_path) in proc.stderr


def test_a_missing_release_is_named_before_any_release_is_compared(tmp_path: Path) -> None:
    for version in ("0.5.9", "0.5.16", "0.5.23"):  # the proven three present (empty), the asked one not
        (tmp_path / version / "sglang" / "srt").mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--releases", "0.5.20"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert "0.5.20/sglang/srt missing" in proc.stderr and "Traceback" not in proc.stderr

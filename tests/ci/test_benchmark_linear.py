"""benchmarks/whole_commands.py's linearity target reads the request counts the simulator really prints and
misses when the cost per request grows with the number of requests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from whole_command import Summary  # noqa: E402
from whole_commands import SIMULATE, _linear  # noqa: E402

EXAMPLE = ROOT / "examples" / "swebench_sps=1_art=5_nums=20.jsonl"


@pytest.fixture(scope="module")
def printed() -> str:
    """What ``python -m reference_impl.simulate`` prints (the target parses its ``completed`` line)."""
    proc = subprocess.run([sys.executable, "-m", "reference_impl.simulate", str(EXAMPLE), "--tp", "4",
                           "--max-concurrency", "4"], capture_output=True, text=True, check=True, cwd=ROOT)
    return proc.stdout


def summary(cpu_s: float) -> Summary:
    return Summary("ours", 1, cpu_s, cpu_s, 300.0)


@pytest.mark.parametrize(("whole_cpu", "met"), [(10.0, True), (11.9, True), (12.1, False), (20.0, False)])
def test_the_whole_preset_may_cost_at_most_its_share_per_request(printed: str, whole_cpu: float, met: bool) -> None:
    # The same output on both sides: equal request counts, so the ratio is the CPU seconds' ratio.
    figure, ok = _linear({SIMULATE: (summary(whole_cpu), printed)}, SIMULATE, 1.2)(summary(10.0), printed)
    assert ok is met, figure
    assert f"{whole_cpu / 10.0:.2f}x" in figure


def test_without_the_whole_preset_or_a_request_count_the_target_misses(printed: str) -> None:
    figure, ok = _linear({}, SIMULATE, 1.2)(summary(1.0), printed)
    assert not ok and "needs the target" in figure
    figure, ok = _linear({SIMULATE: (summary(1.0), "no summary")}, SIMULATE, 1.2)(summary(1.0), printed)
    assert not ok and "completed" in figure

"""The benchmarks' trace-cache states: a cold run never finds what an earlier run stored, a warm run always does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from trace_cache_runs import TraceCacheRuns
from whole_command import alternate

# Says whether its cache folder was there when it started, then makes it as a first read would.
PROBE = ("import os, pathlib; d = pathlib.Path(os.environ['HYBRIDBENCH_TRACE_CACHE']); print(d.is_dir()); "
         "d.mkdir(parents=True, exist_ok=True)")


@pytest.mark.parametrize(("mode", "found"), [("cold", "False"), ("warm", "True")])
def test_each_run_meets_its_state(tmp_path: Path, mode: str, found: str) -> None:
    runs = TraceCacheRuns(mode, tmp_path)
    argv = [sys.executable, "-c", PROBE]
    seen: list[str] = []
    for side in ("ours", "base"):
        runs.prime(side, argv, None, expect_entry=False)

    def env_for(label: str) -> dict[str, str]:
        env = runs.env(label)
        seen.append(label)
        return env

    outputs: dict[str, str] = {}
    for _ in range(3):
        alternate({"ours": (argv, None), "base": (argv, None)}, 1, outputs, env_for=env_for)
        assert outputs["ours"].strip() == outputs["base"].strip() == found
    assert seen == ["ours", "base"] * 3
    assert runs.folder("ours") != runs.folder("base")  # the sides never share a cache
    runs.clean()
    assert not list(tmp_path.glob("trace-cache-*"))


def test_a_warm_prime_that_leaves_no_entry_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="left no trace-cache entry"):
        TraceCacheRuns("warm", tmp_path).prime("ours", [sys.executable, "-c", PROBE], None)  # stores nothing
    entry = PROBE + "; (d / 'e.trace').write_text('x')"
    TraceCacheRuns("warm", tmp_path).prime("ours", [sys.executable, "-c", entry], None)


def test_a_failed_prime_says_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"priming .* exited 3"):
        TraceCacheRuns("warm", tmp_path).prime("ours", [sys.executable, "-c", "raise SystemExit(3)"], None)

"""benchmarks/ci_time_by_file.py: the plugin records each test's wall and CPU seconds, its children's apart, and the
script ranks the files by wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SUITE = '''
import subprocess, sys, time

def test_waits():
    time.sleep(0.3)

def test_starts_a_busy_child():
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
'''


def test_the_plugin_splits_own_and_children_cpu_and_the_script_ranks_files(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SUITE)
    times = tmp_path / "times"
    times.mkdir()
    # not this session's xdist worker name (gw0...): the inner pytest runs in one process of its own
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
           "HYBRIDBENCH_TEST_TIMES": str(times), "PYTHONPATH": str(ROOT / "benchmarks")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "ci_time_by_file", "-p", "no:cacheprovider",
                           str(tmp_path / "test_sample.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["id"].split("::")[1]: r for r in map(json.loads, (times / "main.jsonl").read_text().splitlines())}
    assert set(rows) == {"test_waits", "test_starts_a_busy_child"}
    assert rows["test_waits"]["wall"] >= 0.3 and rows["test_waits"]["children"] == 0
    busy = rows["test_starts_a_busy_child"]
    assert busy["children"] > 0.05 and busy["children"] > busy["self"]  # the child's CPU, not the test's own
    report = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ci_time_by_file.py"), str(times)],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| test_sample.py | 2 |" in report and "workers: main " in report


def test_a_folder_without_records_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ci_time_by_file.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: {tmp_path}: no per-worker *.jsonl files (run pytest with -p ci_time_by_file first)"]

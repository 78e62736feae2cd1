"""Where the test command's time goes, file by file: wall seconds, the test process's own CPU seconds and the CPU
seconds of the processes it started and waited for (servers, CLI runs, release venvs).

As a pytest plugin it writes one JSON line per test into ``$HYBRIDBENCH_TEST_TIMES`` (a directory; one file per
xdist worker)::

    HYBRIDBENCH_TEST_TIMES=/tmp/times PYTHONPATH=benchmarks .venv/bin/python -m pytest -p ci_time_by_file \
        -q -m "not slow or vllm or tokenspeed" -n 2 --dist loadfile --no-loadscope-reorder

then, as a script, it prints the files by wall time (``--top N``) and each worker's total::

    python benchmarks/test_time_by_file.py /tmp/times --top 30

Wall time beyond the two CPU columns is time a test waited (a timeout running out, a modelled clock, a browser)
or stood in the run queue on a busy machine; a child killed rather than waited for (a server stopped with SIGKILL)
counts in neither CPU column. ``tests/conftest.py``'s ``LONGEST_FIRST`` is the head of this table.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hybridbench.errors import OneLineParser

_ENV = "HYBRIDBENCH_TEST_TIMES"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    folder = os.environ.get(_ENV)
    start = (time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN))
    yield
    if not folder:
        return
    row = {"id": item.nodeid, "wall": time.monotonic() - start[0], "self": _cpu(resource.RUSAGE_SELF) - start[1],
           "children": _cpu(resource.RUSAGE_CHILDREN) - start[2]}
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(folder) / f"{worker}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def by_file(folder: Path) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per file [wall, self CPU, children CPU, tests], and per worker its tests' wall seconds."""
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    workers: dict[str, float] = {}
    for path in sorted(folder.glob("*.jsonl")):
        rows: list[dict[str, Any]] = [json.loads(line) for line in path.read_text().splitlines() if line]
        workers[path.stem] = sum(r["wall"] for r in rows)
        for r in rows:
            entry = files[r["id"].split("::", 1)[0]]
            for i, key in enumerate(("wall", "self", "children")):
                entry[i] += r[key]
            entry[3] += 1
    return dict(files), workers


def main() -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help=f"the directory ${_ENV} named")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if not args.folder.is_dir() or not any(args.folder.glob("*.jsonl")):
        parser.error(f"{args.folder}: no per-worker *.jsonl files (run pytest with -p ci_time_by_file first)")
    files, workers = by_file(args.folder)
    print("| file | tests | wall s | own CPU s | children CPU s |\n|---|---|---|---|---|")
    for name, (wall, own, children, tests) in sorted(files.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"| {name} | {tests:.0f} | {wall:.1f} | {own:.1f} | {children:.1f} |")
    total = [sum(v[i] for v in files.values()) for i in range(3)]
    print(f"\nall {len(files)} files: wall {total[0]:.0f} s, own CPU {total[1]:.0f} s, children CPU {total[2]:.0f} s")
    print("workers: " + ", ".join(f"{w} {s:.0f} s" for w, s in workers.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every test session reads traces through a trace cache of its own, never the user's ``~/.cache`` one, and
starts its commands from compiled sources."""

from __future__ import annotations

import compileall
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hybridbench", "reference_impl", "workloads")


def pytest_sessionstart(session: pytest.Session) -> None:
    # With PYTHONDONTWRITEBYTECODE set (as on the machines CI runs on) no import writes a .pyc, so every server and
    # CLI process the tests start compiled the project's modules again (test_cli.py: 86.9 -> 76.2 CPU s with this).
    # compileall writes them whatever that variable says. Once, in the process that starts the xdist workers (its
    # sessionstart runs before theirs start); the workers would only find it done.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=2, workers=1)


@pytest.fixture(autouse=True, scope="session")
def _own_trace_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # os.environ, not monkeypatch: the commands tests start (replay, simulate, the harness) inherit it
    before = os.environ.get("HYBRIDBENCH_TRACE_CACHE")
    if before is None:
        os.environ["HYBRIDBENCH_TRACE_CACHE"] = str(tmp_path_factory.mktemp("trace-cache"))
    yield
    if before is None:
        os.environ.pop("HYBRIDBENCH_TRACE_CACHE", None)


# The files that take longest, longest first (measured on a 2-core runner: `--durations`, per file). With
# `--no-loadscope-reorder` xdist hands files out in collection order; its own order (most tests first) left files of
# a few end-to-end runs (the accuracy experiment's 3 tests take two minutes) for last, one worker busy while the
# other waited. Longest first leaves the many short files to even out the end. A file missing here only runs in
# collection order; a stale entry only orders, never selects.
LONGEST_FIRST = (
    "tests/vllm_cpu/test_vllm_engine.py",
    "tests/hybridbench/test_accuracy_experiment.py",
    "tests/vllm_cpu/test_vllm_gated_delta.py",
    "tests/vllm_cpu/test_vllm_output_ids.py",
    "tests/hybridbench/test_experiments_default_engine.py",
    "tests/vllm_cpu/test_vllm_config_resolution.py",
    "tests/dashboard/test_dashboard_browser.py",
    "tests/sglang_oracle/test_sglang_extra_buffer.py",
    "tests/hybridbench/test_engines_and_experiments.py",
    "tests/docs/test_docs_commands.py",
    "tests/tokenspeed/test_tokenspeed_parsers.py",
    "tests/hybridbench/test_cli.py",
    "tests/hybridbench/test_prefill_overhead.py",
    "tests/sglang_oracle/test_sglang_launch_resolution.py",
    "tests/sglang_oracle/test_sglang_tp_split.py",
    "tests/hybridbench/test_rescore.py",
    "tests/hybridbench/test_reference_engine.py",
    "tests/reference_impl/server/test_server_faults.py",
    "tests/hybridbench/test_sglang_recorded.py",
    "tests/dashboard/test_results_store.py",
    "tests/sglang_oracle/test_sglang_differential.py",
    "tests/reference_impl/server/test_server_modelled.py",
    "tests/ci/test_gpu_budgets.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep order

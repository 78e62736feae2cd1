"""The plan's log-level refusals (hybridbench.engines.log_level) against each TokenSpeed release's own start-up.

For 0.1.0 and 0.1.1, in the parser env (tests/tokenspeed/probe_log_level.py): ``ts serve``'s own splitter says which
half gets a ``--log-level`` (the engine's: the gateway keeps its own default), the engine's parser which level it
keeps, and its ``configure_logger`` whether the scheduler's loggers then write info records or stop the server. The
two lines hybridbench reads (the scheduler's "Scheduler config" page, the "#cached-token" prefill lines) are the
release's ``logger.info`` calls. The plan must refuse exactly the levels at which they are not written, and those
the release cannot resolve. Build with ``bash tests/tokenspeed/build_env.sh``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tokenspeed_env import HERE, PYTHON, pythonpath, release, require

from hybridbench.engines.log_level import LEVELS, TOKENSPEED_LOG_READS, log_level_refusal
from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_VERSIONS

pytestmark = [pytest.mark.tokenspeed, pytest.mark.slow]

require(*map(release, TOKENSPEED_VERSIONS), what="parser env")

LEVEL_VALUES = [*LEVELS, *(n.lower() for n in LEVELS), "Warning", "verbose", "20", "basic_format", "trace",
                ""]
# engine.extra_args -> the level the engine keeps from them
CASES: list[tuple[list[str], str]] = [
    ([], "info"),
    (["--log-level", "warning"], "warning"),
    (["--log-level=error"], "error"),
    (["--log-level", "debug", "--log-level", "critical"], "critical"),  # the last one given
    (["--log-level", "warning", "--log-level=info"], "info"),
    (["--log-le", "warning"], "info"),  # not a name ts serve routes to the engine: the gateway's, not read
]
# The files that write the lines hybridbench reads (runtime/engine/event_loop.py; the prefill line moved in 0.1.1)
LINES = {"0.1.0": {"Scheduler config": "runtime/engine/event_loop.py",
                   "#cached-token": "runtime/execution/model_executor.py"},
         "0.1.1": {"Scheduler config": "runtime/engine/event_loop.py", "#cached-token": "runtime/engine/batch_log.py"}}


def probe(version: str, argvs: list[list[str]], tmp_path: Path) -> dict[str, Any]:
    path = pythonpath(release(version))
    asked = {"argvs": argvs, "levels": LEVEL_VALUES, "config_path": str(tmp_path / "logging.json")}
    proc = subprocess.run([str(PYTHON), str(HERE / "probe_log_level.py")], input=json.dumps(asked),
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=300,
                          check=False, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def logged_at(source: Path, needle: str) -> set[str]:
    """The logger methods whose call has ``needle`` in its message."""
    return {n.func.attr for n in ast.walk(ast.parse(source.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "logger"
            and any(isinstance(c, ast.Constant) and isinstance(c.value, str) and needle in c.value
                    for c in ast.walk(n))}


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_the_plan_refuses_exactly_the_levels_that_hide_the_scheduler_lines(version: str, tmp_path: Path) -> None:
    out = probe(version, [["--model", "m", *extra] for extra, _ in CASES], tmp_path)
    writes = out["writes_info"]
    for value in LEVEL_VALUES:
        why = log_level_refusal(TOKENSPEED_LOG_READS, ["--log-level", value], {})
        assert (why == "") == (writes[value] is True), (value, writes[value], why)
        assert ("not a logging level" in why) == isinstance(writes[value], str), (value, writes[value], why)
    assert writes["info"] is True and writes["debug"] is True and writes["warning"] is False  # the cases exercise
    for (extra, kept), said in zip(CASES, out["routed"], strict=True):
        assert said["error"] == "" and said["log_level"] == kept, (extra, said)
        assert not any(a.startswith("--log-level") for a in said["gateway"]), said  # the gateway's own is not given
        assert (log_level_refusal(TOKENSPEED_LOG_READS, extra, {}) == "") == writes[kept], (extra, kept)
    # a logging config file replaces the level: at --log-level debug, its WARNING root hides the lines
    assert out["with_config_file_at_debug"] is False
    assert log_level_refusal(TOKENSPEED_LOG_READS, ["--log-level", "debug"],
                             {"TOKENSPEED_LOGGING_CONFIG_PATH": str(tmp_path / "logging.json")})


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_the_lines_hybridbench_reads_are_info_records(version: str) -> None:
    for line, path in LINES[version].items():
        assert logged_at(release(version) / "tokenspeed" / path, line) == {"info"}, (version, line)

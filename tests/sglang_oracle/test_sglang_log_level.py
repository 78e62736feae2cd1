"""The plan's log-level refusals (hybridbench.engines.log_level) against each SGLang release's own start-up.

For 0.5.9, 0.5.16 and 0.5.23, in the release's venv (tests/sglang_oracle/log_level_probe.py): its parser (after its own
``--config`` merge) says which level a command line keeps, and its ``configure_logger`` says whether the scheduler's
logger then writes info records or stops the server; the lines hybridbench reads are the release's ``logger.info``
calls (read from its source). The plan must refuse exactly the levels at which they are not written, and the levels
the release cannot resolve. Needs the venvs from ``tests/sglang_oracle/build_env.sh``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

import pytest
import warm_release
from oracle_client import env_home, env_python, env_ready

from hybridbench.engines.log_level import LEVELS, SGLANG_LOG_READS, log_level_refusal

pytestmark = pytest.mark.sglang

HERE = Path(__file__).resolve().parent
RELEASES = ("0.5.9", "0.5.16", "0.5.23")
# Every name the plan knows, in the cases a user may write, and values no release resolves to a level.
LEVEL_VALUES = [*LEVELS, *(n.lower() for n in LEVELS), "Warning", "verbose", "20", "basic_format", "trace",
                ""]
# engine.extra_args -> the level the release keeps from it ("" for its default, None where its parser refuses them)
CASES: list[tuple[list[str], str | None]] = [
    ([], "info"),
    (["--log-level", "warning"], "warning"),
    (["--log-level=error"], "error"),
    (["--log-level", "debug", "--log-level", "critical"], "critical"),  # the last one given
    (["--log-level", "warning", "--log-level=info"], "info"),
    (["--log-level-http", "warning"], "info"),  # uvicorn's logger only
    (["--log-lev", "warning"], None),  # ambiguous with --log-level-http: no abbreviation reaches it
]
# The release's files that write the lines hybridbench reads, and the lines
SOURCES = {"0.5.9": "managers/scheduler_metrics_mixin.py"}
LINES = ("Prefill batch", "Decode batch")


def probe(version: str, argvs: list[list[str]], tmp_path: Path) -> dict[str, Any]:
    if not env_ready(version):
        # CI (HYBRIDBENCH_REQUIRE_SGLANG): a missing env fails, never skips, as in the tier's other files
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    asked = {"argvs": argvs, "levels": LEVEL_VALUES, "config_path": str(tmp_path / "logging.json")}
    proc = warm_release.run(env_python(version), [str(HERE / "log_level_probe.py")], input=json.dumps(asked),
                            timeout=600, env=warm_release.oracle_env(), cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def logged_at(source: Path, needle: str) -> set[str]:
    """The logger methods that write ``needle``: the calls it is an argument of, else (a message built first) every
    logger call of the smallest function holding it."""
    tree = ast.parse(source.read_text())

    def holds(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and needle in n.value
                   for n in ast.walk(node))

    def logger_calls(node: ast.AST) -> list[ast.Call]:
        return [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "logger"]

    direct = {c.func.attr for c in logger_calls(tree) if holds(c)}
    if direct:
        return direct
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and holds(n)]
    smallest = min(funcs, key=lambda f: (f.end_lineno or 0) - f.lineno)
    return {c.func.attr for c in logger_calls(smallest)}


@pytest.mark.parametrize("version", RELEASES)
def test_the_plan_refuses_exactly_the_levels_that_hide_the_batch_lines(version: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "server.yaml").write_text("log-level: warning\n")
    config = ["--config", str(tmp_path / "server.yaml")]
    out = probe(version, [["--model-path", "m", *extra] for extra, _ in CASES] + [["--model-path", "m", *config]],
                tmp_path)
    writes = out["writes_info"]
    for value in LEVEL_VALUES:
        why = log_level_refusal(SGLANG_LOG_READS, ["--log-level", value], {})
        assert (why == "") == (writes[value] is True), (value, writes[value], why)
        assert ("not a logging level" in why) == isinstance(writes[value], str), (value, writes[value], why)
    assert writes["info"] is True and writes["debug"] is True and writes["warning"] is False  # the cases exercise
    *parsed, from_file = out["parsed"]
    for (extra, kept), said in zip(CASES, parsed, strict=True):
        if kept is None:
            assert "ambiguous option" in said["error"], (extra, said)
            continue
        assert said["error"] == "" and said["log_level"] == kept, (extra, said)
        assert (log_level_refusal(SGLANG_LOG_READS, extra, {}) == "") == writes[kept], (extra, kept)
    # --config's YAML gives the level the line does not show: refused whatever it holds
    assert from_file == {"error": "", "log_level": "warning", "log_level_http": None}, from_file
    assert log_level_refusal(SGLANG_LOG_READS, config, {}).startswith("engine.extra_args has --config")
    # a logging config file replaces the level: at --log-level debug, its WARNING root hides the lines
    assert out["with_config_file_at_debug"] is False
    assert log_level_refusal(SGLANG_LOG_READS, ["--log-level", "debug"],
                             {"SGLANG_LOGGING_CONFIG_PATH": str(tmp_path / "logging.json")})


@pytest.mark.parametrize("version", RELEASES)
def test_the_lines_hybridbench_reads_are_info_records(version: str) -> None:
    root = env_home() / f"sglang-{version}"
    [srt] = root.glob("lib/python*/site-packages/sglang/srt")
    source = srt / SOURCES.get(version, "managers/scheduler_components/metrics_reporter.py")
    for line in LINES:
        assert logged_at(source, line) == {"info"}, (version, line)
    tree_cache = [p for p in srt.glob("mem_cache/*.py") if "Tree cache initialized" in p.read_text()]
    for path in tree_cache:  # 0.5.9 has no such line (startup_cache_impl reads none there)
        assert logged_at(path, "Tree cache initialized") == {"info"}, path
    assert bool(tree_cache) == (version != "0.5.9")

"""Run in an SGLang release's venv (tests/sglang_oracle/test_sglang_log_level.py): what the release's own start-up
makes of a log level. Input (stdin, JSON): ``{"argvs": [[...], ...], "levels": [...]}``. Output (last stdout line,
JSON): per argv, the release's parser's verdict after ``prepare_server_args``' own ``--config`` merge (its error, or
the ``log_level`` / ``log_level_http`` it keeps); per level, whether the scheduler's logger writes info records after
the release's ``configure_logger`` at that level (or the exception it stops with), with and without
``SGLANG_LOGGING_CONFIG_PATH``.
"""

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import types

from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.common import configure_logger

try:  # 0.5.23 moved it under utils
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
except ImportError:
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger

SCHEDULER = "sglang.srt.managers.scheduler"  # a logger of the process that writes the batch lines


def parsed(argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        if "--config" in argv:  # as prepare_server_args does before parsing
            argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        with contextlib.redirect_stderr(err):
            raw = parser.parse_args(argv)
    except SystemExit:
        return {"error": (err.getvalue().strip().splitlines() or ["exit"])[-1]}
    return {"error": "", "log_level": raw.log_level, "log_level_http": raw.log_level_http}


def writes_info(level):
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            configure_logger(types.SimpleNamespace(log_level=level))
    except Exception as exc:  # what the server would stop with at start-up
        return type(exc).__name__
    return logging.getLogger(SCHEDULER).isEnabledFor(logging.INFO)


def main():
    asked = json.load(sys.stdin)
    out = {"parsed": [parsed(argv) for argv in asked["argvs"]],
           "writes_info": {level: writes_info(level) for level in asked["levels"]}}
    # A logging config file replaces the level: one that keeps only warnings, under --log-level debug.
    path = asked["config_path"]
    with open(path, "w") as fh:
        json.dump({"version": 1, "root": {"level": "WARNING"}}, fh)
    os.environ["SGLANG_LOGGING_CONFIG_PATH"] = path
    out["with_config_file_at_debug"] = writes_info("debug")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

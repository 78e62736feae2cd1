"""Run in the TokenSpeed parser env (tests/tokenspeed/test_tokenspeed_log_level.py): what a release's own start-up
makes of a log level. Input (stdin, JSON): ``{"argvs": [[...], ...], "levels": [...], "config_path": "..."}``. Output
(last stdout line, JSON): per argv (after ``ts serve``), the half ``ts serve`` routes it to
(``tokenspeed.cli._argsplit.split_argv``) and the ``log_level`` the engine's parser keeps; per level, whether the
scheduler's logger writes info records after the release's ``configure_logger`` (or the exception it stops with);
and the same at debug with ``TOKENSPEED_LOGGING_CONFIG_PATH`` naming a config that keeps warnings only.
"""

import argparse
import contextlib
import io
import json
import logging
import logging.config  # configure_logger calls logging.config without importing it: the server's other imports do
import os
import sys
import types

from tokenspeed.cli._argsplit import split_argv
from tokenspeed.runtime.utils.common import configure_logger
from tokenspeed.runtime.utils.server_args import ServerArgs

# The loggers of the two lines hybridbench reads (runtime/engine/event_loop.py; 0.1.0's prefill line is
# runtime/execution/model_executor.py's, 0.1.1's runtime/engine/batch_log.py's), created before configure_logger sets
# the level of every tokenspeed logger there is.
LOGGERS = ("tokenspeed.runtime.engine.event_loop", "tokenspeed.runtime.execution.model_executor",
           "tokenspeed.runtime.engine.batch_log")


def routed(argv):
    split = split_argv(argv)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            raw, _ = parser.parse_known_args(split.engine)
    except SystemExit:
        return {"engine": split.engine, "gateway": split.gateway, "error": err.getvalue().strip().splitlines()[-1]}
    return {"engine": split.engine, "gateway": split.gateway, "error": "", "log_level": raw.log_level}


def writes_info(level):
    loggers = [logging.getLogger(name) for name in LOGGERS]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            configure_logger(types.SimpleNamespace(log_level=level))
    except Exception as exc:  # what the server would stop with at start-up
        return type(exc).__name__
    said = {logger.isEnabledFor(logging.INFO) for logger in loggers}
    return said.pop() if len(said) == 1 else "loggers disagree"


def main():
    logging.disable(logging.NOTSET)
    asked = json.load(sys.stdin)
    out = {"routed": [routed(argv) for argv in asked["argvs"]],
           "writes_info": {level: writes_info(level) for level in asked["levels"]}}
    with open(asked["config_path"], "w") as fh:
        json.dump({"version": 1, "root": {"level": "WARNING"}}, fh)
    os.environ["TOKENSPEED_LOGGING_CONFIG_PATH"] = asked["config_path"]
    out["with_config_file_at_debug"] = writes_info("debug")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

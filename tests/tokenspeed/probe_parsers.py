"""Run in the TokenSpeed parser env: route a ``ts serve`` argv the way ``ts serve`` does and parse both halves
with the packages' own parsers. Prints one JSON object: the split, and each parser's verdict.

    python probe_parsers.py help            # the engine parser's help (what hybridbench reads at plan time)
    python probe_parsers.py '<json argv>'...  # argvs after ``ts serve``: one JSON line each
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys


def parse(parser_call: object) -> str:
    """"" when the parser accepts, else its error message (argparse exits 2 on an unknown flag)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser_call()  # type: ignore[operator]
    except SystemExit as exc:
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return ""


def main() -> None:
    from tokenspeed.runtime.utils.server_args import ServerArgs

    engine_parser = argparse.ArgumentParser(prog="ts serve")
    ServerArgs.add_cli_args(engine_parser)
    if sys.argv[1] == "help":
        engine_parser.print_help()
        return
    from smg.launch_router import parse_router_args
    from tokenspeed.cli._argsplit import split_argv

    for arg in sys.argv[1:]:  # one interpreter for many: importing the parsers costs seconds
        split = split_argv(json.loads(arg))
        print(json.dumps({
            "engine": split.engine, "gateway": split.gateway, "control_port": split.opts.control_port,
            "engine_error": parse(lambda s=split: engine_parser.parse_args(s.engine)),
            "gateway_error": parse(lambda s=split: parse_router_args(s.gateway)),
        }))


if __name__ == "__main__":
    main()

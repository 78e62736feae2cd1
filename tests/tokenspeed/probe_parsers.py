"""Run in the TokenSpeed parser env: route a ``ts serve`` argv the way ``ts serve`` does and parse both halves
with the packages' own parsers. Prints one JSON object: the split, each parser's verdict, and what the engine's own
start-up resolution (``prepare_server_args``: parse, ``from_cli_args``, ``ServerArgs.__post_init__``) makes of its
half. That resolution asks the platform for a GPU first; here it is answered "none" (what a GPU would change:
default memory shares and kernel backends, none of the cache, parallelism or validation rules read below).

    python probe_parsers.py help            # the engine parser's help (what hybridbench reads at plan time)
    python probe_parsers.py '<json argv>'...  # argvs after ``ts serve``: one JSON line each
    python probe_parsers.py -                # the same for each JSON line read from stdin ("help" too), answered
                                             # line by line: one interpreter for a whole test module
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


def resolve(engine_argv: list[str]) -> dict[str, object]:
    """The engine's own start-up resolution of its half: what it would run, or the error it would stop with."""
    import types

    from tokenspeed.runtime.utils import server_args

    no_gpu = types.SimpleNamespace(is_amd=False, is_nvidia=False, is_hopper_plus=False, is_blackwell=False)
    server_args.current_platform = lambda: no_gpu
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = server_args.prepare_server_args(engine_argv)
    except SystemExit as exc:
        return {"error": f"argparse exit {exc.code}"}
    except Exception as exc:  # the verdict is whatever start-up would die of
        return {"error": f"{type(exc).__name__}: {exc}"}
    m = args.mapping
    return {"error": "", "world_size": m.world_size, "attn_tp": m.attn.tp_size, "attn_dp": m.attn.dp_size,
            "prefix_caching": args.enable_prefix_caching, "kvstore": args.enable_kvstore,
            "mamba_l2": getattr(args, "enable_mamba_l2", False), "quantization": args.quantization,
            "page": getattr(args, "prefix_granularity", None) or args.block_size,
            "context": args.max_model_len}  # None: config.json's (the engine's get_context_length)


def main() -> None:
    import logging

    from tokenspeed.runtime.utils.server_args import ServerArgs

    logging.disable(logging.CRITICAL)  # resolution logs its choices; stdout carries the JSON lines only

    engine_parser = argparse.ArgumentParser(prog="ts serve")
    ServerArgs.add_cli_args(engine_parser)
    if sys.argv[1] == "help":
        engine_parser.print_help()
        return
    from smg.launch_router import parse_router_args
    from tokenspeed.cli._argsplit import split_argv

    def route(argv: list[str]) -> dict[str, object]:
        split = split_argv(argv)
        return {"engine": split.engine, "gateway": split.gateway, "control_port": split.opts.control_port,
                "engine_error": parse(lambda: engine_parser.parse_args(split.engine)),
                "gateway_error": parse(lambda: parse_router_args(split.gateway)),
                "resolved": resolve(split.engine)}

    if sys.argv[1:] == ["-"]:
        for line in sys.stdin:
            asked = json.loads(line)
            answer = {"help": engine_parser.format_help()} if asked == "help" else route(asked)
            print(json.dumps({"asked": asked, **answer}), flush=True)  # the caller checks it is its question's
        return
    for arg in sys.argv[1:]:  # one interpreter for many: importing the parsers costs seconds
        print(json.dumps(route(json.loads(arg))))


if __name__ == "__main__":
    main()

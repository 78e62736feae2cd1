"""The ``hybridbench`` console script: one entry, each subcommand the ``python -m`` form it names.

    hybridbench run OVERRIDES...        python -m hybridbench OVERRIDES... (Hydra; -m sweeps)
    hybridbench plan [--json] OVERRIDES python -m hybridbench.preview
    hybridbench doctor OVERRIDES...     python -m hybridbench.doctor
    hybridbench list                    what conf/ and the code offer: experiments, workloads, arms, engines
    hybridbench compare ...             python -m hybridbench.compare
    hybridbench rescore ...             python -m hybridbench.rescore
    hybridbench results ...             python -m hybridbench.results
    hybridbench dashboard ...           python -m hybridbench.dashboard

Each subcommand receives the rest of the command line unchanged, so its own ``--help`` and exit codes hold.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from workloads.closed_stdout import quiet_on_closed_stdout

__all__ = ["COMMANDS", "main"]

# subcommand -> (module with main(argv), the python -m form, one line of help). run is Hydra's: it reads sys.argv.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("hybridbench.__main__", "python -m hybridbench", "run an experiment (Hydra overrides; -m sweeps)"),
    "plan": ("hybridbench.preview.__main__", "python -m hybridbench.preview",
             "preview a run: trials, server command lines, pools, forecast; nothing launched"),
    "doctor": ("hybridbench.doctor.__main__", "python -m hybridbench.doctor",
               "is this machine ready for that run: GPUs, server build, weights, disk, extras"),
    "list": ("hybridbench.cli_list", "python -m hybridbench.cli_list",
             "the experiments, workloads, arms (with each engine's flags) and engines"),
    "compare": ("hybridbench.compare.__main__", "python -m hybridbench.compare", "compare two runs"),
    "rescore": ("hybridbench.rescore.__main__", "python -m hybridbench.rescore", "re-score a saved run"),
    "results": ("hybridbench.results.cli", "python -m hybridbench.results", "the results store"),
    "dashboard": ("hybridbench.dashboard.cli", "python -m hybridbench.dashboard", "build the static dashboard"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, _, help_) in COMMANDS.items())
    return f"usage: hybridbench {{{','.join(COMMANDS)}}} ...\n\n{rows}\n\n" \
           "Each subcommand takes the arguments of its python -m form; `hybridbench SUBCOMMAND --help` lists them."


def _entry(name: str) -> Callable[..., int]:
    entry: Callable[..., int] = importlib.import_module(COMMANDS[name][0]).main
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    return quiet_on_closed_stdout(lambda: _dispatch(argv))


def _dispatch(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: unknown subcommand {name!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if name == "run":  # Hydra parses sys.argv itself, and names the program after argv[0]
        sys.argv = [COMMANDS[name][1].split()[-1], *rest]
        return _entry(name)()
    prog = f"hybridbench {name}"
    if name in ("plan", "doctor", "list"):
        return _entry(name)(rest, prog=prog)
    return _entry(name)(rest)


if __name__ == "__main__":
    sys.exit(main())

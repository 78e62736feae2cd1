"""Typed errors, each with the exit code of docs/reference/exit-codes.md.

0 all checks passed; 1 a check failed (regression); 2 usage or config error (one clear line naming
the bad key, flag or file); 3 infrastructure failure (engine would not start, died, hung).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["CheckFailed", "ConfigError", "EngineError", "HybridbenchError", "Interrupted", "OneLineParser",
           "RunInterrupted"]


class HybridbenchError(Exception):
    exit_code = 3


class ConfigError(HybridbenchError):
    exit_code = 2


class EngineError(HybridbenchError):
    exit_code = 3


class CheckFailed(HybridbenchError):
    exit_code = 1


class RunInterrupted(HybridbenchError):
    """A signal stopped the run; raised after what ran was written (exit 3)."""

    exit_code = 3


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised where the run was (a KeyboardInterrupt, so every ``finally`` runs)."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


class OneLineParser(argparse.ArgumentParser):
    """``argparse`` whose refusal is one line, ``error: MESSAGE`` naming the flag, and exit 2 (no usage block):
    every hybridbench command's parser, its subcommands' parsers too (argparse makes them of this class)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        raise SystemExit(ConfigError.exit_code)

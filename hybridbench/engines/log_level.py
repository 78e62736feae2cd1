"""The log level a server runs at, where hybridbench reads its info-level lines.

SGLang and TokenSpeed configure their loggers from ``--log-level`` (default ``info``) with
``getattr(logging, value.upper())`` (SGLang 0.5.9/0.5.16/0.5.23 and TokenSpeed 0.1.0/0.1.1 ``configure_logger``), and
log at ``info`` the lines hybridbench reads:

* **SGLang**: the "Prefill batch" / "Decode batch" lines (a trial's log hit totals, its usage series, peak token and
  mamba usage, running requests) and "Tree cache initialized ... impl=" (the cache the server built). At
  ``--log-level warning`` they are gone and the record's usage numbers read 0, as if nothing were used.
* **TokenSpeed**: the scheduler's start-up "Scheduler config: block_size=N" / "prefix_granularity=N" line (the page the
  run served: ``served_page``, the only word of it on 0.1.0 with a GDN model) and the "#cached-token" prefill lines
  (the cache_hits cross-check against usage). Without them the served page is silently missing and the cross-check
  decides nothing.

So a level above ``info`` given in ``engine.extra_args`` (``--log-level warning`` or ``--log-level=warning``; the last
one given counts, as argparse keeps it) is refused at plan time, as is a value neither server can resolve (it stops at
start-up on it); ``info``, ``debug`` and ``notset`` are allowed. ``--log-level-http`` (SGLang, TokenSpeed 0.1.0) sets
only the HTTP server's logger, which hybridbench does not read. Both servers replace their logging config wholesale
with the JSON file their ``*_LOGGING_CONFIG_PATH`` variable names, which the server inherits from hybridbench's
environment: set there, the level is that file's, so it is refused too. SGLang's ``--config`` YAML can give any flag
(``log-level`` included) and is refused with the same reason. The reference server writes SGLang's batch lines and is
held to the same rule. vLLM: hybridbench reads nothing from its log (its hits, block and evictions come from
``/metrics``), so its ``--uvicorn-log-level`` and ``VLLM_LOGGING_LEVEL`` are left alone. tests/sglang_oracle and
tests/tokenspeed run each release's parser and ``configure_logger`` over these flags.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hybridbench.engines.owned_flags import given_flags, last_flag

__all__ = ["LEVELS", "REFERENCE_LOG_READS", "SGLANG_LOG_READS", "TOKENSPEED_LOG_READS", "LogReads", "log_level_refusal"]

# The names getattr(logging, value.upper()) resolves to a level; any other value stops the server at start-up.
LEVELS = {name: getattr(logging, name) for name in
          ("CRITICAL", "FATAL", "ERROR", "WARNING", "WARN", "INFO", "DEBUG", "NOTSET")}


@dataclass(frozen=True, slots=True)
class LogReads:
    """What hybridbench reads from one engine's log, and what can keep the server from writing it."""

    engine: str  # as messages name it
    lines: str  # the info-level lines hybridbench reads, and what for
    flags: tuple[str, ...]  # the flags that set those loggers' level
    config_env: str  # the variable whose file replaces the server's logging config ("" none)
    flag_files: tuple[str, ...] = ()  # flags whose file can give any flag, the level included


SGLANG_LOG_READS = LogReads(
    "SGLang", 'its info-level "Prefill batch" / "Decode batch" lines (the record\'s log hits, usage series and peak '
              'usage) and "Tree cache initialized"', ("--log-level",), "SGLANG_LOGGING_CONFIG_PATH", ("--config",))
TOKENSPEED_LOG_READS = LogReads(
    "TokenSpeed", 'its info-level "Scheduler config" line (the page the run served) and "#cached-token" prefill lines '
                  "(the cache_hits cross-check)", ("--log-level",), "TOKENSPEED_LOGGING_CONFIG_PATH")

# reference_impl's server writes SGLang's batch lines (server/engine_loop.py) at the level of its --log-level
# (server/__main__.py: logging.basicConfig), which its parser limits to debug, info, warning and error.
REFERENCE_LOG_READS = LogReads(
    "the reference server", 'its info-level "Prefill batch" / "Decode batch" lines (the record\'s log hits, usage '
                            "series and peak usage)", ("--log-level",), "")


def log_level_refusal(reads: LogReads, extra: Sequence[str], environ: Mapping[str, str]) -> str:
    """Why the server would not log what hybridbench reads ("" when it would): a level above info in ``extra``
    (engine.extra_args), a value the server cannot resolve, a flag file, or a logging config file in ``environ``
    (the environment the server inherits)."""
    if files := sorted(set(reads.flag_files) & given_flags(extra)):
        return (f"engine.extra_args has {files[0]}, whose file can give any flag, --log-level included, and "
                f"hybridbench reads {reads.lines}; give its flags in engine.extra_args instead")
    found = last_flag(extra, *reads.flags)
    if found is not None:  # "--log-level=" or "--log-level ''": argparse keeps "", which no release resolves
        name, value = found
        level = LEVELS.get(value.upper())
        if level is None:
            return (f"engine.extra_args has {name} {value!r}, which is not a logging level {reads.engine} knows (it "
                    f"stops at start-up on it); give info or debug, or leave it out")
        if level > logging.INFO:
            return (f"engine.extra_args has {name} {value}, which hides {reads.lines}, and hybridbench reads them; "
                    "give info or debug, or leave it out")
    if reads.config_env and environ.get(reads.config_env):
        return (f"{reads.config_env} is set in the environment the {reads.engine} server inherits: its logging config "
                f"replaces --log-level and decides whether the server logs {reads.lines}, which hybridbench reads; "
                "unset it")
    return ""

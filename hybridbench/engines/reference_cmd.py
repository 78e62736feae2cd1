"""The ``python -m reference_impl.server`` command for one arm (issue 5), and what the reference engines can
express of an arm: everything but a policy that brings its own tree (``reference_impl.engine.arms``)."""

from __future__ import annotations

import contextlib
import functools
import io
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from hybridbench.config.redact import scrub, secret_values
from hybridbench.config.schema import RunCfg
from hybridbench.engines.arm_table import ArmTable, nothing
from hybridbench.engines.help_cache import cache_path, install_stamp, read_cached, write_cached
from hybridbench.engines.kv_pool import KVPool
from hybridbench.engines.owned_flags import OWNED_BY_ARM, OWNED_BY_HARNESS, refuse_owned
from hybridbench.errors import ConfigError
from hybridbench.plan.build import effective_vocab
from reference_impl.engine.arms import NOT_ON_REFERENCE, ArmSpec
from reference_impl.engine.config import DEFAULT_KV_TOKENS
from reference_impl.model.config import ModelConfig
from reference_impl.server.args import UsageError, build_parser, parse_config

# How long (wall) the server waits for a closed loop's replacements before a forward: well over an HTTP round trip on
# an overloaded 2-core machine (at 100 ms, some replacements missed it there). hybridbench's client says which
# finishes have none (POST /lockstep/vacate), so only a client that does not say waits it out.
LOCKSTEP_MS = 1000.0

# The flags engine.extra_args may not give the reference server: the harness's, and the ones that say which cache an
# arm runs (--inject-bug, the pools, --host-tier-kv-only and the model's shape may be set there).
REFERENCE_OWNED = {
    "--host": "engine.host", "--port": OWNED_BY_HARNESS,
    "--cache-semantics": "engine.cache_semantics", "--report-modelled-time": "engine.timing",
    "--modelled-lockstep-ms": "the harness (a closed loop on the modelled clock)",
    **dict.fromkeys(("--arm", "--policy", "--disable-radix-cache", "--mamba-radix-cache-strategy",
                     "--mamba-scheduler-strategy", "--radix-eviction-policy", "--enable-hicache",
                     "--enable-hierarchical-cache"), OWNED_BY_ARM),
}

__all__ = ["LOCKSTEP_MS", "REFERENCE_ARMS", "lockstepped", "reference_command", "reference_kv_pool",
           "reference_refusals"]


def reference_refusals() -> dict[str, str]:
    """``why_not`` for the reference engines' tables (server and simulator)."""
    return {p: f"engine {{engine}}: arm '{p}' cannot run on this engine: {why}" for p, why in NOT_ON_REFERENCE.items()}


def _weight(spec: ArmSpec, cfg: RunCfg) -> list[str]:
    w = spec.knobs.eff_weight
    return [] if w is None else ["--seglen-eff-weight", str(w)]


def _host_tier(spec: ArmSpec, cfg: RunCfg) -> list[str]:
    return [] if spec.knobs.l2 is None else ["--hicache-ratio", str(spec.knobs.l2.hicache_ratio)]


# The server reads the arm's strategy, policy and host tier from ``--arm`` (SGLang's flag names otherwise);
# the table adds the knobs.
REFERENCE_ARMS: ArmTable[RunCfg, str] = ArmTable(
    engine="reference",
    strategies={"disabled": nothing, "no_buffer": nothing, "extra_buffer": nothing, "extra_buffer_lazy": nothing},
    policies={"lru": nothing, "seglen": _weight},
    host_tier=_host_tier,
    why_not=reference_refusals(),
)


def reference_command(cfg: RunCfg, arm: ArmSpec, port: int) -> list[str]:
    """``python -m reference_impl.server`` with SGLang's flag names."""
    knobs = REFERENCE_ARMS.express(arm, cfg)
    e = cfg.engine
    if cfg.model.mamba_ssm_dtype:  # its tiny model's states are float32 tensors of a few KB: nothing to size
        raise ConfigError(f"model.mamba_ssm_dtype={cfg.model.mamba_ssm_dtype}: the reference server keeps float32 "
                          "states and has no such flag; leave it empty (engine=sim models the bytes)")
    if arm.strategy == "no_buffer" and e.page_size > 1:  # SGLang's startup assert, caught at plan time
        raise ConfigError(f"arm {arm.name} uses no_buffer, which needs page size 1; engine.page_size is "
                          f"{e.page_size}")
    cmd = [e.python or sys.executable, "-m", "reference_impl.server", "--host", e.host, "--port", str(port),
           "--arm", arm.name, "--page-size", str(e.page_size), "--chunked-prefill-size", str(e.chunked_prefill_size),
           "--mamba-track-interval", str(e.track_interval), "--random-seed", str(cfg.seed),
           "--vocab-size", str(effective_vocab(cfg)), "--enable-metrics", "--enable-cache-report", *knobs]
    if e.cache_semantics == "tokenspeed":
        if arm.strategy == "no_buffer":  # the server's own refusal, caught at plan time
            raise ConfigError(f"arm {arm.name}: engine.cache_semantics=tokenspeed: TokenSpeed always "
                              "keeps branch-point states (use branching)")
        if arm.strategy == "extra_buffer_lazy":  # the server's own refusal, caught at plan time
            raise ConfigError(f"arm {arm.name}: engine.cache_semantics=tokenspeed: TokenSpeed has no lazy ping-pong "
                              "slot (use branching)")
        if arm.strategy == "extra_buffer" and arm.policy != "lru":  # the server's refusal too: it would run LRU
            raise ConfigError(f"arm {arm.name}: engine.cache_semantics=tokenspeed: TokenSpeed evicts least recently "
                              f"used by its own rules, so the arm's {arm.policy} eviction cannot apply (use "
                              f"{'l2' if arm.host_tier else 'branching'})")
        cmd += ["--cache-semantics", "tokenspeed"]
    if slowdown := e.prefill_slowdown.get(arm.name):  # the planted regression of this arm's server
        cmd += ["--prefill-slowdown", str(slowdown)]
    if e.timing == "modelled":  # the records carry the modelled clock the timing checks judge
        cmd.append("--report-modelled-time")
    if lockstepped(cfg):
        cmd += ["--modelled-lockstep-ms", str(LOCKSTEP_MS)]
    if e.kv_tokens:
        cmd += ["--max-total-tokens", str(e.kv_tokens)]
    if e.max_mamba_cache_size:
        cmd += ["--max-mamba-cache-size", str(e.max_mamba_cache_size)]
    refuse_owned([str(a) for a in e.extra_args], REFERENCE_OWNED)
    _refuse_abbreviations([str(a) for a in e.extra_args])
    cmd += list(e.extra_args)
    # Another interpreter (engine.python) may hold another checkout's server, with other flags: its own parser
    # decides at launch. This one's decides now.
    if not e.python or _this_interpreter(e.python):
        _refuse_what_the_server_refuses(cmd[3:], port, secret_values({"engine": {"extra_args": list(e.extra_args)}}))
    else:
        _refuse_interpreter(e.python)
    return cmd


@functools.cache
def _refuse_interpreter(python: str) -> None:
    """ConfigError for an engine.python that cannot start ``-m reference_impl.server``: a missing path, a folder, a
    file that is not executable, or an interpreter without reference_impl. The run made its run dir and then failed
    at launch as an infrastructure failure (exit 3) while plan and doctor said it was ready. Asked of the interpreter
    as launch runs it (same working directory and environment), without importing the server."""
    if shutil.which(python) is None:
        raise ConfigError(f"engine.python={python}: no such interpreter (not an executable file)")
    if install_stamp(python, "reference_impl") is None:
        raise ConfigError(f"engine.python={python}: cannot import reference_impl (the reference server) there; "
                          "set engine.python to an interpreter of a hybridbench checkout, or leave it empty")
    # Its dependencies (torch, numpy) too: the server's own --help imports them, kept on disk while the checkout
    # is unchanged (hybridbench.engines.help_cache), as SGLang's is.
    argv = [python, "-m", "reference_impl.server", "--help"]
    where = cache_path(python, argv, "reference_impl")
    if read_cached(where) is not None:
        return
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"engine.python={python}: cannot run the reference server's --help ({exc})") from None
    if proc.returncode != 0 or "--arm" not in proc.stdout:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise ConfigError(f"engine.python={python}: cannot run the reference server ({last})")
    write_cached(where, python, "reference_impl", proc.stdout)


def _refuse_abbreviations(extra: list[str]) -> None:
    """ConfigError for a flag given by a prefix of one of the server's (``--pol`` for ``--policy``). This checkout's
    parser takes none, but another checkout's (engine.python) may, and the refusals of the flags hybridbench sets go
    by their full names: ``--pol seglen`` would run seglen under the planned arm's name."""
    flags = {name for action in build_parser()._actions for name in action.option_strings}
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name.startswith("--") and name not in flags and (full := sorted(f for f in flags if f.startswith(name))):
            raise ConfigError(f"engine.extra_args has {name}, an abbreviation of {full[0]}: give the reference "
                              f"server's flags in full")


def lockstepped(cfg: RunCfg) -> bool:
    """Whether the run's reference servers wait in lockstep: a closed loop judged on the modelled clock, where a
    closed loop's next request arrives when its predecessor finishes."""
    return cfg.engine.timing == "modelled" and cfg.load.kind == "closed"


def _this_interpreter(python: str) -> bool:
    """Whether ``python`` is the interpreter running hybridbench, venv and all. A venv's ``bin/python`` is a symlink to
    its base interpreter, so the resolved binary alone cannot tell a PR venv from this one: its directory must be
    this one's too (``python3`` beside ``python`` is the same)."""
    given, this = Path(python).absolute(), Path(sys.executable).absolute()
    return given.parent.resolve() == this.parent.resolve() and given.resolve() == this.resolve()


def _refuse_what_the_server_refuses(args: list[str], port: int, secrets: frozenset[str]) -> None:
    """The server's own parser and checks, at plan time: a flag it refuses (a typo in engine.extra_args, a value
    of the wrong type) would otherwise stop the run at launch as an infrastructure failure (exit 3). argparse
    quotes what it refuses: a secret among the arguments is masked."""
    at = args.index("--port") + 1
    args = [*args[:at], str(port or 30000), *args[at + 1:]]  # plan time builds with port 0: any real port
    problem = io.StringIO()
    try:
        with contextlib.redirect_stderr(problem), contextlib.redirect_stdout(io.StringIO()):
            parse_config(args)
    except SystemExit as exc:
        lines = problem.getvalue().strip().splitlines()
        why = lines[-1].removeprefix("error: ") if lines else (
            "it prints its help and exits (-h/--help)" if not exc.code else "bad arguments")
        raise ConfigError(f"engine.extra_args: the reference server refuses its command line: "
                          f"{scrub(why, secrets)}") from None
    except UsageError as exc:
        raise ConfigError(f"engine: the reference server refuses its command line: {scrub(str(exc), secrets)}"
                          ) from None


def _server_reads(extra: list[str]) -> tuple[int | None, int | None] | None:
    """``--max-total-tokens`` and ``--context-length`` as the server's own parser reads ``engine.extra_args`` (None
    for a flag not given): argparse takes every spelling ``int`` takes (``1_000``), which matching the flag's exact
    text missed (the server's parser takes no abbreviation: ``--context-len`` is refused at plan time). None when
    the parser refuses the arguments (the server refuses them at launch, and plan time already has when it ran this
    parser on them)."""
    parser = build_parser()
    parser.set_defaults(max_total_tokens=None, context_length=None)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            ns, _ = parser.parse_known_args(extra)  # another checkout's server may take flags this one does not
    except SystemExit:
        return None
    return ns.max_total_tokens, ns.context_length


def reference_kv_pool(cfg: RunCfg) -> KVPool | None:
    """The pool ``reference_command`` gives the server: ``--max-total-tokens`` from engine.kv_tokens, or its default;
    engine.extra_args, appended last, override both (None when they give it no positive number: the server
    refuses). With it the server's context length, as reference_impl.server.args derives it: ``--context-length``
    in engine.extra_args, else the tiny model's 32,768 tokens, never above the pool."""
    read = _server_reads(list(cfg.engine.extra_args))
    if read is None:
        return None
    tokens, given = read
    if tokens is not None:
        if tokens <= 0:
            return None
        pool = KVPool(tokens, "--max-total-tokens in engine.extra_args")
    elif cfg.engine.kv_tokens:
        pool = KVPool(cfg.engine.kv_tokens, "engine.kv_tokens")
    else:
        pool = KVPool(DEFAULT_KV_TOKENS, "the server's default --max-total-tokens; set engine.kv_tokens")
    if given is not None and given <= 1:
        return pool  # the server refuses the flag (plan time runs its parser), naming it
    if given is not None:
        return replace(pool, context=given, context_key="--context-length in engine.extra_args")
    return replace(pool, context=ModelConfig().max_context,
                   context_key="the reference server's default; set --context-length in engine.extra_args")

"""SGLang and vLLM engines: the installed server's ``--help`` decides which flags exist (plan time)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence

from hybridbench.config.redact import scrub, secret_values
from hybridbench.config.schema import RunCfg
from hybridbench.engines.gpu_pool import fixed_gpu_kv_pool
from hybridbench.engines.help_cache import cache_path, read_cached, write_cached
from hybridbench.engines.log_level import SGLANG_LOG_READS
from hybridbench.engines.server import CommandBuilder, ServerEngine, ServerSpec
from hybridbench.engines.server_auth import sglang_auth, vllm_auth
from hybridbench.engines.server_logs import vllm_served_block
from hybridbench.engines.sglang_cmd import (
    sglang_command,
    sglang_env,
    sglang_help_argv,
    sglang_metrics_ranks,
    sglang_refusal,
)
from hybridbench.engines.traits import EngineTraits
from hybridbench.engines.vllm_cmd import vllm_build_refusal, vllm_command, vllm_env, vllm_help_argv
from hybridbench.engines.vllm_page import planned_block
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec

__all__ = ["check_extra_args", "installed_help", "make_sglang_engine", "make_vllm_engine"]


def installed_help(argv: list[str], engine: str, python: str, *, extra: Sequence[str] = ()) -> str:
    """The server's own ``--help`` text; ConfigError naming the interpreter if it has no such server. Kept on disk
    while the install is unchanged (``hybridbench.engines.help_cache``): SGLang's takes ~10 CPU s.

    ``extra``: engine.extra_args, which ``argv`` puts before the help flag, asked of a build whose plain help ran:
    the server's own parser then refuses what it would refuse at launch (``--attention-backend bogus``,
    ``--max-running-requests abc``, a flag missing its value), named here with exit 2, not as a server that died
    at start-up (exit 3, an infrastructure failure). Their secrets are masked in the message."""
    where = cache_path(python, argv, engine)
    cached = read_cached(where)
    if cached is not None:
        return cached
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"engine={engine}: cannot run {argv[0]} ({exc})") from None
    if extra and (proc.returncode != 0 or "--" not in proc.stdout):
        said = [line.split(": error: ", 1)[1] for line in proc.stderr.splitlines() if ": error: " in line]
        why = said[-1] if said else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        secrets = secret_values({"engine": {"extra_args": list(extra)}})
        raise ConfigError(f"engine.extra_args: the {engine} build's own parser refuses them: {scrub(why, secrets)}")
    if proc.returncode != 0 or "--" not in proc.stdout:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"engine={engine}: {python} cannot run the server's --help ({last}); set engine.python")
    write_cached(where, python, engine, proc.stdout)
    return proc.stdout


def check_extra_args(help_argv: Callable[[str, list[str]], list[str]], engine: str, python: str,
                     extra_args: Sequence[object], checked: set[tuple[str, ...]]) -> None:
    """engine.extra_args through the build's own parser (once per interpreter and arguments), after its plain help
    ran: a failure then is the arguments', not the interpreter's."""
    extra = [str(a) for a in extra_args]  # YAML may give numbers
    if extra and (python, *extra) not in checked:
        installed_help(help_argv(python, extra), engine, python, extra=extra)
        checked.add((python, *extra))


def _builder(engine: str, help_argv: Callable[[str, list[str]], list[str]],
             command: Callable[..., list[str]]) -> CommandBuilder:
    help_cache: dict[str, str] = {}
    checked: set[tuple[str, ...]] = set()

    def build(cfg: RunCfg, arm: ArmSpec, port: int) -> list[str]:
        python = cfg.engine.python or sys.executable
        if python not in help_cache:
            help_cache[python] = installed_help(help_argv(python, []), engine, python)
        check_extra_args(help_argv, engine, python, cfg.engine.extra_args, checked)
        return command(python=python, model=cfg.model, engine=cfg.engine, arm=arm, port=port,
                       help_text=help_cache[python])

    return build


def make_sglang_engine() -> ServerEngine:
    return ServerEngine(ServerSpec(
        name="sglang", build=_builder("sglang", sglang_help_argv, sglang_command), client="sglang",
        env_for=sglang_env, flush_path="/flush_cache", package="sglang", refusal=sglang_refusal, auth=sglang_auth,
        kv_pool=fixed_gpu_kv_pool, log_reads=SGLANG_LOG_READS,  # its batch lines feed the record's usage numbers
        metrics_ranks=lambda cfg: sglang_metrics_ranks(cfg.engine),  # a cache per TP rank, each its own counters
        # SGLang also serves /v1/completions; its cache is the one reference_impl models.
        traits=EngineTraits(protocols=frozenset({"sglang", "openai"}), flushable=True, greedy_deterministic=True,
                            reference_semantics=True,
                            # sglang:evicted_tokens_total and sglang:load_back_tokens_total; no evicted-state count
                            counters=frozenset({"evicted_tokens", "host_loaded_tokens"}))))


def make_vllm_engine() -> ServerEngine:
    return ServerEngine(ServerSpec(
        name="vllm", build=_builder("vllm", vllm_help_argv, vllm_command), client="openai", return_token_ids=True,
        env_for=vllm_env, flush_path="/reset_prefix_cache", package="vllm",  # vllm_env mounts the flush endpoint
        auth=vllm_auth,  # --api-key, or VLLM_API_KEY in the environment it inherits
        build_refusal=vllm_build_refusal,  # a CPU build (X+cpu) behind a GPU run
        served_page=vllm_served_block,  # the block it aligned, from its /metrics (the plan computes it: vllm_page.py)
        planned_page=planned_block,  # ... and the one the plan computed, recorded beside it
        traits=EngineTraits(protocols=frozenset({"openai"}), flushable=True, greedy_deterministic=True,
                            track_interval=False, decode_states="block")))  # its states follow the block size

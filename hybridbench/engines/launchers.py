"""SGLang and vLLM engines: the installed server's ``--help`` decides which flags exist (plan time)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from hybridbench.config.schema import RunCfg
from hybridbench.engines.gpu_pool import fixed_gpu_kv_pool
from hybridbench.engines.help_cache import cache_path, read_cached, write_cached
from hybridbench.engines.server import CommandBuilder, ServerEngine, ServerSpec
from hybridbench.engines.sglang_cmd import (
    sglang_command,
    sglang_env,
    sglang_help_argv,
    sglang_metrics_ranks,
    sglang_refusal,
)
from hybridbench.engines.traits import EngineTraits
from hybridbench.engines.vllm_cmd import vllm_build_refusal, vllm_command, vllm_env, vllm_help_argv
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec

__all__ = ["installed_help", "make_sglang_engine", "make_vllm_engine"]


def installed_help(argv: list[str], engine: str, python: str, *, extra: bool = False) -> str:
    """The server's own ``--help`` text; ConfigError naming the interpreter if it has no such server. Kept on disk
    while the install is unchanged (``hybridbench.engines.help_cache``): SGLang's takes ~10 CPU s.

    ``extra``: ``argv`` puts engine.extra_args before the help flag; the server's argparse then refuses a value it
    would refuse at launch (``--attention-backend bogus``, ``--max-running-requests abc``, a flag missing its value),
    named here with exit 2, not as a server that died at start-up (exit 3, an infrastructure failure)."""
    where = cache_path(python, argv, engine)
    cached = read_cached(where)
    if cached is not None:
        return cached
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"engine={engine}: cannot run {argv[0]} ({exc})") from None
    refused = [line for line in proc.stderr.splitlines() if ": error: " in line]
    if extra and proc.returncode == 2 and refused:
        raise ConfigError(f"engine.extra_args: the {engine} build's own parser refuses them: "
                          f"{refused[-1].split(': error: ', 1)[1]}")
    if proc.returncode != 0 or "--" not in proc.stdout:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"engine={engine}: {python} cannot run the server's --help ({last}); set engine.python")
    write_cached(where, python, engine, proc.stdout)
    return proc.stdout


def _builder(engine: str, help_argv: Callable[[str, list[str]], list[str]],
             command: Callable[..., list[str]]) -> CommandBuilder:
    help_cache: dict[str, str] = {}

    def build(cfg: RunCfg, arm: ArmSpec, port: int) -> list[str]:
        python = cfg.engine.python or sys.executable
        extra = [str(a) for a in cfg.engine.extra_args]  # YAML may give numbers
        key = "\0".join([python, *extra])
        if key not in help_cache:
            help_cache[key] = installed_help(help_argv(python, extra), engine, python, extra=bool(extra))
        return command(python=python, model=cfg.model, engine=cfg.engine, arm=arm, port=port,
                       help_text=help_cache[key])

    return build


def make_sglang_engine() -> ServerEngine:
    return ServerEngine(ServerSpec(
        name="sglang", build=_builder("sglang", sglang_help_argv, sglang_command), client="sglang",
        env_for=sglang_env, flush_path="/flush_cache", package="sglang", refusal=sglang_refusal,
        kv_pool=fixed_gpu_kv_pool,
        metrics_ranks=lambda cfg: sglang_metrics_ranks(cfg.engine),  # a cache per TP rank, each its own counters
        # SGLang also serves /v1/completions; its cache is the one reference_impl models.
        traits=EngineTraits(protocols=frozenset({"sglang", "openai"}), flushable=True, greedy_deterministic=True,
                            reference_semantics=True,
                            # sglang:evicted_tokens_total and sglang:load_back_tokens_total; no evicted-state count
                            counters=frozenset({"evicted_tokens", "host_loaded_tokens"}))))


def make_vllm_engine() -> ServerEngine:
    return ServerEngine(ServerSpec(
        name="vllm", build=_builder("vllm", vllm_help_argv, vllm_command), client="openai",
        env_for=vllm_env, flush_path="/reset_prefix_cache", package="vllm",  # vllm_env mounts the flush endpoint
        build_refusal=vllm_build_refusal,  # a CPU build (X+cpu) behind a GPU run
        traits=EngineTraits(protocols=frozenset({"openai"}), flushable=True, greedy_deterministic=True,
                            track_interval=False, decode_states="block")))  # its states follow the block size

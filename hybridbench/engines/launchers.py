"""SGLang and vLLM engines: the installed server's ``--help`` decides which flags exist (plan time)."""

from __future__ import annotations

import subprocess
import sys

from hybridbench.config.schema import RunCfg
from hybridbench.engines.server import ServerEngine
from hybridbench.engines.sglang_cmd import sglang_command, sglang_env, sglang_help_argv
from hybridbench.engines.vllm_cmd import vllm_command, vllm_env, vllm_help_argv
from hybridbench.errors import ConfigError

__all__ = ["installed_help", "make_sglang_engine", "make_vllm_engine"]


def installed_help(argv: list[str], engine: str, python: str) -> str:
    """The server's own ``--help`` text; ConfigError naming the interpreter if it has no such server."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"engine={engine}: cannot run {argv[0]} ({exc})") from None
    if proc.returncode != 0 or "--" not in proc.stdout:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"engine={engine}: {python} cannot run the server's --help ({last}); set engine.python")
    return proc.stdout


def make_sglang_engine() -> ServerEngine:
    help_cache: dict[str, str] = {}

    def build(cfg: RunCfg, arm: str, port: int) -> list[str]:
        python = cfg.engine.python or sys.executable
        if python not in help_cache:
            help_cache[python] = installed_help(sglang_help_argv(python), "sglang", python)
        return sglang_command(python=python, model=cfg.model, engine=cfg.engine, arm=arm, port=port,
                              help_text=help_cache[python])

    return ServerEngine("sglang", build, api="sglang", env_for=sglang_env, flush_path="/flush_cache")


def make_vllm_engine() -> ServerEngine:
    help_cache: dict[str, str] = {}

    def build(cfg: RunCfg, arm: str, port: int) -> list[str]:
        python = cfg.engine.python or sys.executable
        if python not in help_cache:
            help_cache[python] = installed_help(vllm_help_argv(python), "vllm", python)
        return vllm_command(python=python, model=cfg.model, engine=cfg.engine, arm=arm, port=port,
                            help_text=help_cache[python])

    return ServerEngine("vllm", build, api="openai", env_for=vllm_env, flush_path="/reset_prefix_cache")

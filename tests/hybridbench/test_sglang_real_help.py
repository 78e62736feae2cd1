"""The SGLang launcher against the real `--help` of the SGLang builds the differential tier installs.

These are real SGLang 0.5.23 and 0.5.9 installs (tests/sglang_oracle/build_env.sh), so the command
lines below are checked against the flags those versions really accept, not against our notes.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hybridbench.config.quantization import SGLANG_QUANTIZATIONS
from hybridbench.config.schema import RunCfg
from hybridbench.engines.help_cache import cache_path, write_cached
from hybridbench.engines.launchers import installed_help, make_sglang_engine
from hybridbench.engines.sglang_cmd import parse_help, sglang_command, sglang_help_argv
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm
from reference_impl.engine.cost_model import QUANTIZATIONS
from reference_impl.models import STATE_DTYPES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sglang_oracle"))
import warm_release

pytestmark = pytest.mark.sglang

HOME = Path(os.environ.get("HYBRIDBENCH_SGLANG_HOME", str(Path.home() / ".cache" / "hybridbench")))  # build_env.sh's


def engine_for(version: str) -> tuple[RunCfg, object]:
    python = HOME / f"sglang-{version}" / "bin" / "python"
    if not python.exists():
        # CI builds the venvs first (HYBRIDBENCH_REQUIRE_SGLANG=1): missing there is a failure, not a quiet skip.
        (pytest.fail if os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    cfg = RunCfg()
    cfg.engine.name, cfg.engine.python, cfg.engine.tp = "sglang", str(python), 4
    return cfg, make_sglang_engine()


@pytest.mark.parametrize(("version", "strategy_flag"), [("0.5.23", "--mamba-radix-cache-strategy"),
                                                        ("0.5.9", "--mamba-scheduler-strategy")])
def test_every_arm_builds_with_the_flags_this_build_has(version: str, strategy_flag: str) -> None:
    cfg, engine = engine_for(version)
    cmd = {arm: engine.build(cfg, plan_arm(arm), 30000) for arm in ("disabled", "lru", "branching", "l2")}  # type: ignore[attr-defined]
    assert cmd["disabled"][1:3] == ["-m", "sglang.launch_server"] and "--disable-radix-cache" in cmd["disabled"]
    for arm, strategy in (("lru", "no_buffer"), ("branching", "extra_buffer"), ("l2", "extra_buffer")):
        i = cmd[arm].index(strategy_flag)
        assert cmd[arm][i + 1] == strategy  # set explicitly: `auto` can silently become no_buffer
    assert "--enable-hierarchical-cache" in cmd["l2"] and "--tp-size" in cmd["lru"]


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_released_builds_cannot_express_seglen_and_say_so(version: str) -> None:
    cfg, engine = engine_for(version)
    with pytest.raises(ConfigError, match="--radix-eviction-policy seglen"):
        engine.build(cfg, plan_arm("seglen"), 30000)  # type: ignore[attr-defined]


@functools.cache
def quantization_help(version: str) -> tuple[Path, str, frozenset[str]]:
    """(python, --help text, --quantization choices) of one SGLang build; skips when its venv is missing."""
    python = HOME / f"sglang-{version}" / "bin" / "python"
    if not python.exists():
        # CI builds the venvs first (HYBRIDBENCH_REQUIRE_SGLANG=1): missing there is a failure, not a quiet skip.
        (pytest.fail if os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    text = installed_help(sglang_help_argv(str(python)), "sglang", str(python))
    return python, text, parse_help(text).choices["--quantization"]


@pytest.mark.parametrize("version", ["0.5.23", "0.5.16", "0.5.9"])
def test_model_quantization_takes_the_names_sglangs_own_parser_offers(version: str) -> None:
    """model.quantization is SGLang's --quantization: every name the simulator models (fp8, w8a8_fp8) is one
    this build's argument parser lists, the launcher passes it through, and a name the build lacks stops the
    run at plan time in one line naming the key."""
    python, text, offered = quantization_help(version)
    assert set(QUANTIZATIONS) <= offered, sorted(set(QUANTIZATIONS) - offered)
    # The config's list (checked for every engine but sglang) holds every name this build's parser offers.
    assert offered <= SGLANG_QUANTIZATIONS, sorted(offered - SGLANG_QUANTIZATIONS)
    cfg = RunCfg()
    for name in QUANTIZATIONS:
        cfg.model.quantization = name
        cmd = sglang_command(python=str(python), model=cfg.model, engine=cfg.engine, arm=plan_arm("branching"),
                             port=30000, help_text=text)
        assert cmd[cmd.index("--quantization") + 1] == name
    cfg.model.quantization = "fp9"
    with pytest.raises(ConfigError, match=r"^model\.quantization needs --quantization fp9, which this SGLang build"):
        sglang_command(python=str(python), model=cfg.model, engine=cfg.engine, arm=plan_arm("branching"),
                       port=30000, help_text=text)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.16", "0.5.9"])
def test_model_mamba_ssm_dtype_takes_the_names_sglangs_own_parser_offers(version: str) -> None:
    """model.mamba_ssm_dtype is SGLang's --mamba-ssm-dtype: every dtype the simulator models a state in is one
    this build's parser lists, and the launcher passes it through."""
    python = HOME / f"sglang-{version}" / "bin" / "python"
    if not python.exists():
        # CI builds the venvs first (HYBRIDBENCH_REQUIRE_SGLANG=1): missing there is a failure, not a quiet skip.
        (pytest.fail if os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    text = installed_help(sglang_help_argv(str(python)), "sglang", str(python))
    assert parse_help(text).choices["--mamba-ssm-dtype"] == set(STATE_DTYPES)
    cfg = RunCfg()
    for name in STATE_DTYPES:
        cfg.model.mamba_ssm_dtype = name
        cmd = sglang_command(python=str(python), model=cfg.model, engine=cfg.engine, arm=plan_arm("branching"),
                             port=30000, help_text=text)
        assert cmd[cmd.index("--mamba-ssm-dtype") + 1] == name


def test_the_configs_quantization_names_are_exactly_what_those_builds_offer() -> None:
    """No name in hybridbench.config.quantization that none of SGLang 0.5.9, 0.5.16, 0.5.23 offers."""
    offered = [quantization_help(version)[2] for version in ("0.5.9", "0.5.16", "0.5.23")]
    assert frozenset().union(*offered) == SGLANG_QUANTIZATIONS


def test_extra_args_the_builds_own_parser_refuses_are_refused_at_plan_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A value the server's argparse refuses died at launch: exit 3 (infrastructure) on a GPU runner, not exit 2.
    # (~5 s a parser run: one build; 0.5.9's and vLLM's parsers refuse the same way, through the same --help call.)
    cfg, engine = engine_for("0.5.23")
    python, text, _ = quantization_help("0.5.23")
    monkeypatch.setenv("HYBRIDBENCH_HELP_CACHE", str(tmp_path))  # each command with extra args really runs the parser
    # ... after the plain --help, which is not what is tested here: the text the shared cache (or a run) gave
    write_cached(cache_path(str(python), sglang_help_argv(str(python)), "sglang"), str(python), "sglang", text)
    for extra, said in ((["--max-running-requests", "abc"], "invalid int value: 'abc'"),
                        (["--schedule-policy", "bogus"], "invalid choice: 'bogus'")):
        cfg.engine.extra_args = extra
        with pytest.raises(ConfigError, match=f"engine.extra_args: the sglang build's own parser refuses them: "
                                              f"argument {extra[0]}: {said}"):
            engine.build(cfg, plan_arm("branching"), 30000)  # type: ignore[attr-defined]
    cfg.engine.extra_args = ["--max-running-requests", "8"]
    cmd = engine.build(cfg, plan_arm("branching"), 30000)  # type: ignore[attr-defined]
    assert cmd[-2:] == ["--max-running-requests", "8"]


# Tokens argparse leaves unread, which SGLang's parser refuses at launch ("unrecognized arguments"), while the plan's
# parser call, ending in --help, exits on the help before argparse looks for them: (extra_args, the token).
UNREAD = [(["--disable-cuda-graph", "True"], "True"),  # a switch given a value (Hydra's true is "True")
          (["bogus", "--max-running-requests", "8"], "bogus"),  # not a flag, not a value
          (["--max-running-requests", "8", "16"], "16")]  # one value more than the flag takes


def test_tokens_the_builds_own_parser_leaves_unread_are_refused_at_plan_time() -> None:
    """SGLang's own parser, as launch_server reads its arguments (prepare_server_args: argparse over
    ServerArgs.add_cli_args), stops on each UNREAD token; the plan refuses it first, naming it (exit 2, not a server
    that died at start-up, exit 3), on every build; flags that take several values or none keep working."""
    cfg, _ = engine_for("0.5.23")
    code = ("import argparse, json, sys; from sglang.srt.server_args import ServerArgs\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    p = argparse.ArgumentParser(prog='sglang serve'); ServerArgs.add_cli_args(p)\n"
            "    try: p.parse_args(['--model-path', 'm', *argv]); print('read')\n"
            "    except SystemExit as e: print('exit', e.code)\n")
    argvs = [extra for extra, _ in UNREAD] + [["--numa-node", "0", "1", "--disable-cuda-graph"]]
    # a fork of the release's warm server (tests/sglang_oracle/warm_release.py), which imported server_args once
    proc = warm_release.run(Path(cfg.engine.python), ["-c", code, json.dumps(argvs)], input=None,
                            env=warm_release.oracle_env(), timeout=300)
    assert proc.stdout.split("\n")[:4] == ["exit 2", "exit 2", "exit 2", "read"], proc.stderr[-2000:]
    for token in ("True", "bogus", "16"):
        assert f"error: unrecognized arguments: {token}" in proc.stderr
    for version in ("0.5.23", "0.5.16", "0.5.9"):  # the command against each build's own --help
        python, text, _ = quantization_help(version)

        def build(extra: list[str], python: Path = python, text: str = text) -> list[str]:
            return sglang_command(python=str(python), model=cfg.model, engine=replace(cfg.engine, extra_args=extra),
                                  arm=plan_arm("branching"), port=30000, help_text=text)

        for extra, token in UNREAD:
            with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {token!r} where no flag reads it .* "
                                                  "the server would stop at start-up on it"):
                build(extra)
        assert build(["--numa-node", "0", "1", "--disable-cuda-graph"])[-4:] == [  # nargs +, then a switch
            "--numa-node", "0", "1", "--disable-cuda-graph"]

"""The documented GPU runs (`engine=sglang`) plan, and their server command lines build against a real SGLang's
`--help` (the differential tier's 0.5.23 venv stands in for the reader's build): a flag or arm the build cannot
express is refused at plan time, naming it, not on the GPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from doc_commands import HYDRA_MODULES, Command, commands, compose_run, overrides_to_compose

from hybridbench.config.schema import RunCfg
from hybridbench.engines.launchers import make_sglang_engine
from hybridbench.engines.server import ServerEngine
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan

SGLANG = (Path(os.environ.get("HYBRIDBENCH_SGLANG_HOME", str(Path.home() / ".cache" / "hybridbench")))
          / "sglang-0.5.23" / "bin" / "python")
_ALL = [c for c in commands() if c.module in HYDRA_MODULES and "engine=sglang" in c.args
        and any(a.startswith("+experiment=") for a in c.args)]
GPU_RUNS = list({c.args: c for c in reversed(_ALL)}.values())  # the same command in two pages is checked once
# Arms released SGLang lacks (their flags exist only in their pull requests' builds).
PR_ONLY = {"seglen": "--radix-eviction-policy seglen", "marconi": "--radix-eviction-policy marconi"}


def test_the_gpu_quickstart_is_among_them() -> None:
    where = {c.where.split(":")[0] for c in _ALL}
    assert {"README.md", "docs/get-started.md"} <= where


@pytest.fixture(scope="module")
def engine() -> ServerEngine:
    if not SGLANG.exists():
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            "SGLang 0.5.23 venv missing: run bash tests/sglang_oracle/build_env.sh 0.5.23")
    return make_sglang_engine()  # one engine: it reads the build's --help once


@pytest.mark.parametrize("cmd", GPU_RUNS, ids=lambda c: c.id)
def test_every_documented_gpu_run_plans_and_builds_against_real_sglang(
        cmd: Command, engine: ServerEngine, tmp_path: Path) -> None:
    cfg = compose_run(overrides_to_compose(cmd.args))
    assert isinstance(cfg, RunCfg)
    plan = build_plan(cfg, tmp_path / "run", {})
    cfg.engine.python = str(SGLANG)  # the reader's venv path does not exist here; a real build does
    pr_only = [PR_ONLY[a] for a in cfg.arms if a in PR_ONLY]
    assert not (pr_only and "/main/" in cmd.args_text), f"{cmd.where}: main's build cannot run {pr_only}"
    if pr_only:  # the pull request's own arm: released 0.5.23 must refuse it, naming the flag
        with pytest.raises(ConfigError, match=pr_only[0]):
            engine.validate(cfg, plan)
    else:
        engine.validate(cfg, plan)

"""The SGLang launcher against the real `--help` of the SGLang builds the differential tier installs.

These are real SGLang 0.5.23 and 0.5.9 installs (tests/sglang_oracle/build_env.sh), so the command
lines below are checked against the flags those versions really accept, not against our notes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridbench.config.schema import RunCfg
from hybridbench.engines.launchers import make_sglang_engine
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

pytestmark = pytest.mark.sglang

HOME = Path.home() / ".cache" / "hybridbench"


def engine_for(version: str) -> tuple[RunCfg, object]:
    python = HOME / f"sglang-{version}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
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

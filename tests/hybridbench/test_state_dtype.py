"""model.mamba_ssm_dtype: SGLang's --mamba-ssm-dtype, validated once at plan time, honoured or refused per engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridbench.config.schema import EngineCfg, ModelCfg, RunCfg, WorkloadCfg
from hybridbench.engines.reference_cmd import reference_command
from hybridbench.engines.sglang_cmd import sglang_command
from hybridbench.engines.sim import SimEngine
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm
from hybridbench.plan.build import build_plan
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model

NEW = (Path(__file__).parent / "fixtures" / "sglang_help_new.txt").read_text()


def _cfg(engine: str, dtype: str) -> RunCfg:
    return RunCfg(engine=EngineCfg(name=engine, tp=4), model=ModelCfg(mamba_ssm_dtype=dtype),
                  arms=["disabled", "branching"], workloads={"w": WorkloadCfg()})


def test_an_unknown_dtype_stops_the_plan_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^model\.mamba_ssm_dtype must be one of float32, bfloat16, float16 .*"
                                          r"got 'fp8'$"):
        build_plan(_cfg("sim", "fp8"), tmp_path, {})


def test_sglang_gets_the_flag_checked_against_its_help() -> None:
    def command(dtype: str) -> list[str]:
        return sglang_command(python="py", model=ModelCfg(mamba_ssm_dtype=dtype), engine=EngineCfg(tp=4),
                              arm=plan_arm("branching"), port=30000, help_text=NEW)

    got = command("bfloat16")
    assert got[got.index("--mamba-ssm-dtype") + 1] == "bfloat16"
    assert "--mamba-ssm-dtype" not in command("")  # unset: the server's default (float32)
    with pytest.raises(ConfigError, match=r"^model\.mamba_ssm_dtype needs --mamba-ssm-dtype float16, .*lists "
                                          r"bfloat16, float32"):
        command("float16")  # the fixture's build lists two choices (0.5.9-0.5.23 list three)


def test_the_reference_server_refuses_it() -> None:
    with pytest.raises(ConfigError, match=r"^model\.mamba_ssm_dtype=bfloat16: the reference server keeps float32"):
        reference_command(_cfg("reference", "bfloat16"), plan_arm("branching"), 30000)


@pytest.mark.parametrize(("dtype", "temporal"), [("", "float32"), ("bfloat16", "bfloat16"), ("float32", "float32")])
def test_the_simulator_models_the_state_in_that_dtype(tmp_path: Path, dtype: str, temporal: str) -> None:
    cfg = _cfg("sim", dtype)
    engine = SimEngine()
    engine.validate(cfg, build_plan(cfg, tmp_path, {}))
    assert engine.info().extra["state_dtypes"] == f"conv bfloat16, temporal {temporal}"


def test_a_bf16_state_fits_about_twice_the_slots_in_the_same_memory() -> None:
    # What the sim engine sizes from memory (no fixed pools): Qwen3-Next-80B on 4 H100s.
    def slots(dtype: str) -> int:
        timer = CostModel(get_model("qwen3-next-80b-a3b", temporal_dtype=dtype), get_gpu("h100"), tp=4)
        return engine_config(plan_arm("branching"), timer).state_slots

    fp32, bf16 = slots(""), slots("bfloat16")
    assert fp32 == slots("float32")
    assert bf16 / fp32 == pytest.approx(77_266_944 / 39_518_208, rel=0.01)  # the per-slot bytes' ratio

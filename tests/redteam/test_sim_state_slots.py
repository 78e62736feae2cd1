"""State slots that take all the memory the weights leave: ``engine.max_mamba_cache_size=100000`` on engine=sim (and
``python -m reference_impl.simulate --max-mamba-cache-size 100000``) was refused as "the KV pool holds -154501544",
naming neither the key that caused it nor why. Now the one line names max_mamba_cache_size and the memory."""

from __future__ import annotations

import pytest

from hybridbench.preview.__main__ import main as plan_main
from reference_impl.engine.arms import arm_spec
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model


def test_engine_config_names_the_slots() -> None:
    timer = CostModel(get_model("qwen3.5-9b"), get_gpu("h100"))
    with pytest.raises(ValueError, match=r"^max_mamba_cache_size 100,000: .*no memory for a KV pool"):
        engine_config(arm_spec("lru"), timer, state_slots=100_000)
    assert engine_config(arm_spec("lru"), timer, state_slots=100).kv_tokens > 0


def test_plan_names_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_main(["--no-forecast", "+experiment=smoke", "engine=sim", "engine.max_mamba_cache_size=100000"]) == 2
    err = capsys.readouterr().err
    assert "max_mamba_cache_size" in err and "-1" not in err and len(err.strip().splitlines()) == 1, err

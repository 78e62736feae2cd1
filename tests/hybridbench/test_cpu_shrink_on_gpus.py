"""engine.workload_scale and engine.max_vocab are what a CPU engine can carry (docs/reference/config.md): the reference
engine's own 4x shrink of every load and its token ids below the tiny model's vocabulary. Like sizing=cpu, they must
not reach a GPU server: `engine=sglang engine.workload_scale=4` planned noise's GPU load at 256 of its 1,024 requests
(540,672 of 8,650,752 input tokens) and exited 0. A server on the CPU (engine.gpu=cpu, the SGLang and vLLM CPU
tiers) still takes them, and a deliberate smaller load stays possible per workload (workloads.<name>.scale)."""

from __future__ import annotations

import pytest
from test_experiment_sizing import composed

from hybridbench.config.validate import validate_config
from hybridbench.errors import ConfigError


@pytest.mark.parametrize("engine", ["sglang", "vllm", "tokenspeed"])
@pytest.mark.parametrize("override", ["engine.workload_scale=4", "engine.max_vocab=4096"])
def test_a_cpu_engines_shrink_never_reaches_a_gpu_server(engine: str, override: str) -> None:
    key = override.split("=", maxsplit=1)[0]
    with pytest.raises(ConfigError, match=rf"^{key}: .*engine={engine} on engine.gpu=h100"):
        validate_config(composed("+experiment=radix", f"engine={engine}", override))


@pytest.mark.parametrize("override", ["engine.workload_scale=4", "engine.max_vocab=4096"])
def test_cpu_servers_and_the_simulator_still_take_it(override: str) -> None:
    validate_config(composed("+experiment=radix", "engine=sglang", "engine.gpu=cpu", "engine.tp=1", override))
    validate_config(composed("+experiment=radix", "engine=sim", override))
    validate_config(composed("+experiment=radix", "engine=reference", override))


def test_a_deliberately_smaller_gpu_load_is_per_workload() -> None:
    validate_config(composed("+experiment=radix", "engine=sglang", "workloads.gsp.scale=4"))
    validate_config(composed("+experiment=radix", "engine=sglang", "engine.workload_scale=1", "engine.max_vocab=0"))

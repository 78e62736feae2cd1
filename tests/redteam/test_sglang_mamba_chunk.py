"""GPU plans the real SGLang refuses at start-up, accepted by ``hybridbench plan`` with exit 0:

- ``engine.page_size=48`` with an extra_buffer arm: SGLang asserts ``For SSM models, either chunk_size or page_size
  must be divisible by the other`` (0.5.16 server_args.py ``mamba_cache_chunk_size``; 0.5.23
  arg_groups/overrides.py; 0.5.9 against FLA_CHUNK_SIZE). The harness checked only ``track_interval % page_size``,
  the assertion beside it.
- ``model=nemotron-h-8b engine.track_interval=64`` (the CPU sizings' interval) on 0.5.16 / 0.5.23: Mamba2AttnBackend
  asserts ``mamba_track_interval (64) must be >= mamba_chunk_size (128)`` once the weights are loaded.

Both now exit 2 at plan time with one line naming the key (the command is built with no help text: the refusal is
the model's and the engine's, on every release that reaches it)."""

from __future__ import annotations

import pytest

from hybridbench.config.schema import ArmCfg, EngineCfg, ModelCfg
from hybridbench.engines.sglang_cmd import sglang_command
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

pytestmark = pytest.mark.redteam

NEMOTRON = ModelCfg(name="nemotron-h-8b", hf_id="nvidia/Nemotron-H-8B-Base-8K", architecture="NemotronHForCausalLM")
QWEN = ModelCfg()


def _cmd(model: ModelCfg, arm: str, **engine: object) -> list[str]:
    return sglang_command(python="/venv/bin/python", model=model, engine=EngineCfg(name="sglang", **engine),  # type: ignore[arg-type]
                          arm=plan_arm(arm, ArmCfg()), port=30000, help_text=None)


def test_a_page_that_does_not_divide_the_chunk_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"engine\.page_size=48.*64-token mamba chunk"):
        _cmd(QWEN, "branching", page_size=48, track_interval=192)
    # pages that divide the chunk, or that it divides, are what SGLang runs
    for page in (16, 64, 128):
        assert "--page-size" in _cmd(QWEN, "branching", page_size=page, track_interval=256)
    # no extra_buffer, no chunk grid: the cache-off arm is not refused for it
    assert "--disable-radix-cache" in _cmd(QWEN, "disabled", page_size=48, track_interval=192)


@pytest.mark.parametrize("arm", ["branching", "lazy"])  # lazy is extra_buffer too (enable_mamba_extra_buffer)
def test_nemotron_h_tracks_no_finer_than_its_chunk(arm: str) -> None:
    with pytest.raises(ConfigError, match=r"engine\.track_interval=64.*128-token mamba chunk"):
        _cmd(NEMOTRON, arm, track_interval=64)
    assert "--mamba-track-interval" in _cmd(NEMOTRON, "branching", track_interval=128)
    assert "--mamba-track-interval" in _cmd(NEMOTRON, "branching")  # SGLang's 256
    _cmd(NEMOTRON, "lru", track_interval=64)  # no_buffer does not track
    _cmd(QWEN, "branching", track_interval=64)  # a gated-delta model's chunk is 64

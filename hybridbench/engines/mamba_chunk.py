"""What SGLang's extra_buffer needs of the page size and the tracking interval for a model's mamba chunk: checked at
plan time, since the server refuses both only once it starts (one of them after the weights load)."""

from __future__ import annotations

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec
from reference_impl.models import MODELS

__all__ = ["check_mamba_chunk"]


def check_mamba_chunk(model: ModelCfg, engine: EngineCfg, arm: ArmSpec) -> None:
    """ConfigError for an extra_buffer arm whose page size or tracking interval the server would refuse at start-up
    for the model's mamba chunk (the grid extra_buffer checkpoints on: the model config's ``mamba_chunk_size``, 64 for
    the gated-delta models, 128 for Nemotron-H; 0.5.9 reads 64 for every model, and refuses Nemotron-H's extra_buffer):

    - the page and the chunk must divide one another: ``For SSM models, either chunk_size or page_size must be
      divisible by the other`` (0.5.16 ``ServerArgs.mamba_cache_chunk_size``, 0.5.23 ``arg_groups/overrides.py``
      ``mamba_cache_chunk_size``; 0.5.9 the same against FLA_CHUNK_SIZE), e.g. ``engine.page_size=48``;
    - a Mamba2 model (Nemotron-H) tracks no finer than its chunk: ``mamba_track_interval (64) must be >=
      mamba_chunk_size (128)`` (``Mamba2AttnBackend.__init__``, 0.5.16 and 0.5.23), asserted after the weights load.

    Only models whose chunk is known (``reference_impl.models``) are checked."""
    if not arm.extra_buffer or not model.hybrid:
        return
    known = MODELS.get(model.name)
    if known is None:
        return
    chunk, page = known.mamba_chunk_size, max(engine.page_size, 1)
    if max(chunk, page) % min(chunk, page):
        raise ConfigError(f"engine.page_size={page}: arm {arm.name} ({arm.strategy}) on model {model.name} needs the "
                          f"page and the model's {chunk}-token mamba chunk to divide one another (SGLang refuses it "
                          f"at start-up); use a page size that divides {chunk} or a multiple of it")
    arch = (model.architecture or model.name).lower()
    if arch.startswith(("nemotron-h", "nemotronhfor")) and engine.track_interval < chunk:
        raise ConfigError(f"engine.track_interval={engine.track_interval}: arm {arm.name} ({arm.strategy}) on model "
                          f"{model.name} (Mamba2) needs at least its {chunk}-token mamba chunk (SGLang asserts "
                          f"mamba_track_interval >= mamba_chunk_size once the weights are loaded)")

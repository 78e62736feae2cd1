"""What SGLang's extra_buffer needs of the page size and the tracking interval for a model's mamba chunk: checked at
plan time, since the server refuses both only once it starts (one of them after the weights load)."""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.errors import ConfigError
from reference_impl.engine.arms import ArmSpec
from reference_impl.models import MODELS

__all__ = ["check_mamba_chunk", "short_chunk_warning"]


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


def short_chunk_warning(model: ModelCfg, engine: EngineCfg, arms: Sequence[ArmSpec]) -> str:
    """A plan warning ("" for none) for extra_buffer arms whose prefill chunks are shorter than the model's checkpoint
    grid (its mamba chunk, or the page when larger). SGLang tracks a state only in a forward of at least one grid
    step (0.5.23 ``ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend``: ``extend_len >= checkpoint_grid``;
    0.5.16 alike), so such an arm checkpoints nothing while prefilling, only in decode. 0.5.23 starts it with a warning
    (``mamba_hook.validate_mamba_extra_buffer``); the reference model and the simulator do the same (a forward shorter
    than the chunk tracks nothing), so the forecast already shows it: warned, not refused."""
    names = [a.name for a in arms if a.extra_buffer]
    known = MODELS.get(model.name)
    if not names or not model.hybrid or known is None:
        return ""
    grid = max(known.mamba_chunk_size, engine.page_size, 1)
    if engine.chunked_prefill_size >= grid:
        return ""
    return (f"engine.chunked_prefill_size={engine.chunked_prefill_size} is below the {grid}-token checkpoint grid of "
            f"model {model.name}: arm {', '.join(names)} checkpoints no mamba state while prefilling (a forward "
            "shorter than the grid tracks none; SGLang 0.5.23 warns so at start-up), only in decode, and the "
            "forecast models that")

"""What an engine offers beyond running trials: the facts post-trial probes are matched against at plan time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["COUNTERS", "TOKENSPEED_STATES", "EngineTraits"]


@dataclass(frozen=True, slots=True)
class EngineTraits:
    # Client protocols the server answers (hybridbench.load.client.CLIENTS names); empty: no server at all
    # (the simulator), so no probe can send it a request.
    protocols: frozenset[str] = frozenset()
    flushable: bool = False  # empties its cache on request (vLLM: with VLLM_SERVER_DEV_MODE=1, which it sets)
    greedy_deterministic: bool = False  # temperature 0 returns the same tokens for the same prompt, every time
    # the same prompt gets bitwise the same logits whatever is batched beside it (the float32 CPU reference
    # engine), so greedy answers can be compared exactly; GPU kernels vary with the batch, so flips are noise
    bitwise_reproducible: bool = False
    reference_semantics: bool = False  # its cache follows SGLang's semantics, which reference_impl mirrors
    # the per-trial counters its trial snapshots carry (COUNTERS): a check that reads only ones it lacks is
    # inconclusive by design on it, which the plan says beforehand
    counters: frozenset[str] = frozenset()
    # engine.track_interval reaches it (SGLang's --mamba-track-interval, the reference server's and the simulator's
    # own); vLLM's states follow its block size and TokenSpeed reads no such flag: an override changes nothing there
    track_interval: bool = True
    # Where its cache keeps a recurrent state while a request decodes, for the kl probe's decode variant (which must
    # decode past one): "track_interval" (every engine.track_interval tokens: SGLang's extra_buffer, the reference),
    # "block" (vLLM: at the ends of the blocks it aligned for the model, read from its /metrics, in its `all` cache
    # mode; its `align` mode, the no_buffer arms', keeps none while decoding), or "none" (it keeps none: a decode hit
    # cannot happen by design, so the variant is skipped, never failed).
    decode_states: str = "track_interval"
    # Whether its cache can keep a state where two prompts diverge, for the kl probe's branch variant: SGLang's
    # extra_buffer keeps the branch point, vLLM's block ends below it can hit; TokenSpeed's forward keeps one
    # checkpoint, at its last page-aligned point, not the branch point (docs/engines/tokenspeed.md): False.
    branch_points: bool = True


# evicted_tokens: KV tokens evicted from the device; evicted_states: recurrent states evicted there;
# host_loaded_tokens: KV tokens hits loaded back from the host tier (hybridbench.engines.evictions for servers).
COUNTERS = frozenset({"evicted_tokens", "evicted_states", "host_loaded_tokens"})

# Where TokenSpeed's cache keeps states (its server's traits, and the reference server's when it mirrors that cache):
# none while decoding, none at a branch point (docs/engines/tokenspeed.md).
TOKENSPEED_STATES: dict[str, Any] = {"decode_states": "none", "branch_points": False}

"""Cache arms (docs/reference/arms.md): the one place arm names are parsed.

An arm is a cache configuration; arms compose with ``+`` where that makes sense (``branching+seglen``,
``marconi+l2``). :func:`arm_spec` turns a name into a frozen :class:`ArmSpec` (cache on/off, strategy,
eviction policy, host tier) and nothing else re-reads the name; the knobs (``arm.*`` in hybridbench's config)
ride along in :class:`ArmKnobs`. Which specs an engine can express is the engine's own table;
:func:`parse_arm` is the reference engines' (server, simulator): everything but a policy that brings its
own tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = ["ARMS", "EXTRA_BUFFER", "HICACHE_RATIO_MAX", "HOST_TIER_GB_MAX", "NOT_ON_REFERENCE", "SEGLEN_EFF_WEIGHT_MAX",
           "ArmKnobs", "ArmSpec", "L2Knobs", "Strategy", "arm_spec", "parse_arm"]

Strategy = Literal["disabled", "no_buffer", "extra_buffer", "extra_buffer_lazy"]
# extra_buffer's two flavours: the same checkpoints and branch points; lazy holds one ping-pong slot, not two
EXTRA_BUFFER: frozenset[str] = frozenset({"extra_buffer", "extra_buffer_lazy"})

# The knobs' ranges, refused beyond at plan time (hybridbench) and by the reference server's flags.
# seglen's eff_weight balances the replay-length term against recency (SGLang PR #22172; both terms are
# min-max normalised, reference_impl/policies/seglen.py): 0 is LRU, 1 weighs them equally, the PR's example 0.85.
SEGLEN_EFF_WEIGHT_MAX = 1.0
# --hicache-ratio: host pools as a multiple of the device pools (SGLang's default 2; its docs: lower it for less
# host memory); a hundred times the device pools is beyond any host (1e300 overflowed torch mid-run).
HICACHE_RATIO_MAX = 100.0
# vLLM --kv-offloading-size, GiB of host memory: 16 TiB is beyond any single host.
HOST_TIER_GB_MAX = 16384.0


@dataclass(frozen=True, slots=True)
class L2Knobs:
    """The host tier's knobs (hybridbench's ``arm.l2.*``); each engine maps the ones it has a flag for."""

    hicache_ratio: float = 2.0  # host pools as a multiple of the device pools (SGLang's --hicache-ratio)
    hicache_write_policy: str = "write_through"
    hicache_io_backend: str = "direct"  # "" = leave the server's default
    hicache_mem_layout: str = "page_first_direct"  # "" = leave the server's default
    host_tier_gb: float = 0.0  # an absolute host size in GiB (vLLM); 0 = not set


@dataclass(frozen=True, slots=True)
class ArmKnobs:
    """What an arm's parts were tuned to. ``eff_weight`` is the eviction policy's weight (None: the policy's
    default, or a policy that has none); ``l2`` is None unless the arm has a host tier."""

    eff_weight: float | None = None
    l2: L2Knobs | None = None


@dataclass(frozen=True, slots=True)
class ArmSpec:
    name: str
    strategy: Strategy
    policy: str = "lru"
    host_tier: bool = False
    knobs: ArmKnobs = field(default_factory=ArmKnobs)

    @property
    def cache_on(self) -> bool:
        return self.strategy != "disabled"

    @property
    def extra_buffer(self) -> bool:
        """Checkpoints at chunk and track-interval boundaries and branch points (either extra_buffer flavour)."""
        return self.strategy in EXTRA_BUFFER


ARMS: dict[str, ArmSpec] = {
    a.name: a
    for a in (
        ArmSpec("disabled", "disabled"),  # --disable-radix-cache
        ArmSpec("lru", "no_buffer"),  # --mamba-radix-cache-strategy no_buffer
        ArmSpec("branching", "extra_buffer"),  # --mamba-radix-cache-strategy extra_buffer
        ArmSpec("seglen", "extra_buffer", policy="seglen"),  # as the seglen PR launches it
        ArmSpec("marconi", "extra_buffer", policy="marconi"),  # as the marconi PR (#21862) launches it
        ArmSpec("l2", "extra_buffer", host_tier=True),  # --enable-hierarchical-cache
        # --mamba-radix-cache-strategy extra_buffer_lazy (SGLang PR #27118, 0.5.16 on): branching's checkpoints with
        # one ping-pong slot a request, so 3 + 1 state slots a running request instead of 3 + 2
        ArmSpec("lazy", "extra_buffer_lazy"),
        # Marconi's baselines (its paper's names): LRU over leaves with Marconi's admission, and vLLM's
        # fine-grained 32-token blocks each with a state checkpoint. Only the trace replayer has their trees.
        ArmSpec("sglang_plus", "no_buffer", policy="sglang_plus"),
        ArmSpec("vllm_plus", "no_buffer", policy="vllm_plus"),
    )
}

# Policies that bring their own tree (Marconi's) cannot run inside the scheduler's SGLang tree.
NOT_ON_REFERENCE = {
    "marconi": "the marconi arm needs Marconi's admission tree; use engine=replay "
               "(or `python -m reference_impl.replay --policy marconi`)",
    "sglang_plus": "Marconi's SGLang+ baseline lives in Marconi's tree; use engine=replay",
    "vllm_plus": "Marconi's vLLM+ baseline (32-token blocks) has its own tree; use engine=replay",
}


def arm_spec(text: str) -> ArmSpec:
    """``branching+seglen+l2`` -> one ArmSpec; ValueError names an unknown part or a bad composition.

    ``NAME@label`` is the arm NAME under another name (``branching@copy``): the same configuration run twice as
    two arms, on two servers (+experiment=noise's A/A run); the label is kept in the name and means nothing else.
    """
    labels = []
    parts = []
    for raw in text.split("+"):
        part, at, label = raw.partition("@")
        if at:
            labels.append(label.strip())
        if part.strip():
            parts.append(part.strip())
        elif text.strip():  # "lru+" or "+l2": an arm was left out, not meant away
            raise ValueError(f"arm {text!r}: an empty part between '+' signs; compose named arms, e.g. branching+l2")
    if not parts:
        raise ValueError("empty arm name")
    if len(labels) > 1 or (labels and not re.fullmatch(r"[A-Za-z0-9_-]+", labels[0])):
        raise ValueError(f"arm {text!r}: one label after '@' (letters, digits, _ and -), e.g. branching@copy")
    spec: ArmSpec | None = None
    for part in parts:
        if part not in ARMS:
            raise ValueError(f"unknown arm {part!r}; choose from {', '.join(ARMS)} (compose with '+')")
        base = ARMS[part]
        if spec is None:
            spec = base
            continue
        if "disabled" in (spec.name, base.name):
            raise ValueError(f"arm {text!r}: arm 'disabled' does not compose")
        if "lru" not in (spec.policy, base.policy) and spec.policy != base.policy:
            raise ValueError(f"arm {text!r}: {spec.policy} and {base.policy} are both eviction policies; choose one")
        both = (spec.strategy, base.strategy)
        strategy: Strategy = ("extra_buffer_lazy" if "extra_buffer_lazy" in both
                              else "extra_buffer" if "extra_buffer" in both else "no_buffer")
        policy = base.policy if base.policy != "lru" else spec.policy
        spec = replace(spec, strategy=strategy, policy=policy, host_tier=spec.host_tier or base.host_tier)
    assert spec is not None
    return replace(spec, name="+".join(parts) + (f"@{labels[0]}" if labels else ""))


def parse_arm(text: str) -> ArmSpec:
    """:func:`arm_spec`, refusing what the reference engines cannot express (ValueError naming the arm)."""
    spec = arm_spec(text)
    if spec.policy in NOT_ON_REFERENCE:
        raise ValueError(f"arm {spec.policy!r} cannot run on this engine: {NOT_ON_REFERENCE[spec.policy]}")
    return spec

"""prefix_groups: groups of prompts sharing a prefix, of different lengths per group, shuffled with unrelated
noise prompts — the shapes of the seglen PR's (SGLang #22172) benchmark datasets, token-level.

``multi-group`` is ``multi_group_shared_prefix_dataset.json`` as its public generator builds it (12 groups,
prefixes 256..2304, 180 prompts per group, suffixes of 48..128 cycled by group + request, 600 noise prompts of
96..320 cycled by id, shuffled with seed 42); the generator counts words, one token each by its own estimate,
and so do we. ``mixed-7k-10k-noise`` stands for ``mixed_prefix_eviction_dataset_7k_10k_with_noise.json``,
whose generator is not public: only its name (7k-10k-token prefixes, noise), its size (1800 prompts) and the
hit rate it gave (~95% for both policies) are; the rest is inferred (workloads/README.md). bench_serving's
sharegpt mode replaces each completion with ``--sharegpt-output-len`` (128 in the PR's runs): ``output_len``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from workloads.errors import WorkloadError, require
from workloads.limits import check_size
from workloads.params import param
from workloads.sampling import distinct_tokens, random_tokens
from workloads.trace import TraceRow, TraceStream

__all__ = ["PRESETS", "PrefixGroupsParams", "build", "generate_prefix_groups", "lengths"]


def lengths(text: str, name: str) -> tuple[int, ...]:
    """``"256,384"`` -> (256, 384); WorkloadError naming the parameter otherwise."""
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise WorkloadError(f"{name}: expected comma-separated token counts, got {text!r}") from None
    require(bool(out) and all(n >= 1 for n in out), f"{name}: expected token counts >= 1, got {text!r}")
    return out


@dataclass(frozen=True, slots=True)
class PrefixGroupsParams:
    num_groups: int = param(12, "shared-prefix groups")
    prompts_per_group: int = param(180, "prompts per group")
    num_noise: int = param(600, "unrelated noise prompts (no shared prefix)")
    prefix_lens: str = param("", "the groups' prefix lengths, comma-separated (one per group); empty: "
                                 "prefix_min..prefix_max evenly spaced")
    prefix_min: int = param(256, "shortest group prefix (with prefix_lens empty)")
    prefix_max: int = param(2304, "longest group prefix (with prefix_lens empty)")
    suffix_lens: str = param("48,64,80,96,112,128", "suffix lengths, cycled by group + request")
    noise_lens: str = param("96,128,160,224,320", "noise prompt lengths, cycled by noise id")
    output_len: int = param(128, "output tokens (bench_serving --sharegpt-output-len)")

    def group_prefix_lens(self) -> tuple[int, ...]:
        if self.prefix_lens:
            lens = lengths(self.prefix_lens, "prefix_lens")
            require(len(lens) == self.num_groups,
                    f"prefix_lens: {len(lens)} lengths for num_groups={self.num_groups}")
            return lens
        if self.num_groups == 1:
            return (self.prefix_min,)
        step = (self.prefix_max - self.prefix_min) / (self.num_groups - 1)
        return tuple(round(self.prefix_min + i * step) for i in range(self.num_groups))

    def validate(self) -> None:
        require(self.num_groups >= 1, f"num_groups must be >= 1, got {self.num_groups}")
        require(self.prompts_per_group >= 1, f"prompts_per_group must be >= 1, got {self.prompts_per_group}")
        require(self.num_noise >= 0, f"num_noise must be >= 0, got {self.num_noise}")
        require(1 <= self.prefix_min <= self.prefix_max,
                f"need 1 <= prefix_min <= prefix_max, got {self.prefix_min} and {self.prefix_max}")
        require(self.output_len >= 0, f"output_len must be >= 0, got {self.output_len}")
        grouped = self.num_groups * self.prompts_per_group
        check_size(grouped + self.num_noise, 0, "num_groups * prompts_per_group + num_noise", "")
        prefix = max(self.group_prefix_lens())
        suffix, noise = max(lengths(self.suffix_lens, "suffix_lens")), max(lengths(self.noise_lens, "noise_lens"))
        tokens = grouped * (prefix + suffix + self.output_len) + self.num_noise * (noise + self.output_len)
        check_size(0, tokens, "", "num_groups * prompts_per_group * (prefix, suffix, output_len)"
                                  " + num_noise * (noise, output_len)")


PRESETS: dict[str, PrefixGroupsParams] = {
    # multi_group_shared_prefix_dataset.json: the public generator's defaults (its prefix list is not evenly
    # spaced: 128 apart up to 1024, then 256 apart). 2760 prompts, 21.7% noise.
    "multi-group": PrefixGroupsParams(prefix_lens="256,384,512,640,768,896,1024,1280,1536,1792,2048,2304"),
    # mixed_prefix_eviction_dataset_7k_10k_with_noise.json, inferred: 1800 prompts (the blog's count), six
    # groups of 7000..10000-token prefixes, 300 noise prompts; suffixes and noise as in multi-group.
    "mixed-7k-10k-noise": PrefixGroupsParams(num_groups=6, prompts_per_group=250, num_noise=300,
                                             prefix_min=7000, prefix_max=10000),
}


def generate_prefix_groups(params: PrefixGroupsParams, vocab_size: int, seed: int,
                           preset: str | None = None) -> TraceStream:
    """One single-turn session per prompt (``session_id`` = position in the shuffled dataset), ``ts = 0``;
    ``group`` is the prompt's group; noise rows carry none, so scaling counts keeps every f-th noise prompt
    as its own unit (``workloads.scale``)."""
    params.validate()
    require(vocab_size >= 1, f"vocab size must be >= 1, got {vocab_size}")
    rng = random.Random(seed)
    g_count, per, n_noise = params.num_groups, params.prompts_per_group, params.num_noise
    suffix_lens, noise_lens = lengths(params.suffix_lens, "suffix_lens"), lengths(params.noise_lens, "noise_lens")
    # Distinct first tokens: no two groups and no noise prompt share even one token of prefix.
    firsts = distinct_tokens(rng, g_count + n_noise, vocab_size, "group prefixes and noise prompts")
    prefixes = [(firsts[g], *random_tokens(rng, n - 1, vocab_size))
                for g, n in enumerate(params.group_prefix_lens())]
    prompts: list[tuple[int, tuple[int, ...]]] = []
    for g in range(g_count):
        q_first = distinct_tokens(rng, per, vocab_size, "suffixes of one group")  # prompts part at the prefix
        for r in range(per):
            n = suffix_lens[(g + r) % len(suffix_lens)]
            prompts.append((g, prefixes[g] + (q_first[r], *random_tokens(rng, n - 1, vocab_size))))
    for i in range(n_noise):
        n = noise_lens[i % len(noise_lens)]
        prompts.append((-1, (firsts[g_count + i], *random_tokens(rng, n - 1, vocab_size))))
    rng.shuffle(prompts)  # the PR's generator shuffles the whole dataset once

    def rows() -> Iterator[TraceRow]:
        for i, (group, inputs) in enumerate(prompts):
            extra = {"group": group} if group >= 0 else {}
            yield TraceRow(i, 0, 0.0, inputs, random_tokens(rng, params.output_len, vocab_size), extra)

    metadata: dict[str, Any] = {
        "generator": "prefix_groups",
        "semantics": "seglen PR (SGLang #22172) dataset shapes, token-level; one token per word of its generator",
        "preset": preset,
        "params": asdict(params),
        "seed": seed,
        "vocab_size": vocab_size,
        "synthetic": True,
    }
    return TraceStream(rows(), metadata)


def build(params: PrefixGroupsParams, source: None, vocab_size: int, seed: int, preset: str | None) -> TraceStream:
    """The registry's entry point (``workloads.registry``)."""
    return generate_prefix_groups(params, vocab_size, seed, preset)

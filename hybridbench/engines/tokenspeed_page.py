"""The page (prefix granularity) a TokenSpeed server really serves, from the config and the installed release: the
token grain of its KV pages and of its prefix-cache hits, which the plan records (``planned_page``), forecasts at and
rounds a fixed KV pool to.

``engine.page_size`` is always passed (``--block-size`` on 0.1.0, ``--prefix-granularity`` on 0.1.1), but a model's
cache layout can override it:

* **0.1.1** picks a cache recipe per model (``runtime/layers/attention/registry.py`` ``_resolve_cache_family``): a
  Qwen3.5 GDN hybrid gets ``qwen_gdn``, Nemotron-H ``mamba2``, and both serve ``_QWEN_GDN_PREFIX_GRANULARITY`` = 128
  tokens whatever the flag says (``kv_cache/recipes/qwen35.py``; ``Mamba2Recipe`` inherits it). A plain-attention
  model gets the ordinary recipe, which keeps the flag's page.
* **0.1.0** keeps the flag's page on a radix ``tokenspeed-scheduler`` build, but on one built with
  ``TOKENSPEED_FLAT_KVCACHE`` it raises a GDN model's page until one KV page row covers a state row
  (``registry.py`` ``create_attn_components``, ``configs/flat_memory_plan.py`` ``equalized_block_size``), and the
  scheduler then takes the gcd of its groups' pages. Which build ``engine.python`` has is not read at plan time, so a
  Qwen3.5 model's page on 0.1.0 is unknown until the server logs it (``served_page``).

The state grain: with prefix caching on, 0.1.1 floors ``--chunked-prefill-size`` to a multiple of the LCM of its
recurrent-state cache groups' checkpoint spans (``runtime/execution/device.py``, ``runtime/engine/scheduler_utils.py``
``aligned_max_scheduled_tokens``: a state snapshot registers only where a chunk ends on one) and refuses a chunk below
it; with it off the chunk is left as given. Both state recipes checkpoint every prefix-granularity tokens
(``recipes/spec.py`` ``_layer_group_spec``), so the grain is the served page, 128; a plain-attention model has no
state group and 0.1.0 no such floor (grain 0: nothing floored, or not known).

Only the architectures hybridbench's models name (conf/model) are computed; any other, or an ``engine.extra_args``
flag that can change the architecture the release sees (``PAGE_FLAGS``), leaves the page unknown (0).
tests/tokenspeed/test_tokenspeed_served_page.py runs each release's own recipe dispatch and layout (0.1.1) and
``create_attn_components`` on both scheduler builds (0.1.0) on those models' configs against :func:`tokenspeed_page`.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

from hybridbench.config.schema import EngineCfg, ModelCfg, RunCfg
from hybridbench.engines.owned_flags import given_flags
from hybridbench.engines.server import installed_version
from hybridbench.engines.tokenspeed_cmd import TokenSpeedVersion, tokenspeed_version
from hybridbench.errors import ConfigError

__all__ = ["GDN_ARCHITECTURES", "MAMBA2_ARCHITECTURES", "PAGE_FLAGS", "PLAIN_ARCHITECTURES", "RECIPE_PAGE_011",
           "TokenSpeedPage", "installed_tokenspeed", "planned_tokenspeed_page", "tokenspeed_page"]

RECIPE_PAGE_011 = 128  # 0.1.1's kv_cache/recipes/qwen35.py _QWEN_GDN_PREFIX_GRANULARITY (Mamba2Recipe inherits it)
# The architectures each family is dispatched on (registry.py _HYBRID_GDN_ARCHITECTURES / _HYBRID_MAMBA2_ARCHITECTURES,
# the ones a release serves), and the plain-attention ones whose ordinary (mha) recipe keeps the flag's page: those
# conf/model names, each run through both releases' own code (tests/tokenspeed/test_tokenspeed_served_page.py).
GDN_ARCHITECTURES = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
MAMBA2_ARCHITECTURES = frozenset({"NemotronHForCausalLM"})
PLAIN_ARCHITECTURES = frozenset({"LlamaForCausalLM"})  # conf/model's dense one (tiny-llama)
PAGE_FLAGS = ("--hf-overrides",)  # rewrites the checkpoint's config, architectures and layer types included


@dataclass(frozen=True, slots=True)
class TokenSpeedPage:
    tokens: int  # the page the server serves; 0 when it cannot be said from the config
    why: str  # how the release arrives at it, or why it cannot be said
    state_grain: int = 0  # what a cache-on server floors the chunk to a multiple of; 0: nothing, or not known


def tokenspeed_page(model: ModelCfg, engine: EngineCfg, version: TokenSpeedVersion) -> TokenSpeedPage:
    """The page TokenSpeed ``version`` serves ``model`` with when given ``engine.page_size`` (> 1, always passed)."""
    asked, flag, arch = engine.page_size, version.granularity_flag, model.architecture
    given = sorted(set(PAGE_FLAGS) & given_flags([str(a) for a in engine.extra_args]))
    if given:
        return TokenSpeedPage(0, f"engine.extra_args has {given[0]}, which can change the cache recipe TokenSpeed "
                                 "picks for the model at start-up")
    if arch in PLAIN_ARCHITECTURES:
        return TokenSpeedPage(asked, f"engine.page_size={asked} ({flag}; a plain-attention model keeps it)")
    if version.version == "0.1.1" and arch in GDN_ARCHITECTURES | MAMBA2_ARCHITECTURES:
        recipe = "Qwen3.5 GDN (qwen_gdn)" if arch in GDN_ARCHITECTURES else "Mamba2"
        if asked == RECIPE_PAGE_011:
            return TokenSpeedPage(asked, f"engine.page_size={asked}, the page TokenSpeed 0.1.1's {recipe} cache recipe "
                                         "serves whatever the flag says", RECIPE_PAGE_011)
        return TokenSpeedPage(RECIPE_PAGE_011, f"TokenSpeed 0.1.1's {recipe} cache recipe serves "
                                               f"{RECIPE_PAGE_011}-token pages whatever {flag} says "
                                               f"(engine.page_size={asked} is not read)", RECIPE_PAGE_011)
    if version.version == "0.1.0" and arch in GDN_ARCHITECTURES:
        return TokenSpeedPage(0, f"TokenSpeed 0.1.0 serves engine.page_size={asked} with a radix tokenspeed-scheduler "
                                 "build but raises a GDN model's page until it holds a state row with a flat-KV one, "
                                 "and which build engine.python has is not read at plan time")
    known = sorted(GDN_ARCHITECTURES | MAMBA2_ARCHITECTURES | PLAIN_ARCHITECTURES)
    return TokenSpeedPage(0, f"model.architecture={arch or '(none)'} ({model.name}) is not one whose TokenSpeed "
                             f"{version.version} page hybridbench computes ({', '.join(known)})")


@functools.cache
def installed_tokenspeed(python: str) -> TokenSpeedVersion | None:
    """The release ``python`` has (None: none hybridbench knows; the run itself is refused then)."""
    try:
        return tokenspeed_version(installed_version(python, "tokenspeed"))
    except ConfigError:
        return None


def planned_tokenspeed_page(cfg: RunCfg, version: TokenSpeedVersion | None = None) -> TokenSpeedPage:
    """:func:`tokenspeed_page` for a run (``version``: the release the engine resolved, else engine.python's)."""
    version = version or installed_tokenspeed(cfg.engine.python or sys.executable)
    if version is None:
        return TokenSpeedPage(0, "engine.python has no TokenSpeed release hybridbench knows")
    return tokenspeed_page(cfg.model, cfg.engine, version)

"""engine.tp against the model's heads: the plan-time refusal of a tensor-parallel size no GPU server can split.

Every GPU server shards each layer's heads over its TP ranks and stops at start-up (after the weights began to load,
or at the first warm-up forward) when a count does not split. ``engine.tp=3`` or ``engine.tp=1000`` planned and
forecast "on 1000 x h100" with exit 0, then died on the GPU runner. The rules, as each release's model code asserts
them (file:line in each release's package; the same rule in SGLang 0.5.9, 0.5.16 and 0.5.23, so the release the
plan resolves does not change them):

- attention heads divisible by the attention TP size: SGLang models/qwen3_next.py:585 (0.5.9) / :618 (0.5.16) /
  :624 (0.5.23), qwen3_5.py:429 / :753 / :1293, nemotron_h.py:433 / :615 / :696; vLLM 0.32.0 config/model.py:1546
  (``verify_with_parallel_config``, before any weight) and models/qwen3_next.py:296, nemotron_h.py:441; TokenSpeed
  runtime/models/utils.py:37 (0.1.0) / :31 (0.1.1) ``validate_attention_partition``.
- KV heads: split when at least TP of them (divisible), else copied (TP a multiple of them): SGLang
  qwen3_next.py:591-595 / :624-628 / :630-634, nemotron_h.py:439-443 / :621-625 / :702-706; vLLM
  models/qwen3_next.py:302-306, nemotron_h.py:447-451; TokenSpeed utils.py:45-53 (0.1.0) / :39-47 (0.1.1).
- gated delta net (Qwen3-Next, Qwen3.5) value heads divisible: SGLang's state shape ``divide(num_heads, tp)``
  (configs/mamba_utils.py:166 / :198 / :230, num_heads = linear_num_value_heads) and in_proj_ba's
  ``MergedColumnParallelLinear`` (layers/linear.py:512 / :535 / :693); vLLM layers/mamba/gdn/
  qwen_gdn_linear_attn.py:557 ``divide(num_v_heads, tp)``.
- gated delta net key heads divisible: the q/k projections are cut into ``num_k_heads // tp`` heads a rank
  (SGLang models/qwen3_next.py:339 / :339 / :377, vLLM qwen_gdn_linear_attn.py:736), which loses heads otherwise;
  SGLang pads both linear head counts to a multiple of TP on CPU alone, exactly when ``linear_num_key_heads % tp``
  or ``linear_num_value_heads % tp`` is not 0 (configs/update_config.py:60 / :97 / :104), never on a GPU.
- Mamba2 (Nemotron-H) heads divisible: SGLang layers/attention/mamba/mamba.py:202 / :242 / :245, vLLM
  layers/mamba/mamba_mixer2.py:315, TokenSpeed 0.1.1 runtime/models/nemotron_h.py:261 (0.1.0 has no Nemotron-H).
- Mamba2 groups divisible, or one group (copied to every rank): SGLang mamba.py:205 / :245 / :249, vLLM
  mamba_mixer2.py:319; TokenSpeed 0.1.1 nemotron_h.py:261 takes divisible only.

SGLang's data-parallel attention (``--enable-dp-attention --dp-size D``, 0.5.23's ``--attn-dp-size D``) runs the
attention and linear-attention layers, and the Mamba2 mixer (mamba.py:233-240 in 0.5.23), on TP / D ranks each: the
rules are held to that width there. TP past the GPUs this machine has is the doctor's (hybridbench/doctor/machine.py
``gpu_finding``: a run refuses it, the plan warns), not a rule of the model. The simulator models an SGLang server,
so ``engine=sim`` is held to SGLang's rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hybridbench.config.schema import ModelCfg, RunCfg
from hybridbench.engines.sglang_cmd import sglang_attention_dp_groups
from hybridbench.errors import ConfigError

__all__ = ["SPLIT_ENGINES", "HeadSplit", "head_splits", "refuse_unsplit_tp", "split_refusal"]

SPLIT_ENGINES = frozenset({"sglang", "vllm", "tokenspeed", "sim"})
Rule = Literal["divides", "divides or copied", "divides or one"]


@dataclass(frozen=True, slots=True)
class HeadSplit:
    """One head count the TP ranks share, and how a server requires it to split."""

    key: str  # model.KEY that holds it
    field: str  # its config.json name
    count: int
    rule: Rule

    def splits(self, tp: int) -> bool:
        if self.count % tp == 0:
            return True
        if self.rule == "divides or copied":  # fewer heads than ranks: each rank holds a copy of one
            return self.count < tp and tp % self.count == 0
        return self.rule == "divides or one" and self.count == 1

    def broken(self, tp: int) -> str:
        if self.rule == "divides or copied" and self.count < tp:
            return f"with fewer of them than ranks, engine.tp must be a multiple of them (a copy on each rank), and " \
                   f"{tp} is not"
        return f"engine.tp must divide them{' (or they must be 1)' if self.rule == 'divides or one' else ''}, and " \
               f"{tp} does not"


def head_splits(model: ModelCfg, engine: str) -> tuple[HeadSplit, ...]:
    """The model's head counts that ``engine`` splits over TP (those conf/model knows: 0 is left out)."""
    groups: Rule = "divides" if engine == "tokenspeed" else "divides or one"  # nemotron_h.py:261 takes no copy
    splits = (
        HeadSplit("model.attention_heads", "num_attention_heads", model.attention_heads, "divides"),
        HeadSplit("model.kv_heads", "num_key_value_heads", model.kv_heads, "divides or copied"),
        HeadSplit("model.linear_key_heads", "linear_num_key_heads", model.linear_key_heads, "divides"),
        HeadSplit("model.linear_value_heads", "linear_num_value_heads", model.linear_value_heads, "divides"),
        HeadSplit("model.mamba_heads", "mamba_num_heads", model.mamba_heads, "divides"),
        HeadSplit("model.mamba_groups", "n_groups", model.mamba_groups, groups),
    )
    return tuple(s for s in splits if s.count > 0)


def _width(cfg: RunCfg) -> tuple[int, str]:
    """The TP size the layers are split over, and how it comes from engine.tp."""
    tp = cfg.engine.tp
    if cfg.engine.name != "sglang":
        return tp, ""
    groups = sglang_attention_dp_groups([str(a) for a in cfg.engine.extra_args])
    if groups <= 1 or tp % groups:  # a DP size that does not divide tp is refused by the command line's check
        return tp, ""
    return tp // groups, f" / {groups} data-parallel attention groups in engine.extra_args = {tp // groups} ranks"


def split_refusal(cfg: RunCfg) -> str:
    """Why no GPU server of ``cfg.model`` can start at ``engine.tp`` ("" when every known head count splits)."""
    engine, model = cfg.engine.name, cfg.model
    if engine not in SPLIT_ENGINES or cfg.engine.tp < 1:
        return ""
    splits = head_splits(model, engine)
    width, how = _width(cfg)
    bad = next((s for s in splits if not s.splits(width)), None)
    if bad is None:
        return ""
    fits = [t for t in range(1, max(s.count for s in splits) + 1) if all(s.splits(t) for s in splits)]
    server = "the simulated SGLang server" if engine == "sim" else engine
    return (f"engine.tp={cfg.engine.tp}{how}: model {model.name} has {bad.count} {bad.field} ({bad.key}, from its "
            f"config.json); {bad.broken(width)}, so {server} would stop at start-up; engine.tp values that split "
            f"every layer of it: {', '.join(map(str, fits))}"
            + (" (times the data-parallel attention groups)" if how else ""))


def refuse_unsplit_tp(cfg: RunCfg) -> None:
    """ConfigError (exit 2) naming engine.tp, the model and the rule it breaks."""
    if why := split_refusal(cfg):
        raise ConfigError(why)

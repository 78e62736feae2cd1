"""The context length a GPU server serves, and the plan-time refusal of a workload with a request longer than it.

A server that loads a checkpoint takes config.json's context length (``max_position_embeddings``, the text config's
for Qwen3.5: SGLang 0.5.23 ``ModelConfig._derive_context_length`` via ``get_context_length``, TokenSpeed 0.1.1's
copy of it, vLLM 0.32.0 ``ModelConfig.get_and_verify_max_len``) unless its flag gives another. Each refuses a longer
request, whatever its pools could hold: SGLang answers "The input (N tokens) is longer than the model's context
length" or "Requested token count exceeds the model's maximum context length" (``TokenizerManager.
_validate_one_request``), vLLM "This model's maximum context length is N tokens" (``renderers/params.py``), and
TokenSpeed refuses the input or cuts ``max_new_tokens`` (``InputProcessor``), which fails a request the harness
asks for all its tokens. ``model=nemotron-h-8b`` (Nemotron-H-8B-Base-8K: 8,192 tokens) planned radix's 10,624-token
requests, prefill_overhead's 20,481 and l2's sessions up to 16K with exit 0, and every one of them would have failed
on the GPUs. The simulator models the same server, so ``engine=sim`` is held to it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridbench.config.schema import RunCfg
from hybridbench.engines.gpu_pool import MARGIN
from hybridbench.engines.owned_flags import last_flag
from hybridbench.errors import ConfigError
from reference_impl.engine.config import fits_kv_pool
from workloads.trace import TraceRow

__all__ = ["CONTEXT_FLAGS", "refuse_over_context", "served_context"]

# The flag that sets each server's context length (its --help: SGLang's --context-length, vLLM's and TokenSpeed's
# --max-model-len; vLLM's parser also takes the underscore spelling).
CONTEXT_FLAGS: dict[str, tuple[str, ...]] = {"sglang": ("--context-length",), "tokenspeed": ("--max-model-len",),
                                             "vllm": ("--max-model-len", "--max_model_len"), "sim": ()}
# SGLang and its fork TokenSpeed keep a few tokens of the context for themselves (hybridbench.engines.gpu_pool:
# input below max_req_len - 5, input + new at most max_req_len - 1, max_req_len = context - 1); vLLM serves up to it.
_MARGIN = {"sglang": MARGIN, "tokenspeed": MARGIN, "sim": MARGIN, "vllm": 0}


def served_context(cfg: RunCfg) -> tuple[int, str] | None:
    """(tokens a request may use, what sets it) on an engine that serves ``model.hf_id``'s checkpoint (or models such
    a server: sim); None when unknown (model.context_length 0, a flag value this cannot read) or another engine."""
    engine = cfg.engine.name
    if engine not in CONTEXT_FLAGS:
        return None
    context, key = cfg.model.context_length, f"model.context_length={cfg.model.context_length}"
    given = last_flag([str(a) for a in cfg.engine.extra_args], *CONTEXT_FLAGS[engine])
    if given is not None:
        flag, value = given
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            # vLLM's "auto" / -1 (the longest that fits memory, never past the model's) or a form such as "16k":
            # the model's own length still bounds what any server of it takes
            return (context - _MARGIN[engine], key) if context > 0 else None
        context, key = int(value), f"{flag} {value} in engine.extra_args"
    if context <= 0:
        return None
    margin = _MARGIN[engine]
    return context - margin, key + (f", less the server's {margin}-token margin" if margin else "")


def refuse_over_context(cfg: RunCfg, traces: Mapping[str, Sequence[TraceRow]]) -> None:
    """ConfigError naming the first workload with a request (prompt and every token asked for) longer than the
    context length the server serves."""
    served = served_context(cfg)
    if served is None:
        return
    limit, key = served
    for name, rows in traces.items():
        over = [r for r in rows if not fits_kv_pool(r.num_input_tokens, r.num_output_tokens, limit)]
        if over:
            longest = max(over, key=lambda r: r.num_input_tokens + max(1, r.num_output_tokens))
            need = longest.num_input_tokens + max(1, longest.num_output_tokens)
            raise ConfigError(
                f"workloads.{name}: {len(over)} of {len(rows)} requests are longer than the context length engine "
                f"{cfg.engine.name} serves {cfg.model.name} with; the longest needs {need} tokens "
                f"({longest.num_input_tokens} input + {max(1, longest.num_output_tokens)} new) but it takes "
                f"{max(limit, 0)} ({key}), so the server would refuse them: choose a model with a longer context or "
                f"shrink the workload (workloads.{name}.scale)")

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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hybridbench.config.schema import RunCfg
from hybridbench.engines.owned_flags import last_flag
from hybridbench.errors import ConfigError
from workloads.trace import TraceRow

__all__ = ["CONTEXT_FLAGS", "ServedContext", "refuse_over_context", "served_context", "vllm_max_model_len"]

# The flag that sets each server's context length (its --help: SGLang's --context-length, vLLM's and TokenSpeed's
# --max-model-len; vLLM's parser also takes the underscore spelling).
CONTEXT_FLAGS: dict[str, tuple[str, ...]] = {"sglang": ("--context-length",), "tokenspeed": ("--max-model-len",),
                                             "vllm": ("--max-model-len", "--max_model_len"), "sim": ()}
# What a server of context C serves whole, as (the longest prompt, the most prompt + new tokens) less C. SGLang 0.5.23
# (0.5.9 and 0.5.16 alike): max_req_len = C - 1 (managers/tp_worker.py:568-571), max_req_input_len = max_req_len - 5
# (tp_worker.py:572); a prompt of max_req_input_len or more is refused (managers/utils.py:272, validate_input_length,
# called at scheduler.py:3246), so input <= C - 7; max_new_tokens is cut to max_req_len - input - 1
# (scheduler.py:2714, init_req_max_new_tokens), so input + new <= C - 2 for a whole answer (the tokenizer manager's
# input + new <= C, tokenizer_manager.py:1354-1358, is looser). TokenSpeed 0.1.1, SGLang's fork, cuts new the same
# way (engine/request_handler.py:873, max_req_len = max_model_len - 1: event_loop.py:497) and takes a prompt up to
# C less its decode window (event_loop.py:413: 1 token, a speculative draft's without speculation): SGLang's rule
# holds it for windows up to 7. The simulator models SGLang. vLLM 0.32.0 serves input + max_tokens up to C
# (renderers/params.py: max_input_tokens is the context itself), so a prompt of C - 1 and one new token.
_RULES: dict[str, tuple[int, int]] = {"sglang": (7, 2), "tokenspeed": (7, 2), "sim": (7, 2), "vllm": (1, 0)}


@dataclass(frozen=True, slots=True)
class ServedContext:
    """The context length a server takes, what sets it, and what of it a request may use."""

    context: int
    key: str  # what sets the context ("model.context_length=8192", "--max-model-len 4k in engine.extra_args")
    max_input: int  # the longest prompt the server accepts
    max_total: int  # the most prompt + new tokens it serves without cutting the answer short

    def fits(self, input_tokens: int, new_tokens: int) -> bool:
        """Whether a request (its prompt, and every token asked for: at least one) is served whole."""
        return input_tokens <= self.max_input and input_tokens + max(1, new_tokens) <= self.max_total

    def describe(self) -> str:
        return (f"{max(self.max_input, 0)} input and {max(self.max_total, 0)} input + new at most ({self.key}"
                + (f": {self.context} less the server's own reserve" if self.max_total < self.context else "") + ")")


# vLLM's --max-model-len type (vllm/utils/argparse_utils.py, human_readable_int_or_auto and human_readable_int):
# "-1" or "auto" (any case) is auto; a number with k, m, g, t is decimal (25.6k = 25,600), with K, M, G, T binary
# (1K = 1,024; no decimals there); otherwise Python's int() of the value, stripped.
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def vllm_max_model_len(value: str) -> int | None:
    """The max_model_len vLLM's parser reads from ``value``: -1 for auto, None where its parser refuses the value."""
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    if match := _HUMAN.fullmatch(value):
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
    try:  # a binary suffix takes no decimals ("1.5K": vLLM's parser refuses it)
        return int(match.group(1)) * _BINARY[match.group(2)] if match else int(value)
    except ValueError:
        return None


def _given(engine: str, value: str) -> int | None:
    """The context length the engine's parser reads from a flag's value; None where it reads none this can use (auto:
    the longest that fits memory, never past the model's; a value its parser refuses, so the server never starts)."""
    if engine == "vllm":
        got = vllm_max_model_len(value)
    else:  # SGLang's --context-length and TokenSpeed's --max-model-len are argparse type=int
        try:
            got = int(value)
        except ValueError:
            got = None
    return got if got is not None and got >= 1 else None


def served_context(cfg: RunCfg) -> ServedContext | None:
    """What the server of ``model.hf_id``'s checkpoint (or a model of one: sim) serves; None when unknown
    (model.context_length 0 and no flag this can read) or on another engine."""
    engine = cfg.engine.name
    if engine not in CONTEXT_FLAGS:
        return None
    context, key = cfg.model.context_length, f"model.context_length={cfg.model.context_length}"
    given = last_flag([str(a) for a in cfg.engine.extra_args], *CONTEXT_FLAGS[engine])
    if given is not None and (value := _given(engine, given[1])) is not None:
        context, key = value, f"{given[0]} {given[1]} in engine.extra_args"
    if context <= 0:
        return None
    less_input, less_total = _RULES[engine]
    return ServedContext(context, key, context - less_input, context - less_total)


def refuse_over_context(cfg: RunCfg, traces: Mapping[str, Sequence[TraceRow]]) -> None:
    """ConfigError naming the first workload with a request (prompt and every token asked for) the server would not
    serve whole: a prompt longer than it accepts, or more tokens in all than its context leaves."""
    served = served_context(cfg)
    if served is None:
        return
    for name, rows in traces.items():
        over = [r for r in rows if not served.fits(r.num_input_tokens, r.num_output_tokens)]
        if over:
            longest = max(over, key=lambda r: r.num_input_tokens + max(1, r.num_output_tokens))
            new = max(1, longest.num_output_tokens)
            raise ConfigError(
                f"workloads.{name}: {len(over)} of {len(rows)} requests are longer than the context length engine "
                f"{cfg.engine.name} serves {cfg.model.name} with; the longest needs {longest.num_input_tokens + new} "
                f"tokens ({longest.num_input_tokens} input + {new} new) but it serves {served.describe()}, so the "
                f"server would refuse them: choose a model with a longer context or shrink the workload "
                f"(workloads.{name}.scale)")

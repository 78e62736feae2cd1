"""Every request field real SGLang defines, in one table: what this server uses, and what it ignores.

Real clients send more than the server needs: SGLang's bench_serving puts ``return_routed_experts`` in
every /generate body, OpenAI clients send ``"n": null``, ``stream_options``, ``user``. Such a field is
accepted and ignored while its value is neutral — null, SGLang's default, or anything for a field
that only labels the request. A non-neutral value asks for a feature this server lacks: 400 naming
the field, never a silent wrong answer. A name SGLang does not define is still refused as unknown.

Sources: ``GenerateReqInput`` (managers/io_struct.py), ``SamplingParams`` (sampling/sampling_params.py)
and ``CompletionRequest`` (entrypoints/openai/protocol.py) of SGLang's main branch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["CHAT", "CHAT_MESSAGE", "COMPLETION", "GENERATE", "SAMPLING", "SEED_MAX", "SEED_MIN", "FieldTable",
           "field_problem", "preview"]

SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1  # int64, what SGLang's seeded sampler holds

ANY: Final = "any value"  # labels the request (ids, routing, logging): never changes the answer
TOP_K_ALL = 1 << 30  # SGLang's "whole vocabulary" top_k


class FieldTable:
    """Fields the parser reads (``used``) and fields accepted only with a neutral value (``neutral``).

    A neutral entry is ``ANY``, a tuple of neutral values (null is always neutral), or a nested
    ``FieldTable`` for an object-valued field.
    """

    def __init__(self, where: str, used: set[str], neutral: Mapping[str, object]) -> None:
        self.where = where
        self.used = frozenset(used)
        self.neutral = dict(neutral)
        assert not self.used & set(self.neutral), "a field is either used or ignored"


GENERATE = FieldTable(
    "the request",
    used={"text", "input_ids", "sampling_params", "stream", "return_logprob", "logprob_start_len",
          "top_logprobs_num", "return_text_in_logprobs"},
    neutral={
        # labels, routing hints and logging switches: one server, one rank, nothing to route
        "rid": ANY, "session_id": ANY, "conversation_id": ANY, "routing_key": ANY, "log_metrics": ANY,
        "no_logs": ANY, "received_time": ANY, "external_trace_header": ANY, "priority": ANY,
        "routed_dp_rank": (0,), "data_parallel_rank": (0,), "disagg_prefill_dp_rank": (0,),
        # features this server does not have
        "input_embeds": (), "image_data": ([],), "video_data": ([],), "audio_data": ([],), "modalities": ([],),
        "mm_hashes": (), "mm_content_hashes": (), "use_audio_in_video": (False,), "video_config": (),
        "token_ids_logprob": ([],), "return_sampling_mask": (False,), "return_flat_raw_top_logprobs": (False,),
        "return_flat_raw_top_logprobs_b64": (False,), "return_hidden_states": (False,),
        "return_routed_experts": (False,), "routed_experts_start_len": (0,), "return_indexer_topk": (False,),
        "session_params": (), "lora_path": ("",), "lora_id": (), "custom_logit_processor": (),
        "positional_embed_overrides": (), "bootstrap_host": (), "bootstrap_port": (), "bootstrap_room": (),
        "bootstrap_pair_key": (), "decode_tp_size": (), "kv_router_hint": (), "background": (False,),
        "require_reasoning": (False,), "max_thinking_tokens": (), "extra_key": ("",), "cache_salt": ("",),
        "custom_labels": ({},), "return_bytes": (False,), "return_entropy": (False,),
        "return_prompt_token_ids": (False,), "need_wait_for_mm_inputs": (False,), "num_items_assigned": (),
        "encoder_urls": (), "max_dynamic_patch": (), "min_dynamic_patch": (), "image_max_dynamic_patch": (),
        "video_max_dynamic_patch": (), "images_config": (), "multi_item_delimiter_indices": (),
    },
)

# The tokenizer has no special tokens and there are no stop strings, so their switches change nothing.
_SAMPLING_NEUTRAL: dict[str, object] = {
    "skip_special_tokens": ANY, "spaces_between_special_tokens": ANY, "no_stop_trim": ANY,
    "top_p": (1.0,), "top_k": (-1, TOP_K_ALL), "min_p": (0.0,), "frequency_penalty": (0.0,),
    "presence_penalty": (0.0,), "repetition_penalty": (1.0,), "n": (1,), "stop": ("", []),
    "stop_token_ids": ([],), "stop_regex": ("", []), "logit_bias": ({},), "json_schema": (), "regex": (),
    "ebnf": (), "structural_tag": (), "custom_params": ({},), "stream_interval": (1,),
}

SAMPLING = FieldTable(
    "sampling_params",
    used={"temperature", "max_new_tokens", "ignore_eos", "sampling_seed"},
    # beam_width, watermark, choice: 0.5.23's schema defines them (api/v1/api_types.py:177-207), so a value is a
    # feature this server lacks, not an unknown field.
    neutral={**_SAMPLING_NEUTRAL, "min_new_tokens": (0,), "beam_width": (1,), "watermark": (), "choice": ([],)},
)

# include_usage: /v1/completions reads it (SGLang's separate usage chunk); a chat stream's last chunk always
# carries usage, so there it is honoured whatever its value.
STREAM_OPTIONS = FieldTable("stream_options", used=set(),
                            neutral={"include_usage": ANY, "continuous_usage_stats": (False,)})

COMPLETION = FieldTable(
    "the request",
    used={"prompt", "max_tokens", "temperature", "stream", "ignore_eos", "seed", "return_cached_tokens_details",
          "logprobs", "echo"},
    neutral={
        **{k: v for k, v in _SAMPLING_NEUTRAL.items() if k not in ("spaces_between_special_tokens", "stream_interval")},
        "model": ANY, "user": ANY, "rid": ANY, "session_id": ANY, "priority": ANY,
        "routed_dp_rank": (0,), "data_parallel_rank": (0,), "disagg_prefill_dp_rank": (0,),
        "best_of": (1,), "suffix": ("",), "min_tokens": (0,),
        "stream_options": STREAM_OPTIONS,
        "return_hidden_states": (False,), "return_routed_experts": (False,), "routed_experts_start_len": (0,),
        "return_token_ids": (False,), "lora_path": ("",), "session_params": (), "response_format": (),
        "custom_logit_processor": (), "images_config": (), "bootstrap_host": (), "bootstrap_port": (),
        "bootstrap_room": (), "extra_key": ("",), "cache_salt": ("",), "ngram_corpus_id": (),
        "custom_labels": ({},),
    },
)

# /v1/chat/completions (SGLang's ChatCompletionRequest): text messages only, no tools.
CHAT_MESSAGE = FieldTable("a message", used={"role", "content"}, neutral={"name": ANY})
CHAT = FieldTable(
    "the request",
    used={"messages", "max_tokens", "max_completion_tokens", "temperature", "stream", "ignore_eos", "seed",
          "logprobs", "top_logprobs"},
    neutral={
        **{k: v for k, v in COMPLETION.neutral.items() if k not in ("best_of", "suffix")},
        "tools": ([],), "tool_choice": ("none", "auto"),
        "parallel_tool_calls": ANY, "reasoning_effort": (), "separate_reasoning": ANY,
        "stream_reasoning": ANY, "chat_template_kwargs": ({},), "continue_final_message": (False,),
    },
)


def _same(value: Any, neutral: Any) -> bool:
    """JSON equality that keeps true/false apart from 1/0 (Python's ``True == 1`` would let them through)."""
    if isinstance(value, bool) or isinstance(neutral, bool):
        return type(value) is type(neutral) and value == neutral
    if isinstance(value, int | float) and isinstance(neutral, int | float):
        return value == neutral
    if isinstance(value, dict) and isinstance(neutral, dict):
        return value.keys() == neutral.keys() and all(_same(value[k], neutral[k]) for k in value)
    if isinstance(value, list) and isinstance(neutral, list):
        return len(value) == len(neutral) and all(_same(a, b) for a, b in zip(value, neutral, strict=True))
    return type(value) is type(neutral) and bool(value == neutral)


def field_problem(data: Mapping[str, Any], table: FieldTable) -> str | None:
    """Why ``data`` cannot be served, as one line for the client; None when every field is acceptable."""
    unknown = sorted(set(data) - table.used - set(table.neutral))
    if unknown:
        names = (n if n.isprintable() else repr(n) for n in unknown)  # one line, whatever the client's key holds
        return f"unknown field(s) in {table.where}: {', '.join(names)}"
    for name in sorted(set(data) & set(table.neutral)):
        value, neutral = data[name], table.neutral[name]
        if value is None or neutral == ANY:
            continue
        if isinstance(neutral, FieldTable):
            if not isinstance(value, dict):
                return f"{name} must be an object, got {preview(value)}"
            problem = field_problem(value, neutral)
            if problem is not None:
                return problem
            continue
        assert isinstance(neutral, tuple)
        if not any(_same(value, n) for n in neutral):
            return f"{name}={preview(value)} is not supported by the reference server (only its default is accepted)"
    return None


def preview(value: Any, limit: int = 60) -> str:
    """A short rendering of a client's value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

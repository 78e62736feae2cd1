"""Validating request bodies: every bad input becomes one ``BadRequest`` line (HTTP 400), never a crash.

Which fields exist, and which are accepted only with a neutral value, is ``fields.py``'s table; this
module types and bounds the fields the server uses. Every integer is bounded before it reaches torch
(a seed beyond 64 bits overflows ``Generator.manual_seed`` in the model thread, killing the server),
and a null means the field's default, as in SGLang's ``SamplingParams.__post_init__``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from reference_impl.model.executor import SAMPLING_EPS
from reference_impl.server.contract import SAMPLING_FIELDS, sampling_contract_problem, unknown_field
from reference_impl.server.fields import (
    CHAT,
    CHAT_MESSAGE,
    COMPLETION,
    GENERATE,
    SAMPLING,
    SEED_MAX,
    SEED_MIN,
    FieldTable,
    field_problem,
    preview,
)
from reference_impl.server.tokenizer import encode

__all__ = ["BadRequest", "ContractViolation", "GenerateBatch", "GenerateParams", "MalformedBody", "contract_problem",
           "parse_chat", "parse_completions", "parse_generate", "parse_json"]

MAX_TOP_LOGPROBS = 20


class BadRequest(ValueError):
    """One line for the client: what SGLang's tokenizer manager raises as ``ValueError`` (errors.py's shapes)."""


class MalformedBody(BadRequest):
    """The body is not a JSON object: FastAPI's ``RequestValidationError`` in SGLang."""


class ContractViolation(BadRequest):
    """A sampling field SGLang's request schema does not define (0.5.23's contract gate; 0.5.16's TypeError)."""


@dataclass(frozen=True, slots=True)
class GenerateParams:
    input_ids: list[int]
    max_new_tokens: int
    temperature: float  # 0: greedy
    ignore_eos: bool
    stream: bool
    return_logprob: bool = False
    logprob_start_len: int | None = None  # None: no input logprobs
    top_logprobs_num: int = 0
    seed: int | None = None
    text_input: bool = False
    return_text_in_logprobs: bool = False
    return_cached_tokens_details: bool = False
    include_usage: bool = False  # /v1/completions stream: a usage chunk after the last one (stream_options)
    logprobs: int | None = None  # /v1/completions' OpenAI logprobs (openai_logprobs.py): top N per token
    echo: bool = False  # /v1/completions: the prompt before the text (and its logprobs, with a truthy N)


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedBody(f"malformed JSON body: {exc}") from None
    except RecursionError:  # e.g. 100000 nested brackets
        raise MalformedBody("malformed JSON body: nested too deeply") from None
    if not isinstance(data, dict):
        raise MalformedBody("the request body must be a JSON object")
    return data


def _check_fields(data: Mapping[str, Any], table: FieldTable) -> None:
    problem = field_problem(data, table)
    if problem is not None:
        raise BadRequest(problem)


def _get(data: Mapping[str, Any], key: str, default: Any) -> Any:
    value = data.get(key)
    return default if value is None else value


def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer, got {preview(value)}")
    if not lo <= value <= hi:
        raise BadRequest(f"{name} must be in [{lo}, {hi}], got {preview(value)}")
    return value


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false, got {preview(value)}")
    return value


def _temperature(value: Any) -> float:
    """SGLang's rule: non-negative and finite; below ``SAMPLING_EPS`` means greedy."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise BadRequest(f"temperature must be a non-negative finite number, got {preview(value)}")
    return 0.0 if value < SAMPLING_EPS else float(value)


def _seed(value: Any, name: str) -> int | None:
    return None if value is None else _int(value, name, SEED_MIN, SEED_MAX)


def _text(value: Any, name: str) -> list[int]:
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string, got {preview(value)}")
    try:
        return encode(value)
    except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800") has no UTF-8 form
        raise BadRequest(f"{name} is not valid Unicode: unpaired surrogate at character {exc.start}") from None


def _tokens(value: Any, vocab: int, context: int, name: str = "input_ids") -> list[int]:
    if isinstance(value, list) and value and isinstance(value[0], list | str):
        raise BadRequest(f"{name} must be a flat list of token ids, got {preview(value)}")
    if not isinstance(value, list):
        raise BadRequest(f"{name} must be a list of token ids, got {preview(value)}")
    if not value:  # SGLang's text for input_ids (managers/io_struct.py:385 in 0.5.16, :499 in 0.5.23)
        raise BadRequest("input_ids cannot be empty." if name == "input_ids"
                         else f"{name} is empty: the prompt needs at least one token")
    if len(value) >= context:  # before the per-token loop: a huge list is refused at once
        raise BadRequest(f"the prompt has {len(value)} tokens; the context length is {context}")
    for t in value:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
            raise BadRequest(f"token id {preview(t)} is outside the vocabulary [0, {vocab})")
    return list(value)


def _max_new(value: Any, name: str, prompt_len: int, context: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{name} must be a non-negative integer, got {preview(value)}")
    if prompt_len + value > context:
        raise BadRequest(f"prompt ({prompt_len}) + {name} ({value}) exceeds the context length {context}")
    return value


@dataclass(frozen=True, slots=True)
class GenerateBatch:
    """A /generate body's prompts; ``batched`` when it held a list of them (the answer is then a list too)."""

    items: tuple[GenerateParams, ...]
    batched: bool

    @property
    def stream(self) -> bool:
        return self.items[0].stream


# Per-prompt lists SGLang accepts for these fields; the reference server takes one value for the whole batch.
_SHARED_ONLY = ("return_logprob", "logprob_start_len", "top_logprobs_num")


def contract_problem(data: Mapping[str, Any]) -> str | None:
    """0.5.23's JSON contract gate, as far as it is modelled (contract.py): None when the body passes it."""
    return sampling_contract_problem(data.get("sampling_params"))


def _prompts(data: Mapping[str, Any], vocab: int, context: int) -> tuple[list[list[int]], bool, bool]:
    """(each prompt's ids, whether the prompts were text, whether the body was a batch)."""
    if (data.get("text") is None) == (data.get("input_ids") is None):
        raise BadRequest("give exactly one of text or input_ids")
    if data.get("text") is not None:
        text = data["text"]
        if isinstance(text, list):
            if not text:
                raise BadRequest("text is an empty batch: give at least one prompt")
            return [_tokens(_text(t, f"text[{i}]"), vocab, context, "text") for i, t in enumerate(text)], True, True
        return [_tokens(_text(text, "text"), vocab, context, "text")], True, False
    ids = data["input_ids"]
    # SGLang: an empty list is refused before it is told apart from a batch; a list of lists is a batch.
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        return [_tokens(p, vocab, context) for p in ids], False, True
    return [_tokens(ids, vocab, context)], False, False


def _sampling(data: Mapping[str, Any], n: int) -> list[Mapping[str, Any]]:
    sp = _get(data, "sampling_params", {})
    if isinstance(sp, list):
        if len(sp) != n:
            raise BadRequest(f"sampling_params has {len(sp)} entries for {n} prompts")
    else:
        sp = [sp] * n
    for params in sp:
        if not isinstance(params, dict):
            raise BadRequest(f"sampling_params must be an object or a list of objects, got {preview(params)}")
        unknown = [k for k in params if k not in SAMPLING.used and k not in SAMPLING.neutral]
        if unknown:  # reached only without 0.5.23's gate (0.5.16), which answers it with no text of its own
            raise ContractViolation(unknown_field(unknown[0], SAMPLING_FIELDS))
        _check_fields(params, SAMPLING)
    return sp


def parse_generate(data: Mapping[str, Any], vocab: int, context: int) -> GenerateBatch:
    _check_fields(data, GENERATE)
    prompts, text_input, batched = _prompts(data, vocab, context)
    for name in _SHARED_ONLY:
        if isinstance(data.get(name), list):
            raise BadRequest(f"{name} as a per-prompt list is not supported by the reference server")
    ret_lp = _bool(_get(data, "return_logprob", False), "return_logprob")
    start = _int(_get(data, "logprob_start_len", -1), "logprob_start_len", -1, context)
    top = _int(_get(data, "top_logprobs_num", 0), "top_logprobs_num", 0, MAX_TOP_LOGPROBS)
    stream = _bool(_get(data, "stream", False), "stream")
    in_text = _bool(_get(data, "return_text_in_logprobs", False), "return_text_in_logprobs")
    items = []
    for ids, sp in zip(prompts, _sampling(data, len(prompts)), strict=True):
        if start >= len(ids):
            raise BadRequest(f"logprob_start_len {start} must be below the prompt length {len(ids)}")
        raw_max_new = sp.get("max_new_tokens", 128)
        # SGLang: an absent max_new_tokens is 128, an explicit null means "until the context is full".
        max_new = (context - len(ids) if raw_max_new is None
                   else _max_new(raw_max_new, "max_new_tokens", len(ids), context))
        items.append(GenerateParams(
            input_ids=ids, max_new_tokens=max_new, temperature=_temperature(_get(sp, "temperature", 1.0)),
            ignore_eos=_bool(_get(sp, "ignore_eos", False), "ignore_eos"), stream=stream, return_logprob=ret_lp,
            logprob_start_len=start if ret_lp and start >= 0 else None, top_logprobs_num=top if ret_lp else 0,
            seed=_seed(sp.get("sampling_seed"), "sampling_seed"), text_input=text_input,
            return_text_in_logprobs=in_text,
        ))
    return GenerateBatch(tuple(items), batched)


def _completion_prompts(value: Any, vocab: int, context: int) -> tuple[list[list[int]], bool]:
    """Each completion prompt's ids (a string, a list of ids, or a list of either: a batch), and whether text."""
    batch = value if isinstance(value, list) and value and isinstance(value[0], list | str) else [value]
    prompts, text_input = [], False
    for p in batch:
        if isinstance(p, str):
            prompts.append(_tokens(_text(p, "prompt"), vocab, context, "prompt"))
            text_input = True
        elif isinstance(p, list):
            prompts.append(_tokens(p, vocab, context, "prompt"))
        else:
            raise BadRequest(f"prompt must be a string or a list of token ids, got {preview(p)}")
    return prompts, text_input


def parse_completions(data: Mapping[str, Any], vocab: int, context: int) -> GenerateBatch:
    """/v1/completions: one choice per prompt (SGLang: ``choices[i].index`` is the prompt's place)."""
    _check_fields(data, COMPLETION)
    prompts, text_input = _completion_prompts(data.get("prompt"), vocab, context)
    logprobs = data.get("logprobs")
    n = None if logprobs is None else _int(logprobs, "logprobs", 0, MAX_TOP_LOGPROBS)
    echo = _bool(_get(data, "echo", False), "echo")
    first = GenerateParams(
        input_ids=prompts[0], max_new_tokens=0, temperature=_temperature(_get(data, "temperature", 1.0)),
        ignore_eos=_bool(_get(data, "ignore_eos", False), "ignore_eos"),
        stream=_bool(_get(data, "stream", False), "stream"), seed=_seed(data.get("seed"), "seed"),
        text_input=text_input, logprobs=n, echo=echo, return_logprob=n is not None, top_logprobs_num=n or 0,
        logprob_start_len=0 if echo and n else None,  # SGLang computes the prompt's only for echo with N > 0
        return_cached_tokens_details=_bool(_get(data, "return_cached_tokens_details", False),
                                           "return_cached_tokens_details"),
        include_usage=_bool(_get(_get(data, "stream_options", {}), "include_usage", False),
                            "stream_options.include_usage"),
    )
    max_tokens = _get(data, "max_tokens", 16)
    return GenerateBatch(tuple(
        replace(first, input_ids=ids, max_new_tokens=_max_new(max_tokens, "max_tokens", len(ids), context))
        for ids in prompts
    ), batched=len(prompts) > 1)


CHAT_ROLES = ("system", "user", "assistant")


def render_chat(messages: Any) -> str:
    """The reference model's chat template: each message as ``<|role|>\ncontent\n``, then the assistant's turn.

    Plain text, so the byte tokenizer sees it and requests that share their leading messages (few-shot
    examples, a system prompt) share a token prefix, as they do under a real model's template.
    """
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"messages must be a non-empty list of messages, got {preview(messages)}")
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object, got {preview(m)}")
        _check_fields(m, CHAT_MESSAGE)
        role, content = m.get("role"), m.get("content")
        if role not in CHAT_ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(CHAT_ROLES)}, got {preview(role)}")
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string (text only), got {preview(content)}")
        parts.append(f"<|{role}|>\n{content}\n")
    return "".join(parts) + "<|assistant|>\n"


def parse_chat(data: Mapping[str, Any], vocab: int, context: int) -> GenerateParams:
    _check_fields(data, CHAT)
    ids = _tokens(_text(render_chat(data.get("messages")), "messages"), vocab, context, "messages")
    # OpenAI's newer name wins when both are given, as in SGLang's ChatCompletionRequest.
    name = "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens"
    # SGLang: return_logprob=logprobs, top_logprobs_num=top_logprobs or 0 (serving_chat.py 0.5.23:1372-1374)
    top = _int(_get(data, "top_logprobs", 0), "top_logprobs", 0, MAX_TOP_LOGPROBS)
    n = top if _bool(_get(data, "logprobs", False), "logprobs") else None
    return GenerateParams(
        input_ids=ids, max_new_tokens=_max_new(_get(data, name, context - len(ids)), name, len(ids), context),
        temperature=_temperature(_get(data, "temperature", 1.0)),
        ignore_eos=_bool(_get(data, "ignore_eos", False), "ignore_eos"),
        stream=_bool(_get(data, "stream", False), "stream"), seed=_seed(data.get("seed"), "seed"),
        text_input=True, logprobs=n, return_logprob=n is not None, top_logprobs_num=n or 0,
    )

"""Validating request bodies: every bad input becomes one ``BadRequest`` line (HTTP 400), never a crash."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reference_impl.server.tokenizer import encode

__all__ = ["BadRequest", "GenerateParams", "parse_completions", "parse_generate", "parse_json"]

GENERATE_FIELDS = {
    "text", "input_ids", "sampling_params", "stream", "return_logprob", "logprob_start_len", "top_logprobs_num",
    "return_text_in_logprobs", "rid", "lora_path",
}
SAMPLING_FIELDS = {"temperature", "max_new_tokens", "ignore_eos", "top_p", "top_k", "min_p", "n", "stop",
                   "sampling_seed", "skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens"}
COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stream_options",
                     "ignore_eos", "n", "stop", "seed", "logprobs", "echo", "user", "return_cached_tokens_details"}
MAX_TOP_LOGPROBS = 20


class BadRequest(ValueError):
    """One line for the client; the server answers 400."""


@dataclass(frozen=True, slots=True)
class GenerateParams:
    input_ids: list[int]
    max_new_tokens: int
    temperature: float
    ignore_eos: bool
    stream: bool
    return_logprob: bool
    logprob_start_len: int | None  # None: no input logprobs
    top_logprobs_num: int
    seed: int | None
    text_input: bool


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    return data


def _unknown(data: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise BadRequest(f"unknown field(s) in {where}: {', '.join(extra)}")


def _int(value: Any, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise BadRequest(f"{name} must be >= {minimum}, got {value}")
    return value


def _float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise BadRequest(f"{name} must be a number, got {value!r}")
    return float(value)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false, got {value!r}")
    return value


def _tokens(value: Any, vocab: int, context: int) -> list[int]:
    if isinstance(value, list) and value and isinstance(value[0], list):
        raise BadRequest("batched input (a list of prompts) is not supported by the reference server")
    if not isinstance(value, list) or not value:
        raise BadRequest("input_ids must be a non-empty list of token ids")
    for t in value:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
            raise BadRequest(f"token id {t!r} is outside the vocabulary [0, {vocab})")
    if len(value) >= context:
        raise BadRequest(f"the prompt has {len(value)} tokens; the context length is {context}")
    return list(value)


def _unsupported(params: Mapping[str, Any]) -> None:
    if params.get("top_p", 1.0) != 1.0 or params.get("top_k", -1) not in (-1, 0) or params.get("min_p", 0.0) != 0.0:
        raise BadRequest("top_p, top_k and min_p sampling are not supported by the reference server")
    if params.get("n", 1) != 1:
        raise BadRequest("n > 1 is not supported by the reference server")
    if params.get("stop") not in (None, [], ""):
        raise BadRequest("stop strings are not supported by the reference server")


def parse_generate(data: Mapping[str, Any], vocab: int, context: int) -> GenerateParams:
    _unknown(data, GENERATE_FIELDS, "the request")
    if data.get("lora_path") is not None:
        raise BadRequest("lora_path is not supported by the reference server")
    if ("text" in data) == ("input_ids" in data):
        raise BadRequest("give exactly one of text or input_ids")
    text_input = "text" in data
    if text_input:
        if not isinstance(data["text"], str):
            raise BadRequest("text must be a string")
        ids = _tokens(encode(data["text"]), vocab, context)
    else:
        ids = _tokens(data["input_ids"], vocab, context)
    sp = data.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be an object")
    _unknown(sp, SAMPLING_FIELDS, "sampling_params")
    _unsupported(sp)
    max_new = _int(sp.get("max_new_tokens", 128), "max_new_tokens", minimum=0)
    if len(ids) + max_new > context:
        raise BadRequest(f"prompt ({len(ids)}) + max_new_tokens ({max_new}) exceeds the context length {context}")
    temperature = _float(sp.get("temperature", 1.0), "temperature")
    if temperature < 0:
        raise BadRequest("temperature must be >= 0")
    ret_lp = _bool(data.get("return_logprob", False), "return_logprob")
    start = _int(data.get("logprob_start_len", -1), "logprob_start_len", minimum=-1)
    if start >= len(ids):
        raise BadRequest(f"logprob_start_len {start} must be below the prompt length {len(ids)}")
    top = _int(data.get("top_logprobs_num", 0), "top_logprobs_num", minimum=0)
    if top > MAX_TOP_LOGPROBS:
        raise BadRequest(f"top_logprobs_num is limited to {MAX_TOP_LOGPROBS}")
    seed = sp.get("sampling_seed")
    return GenerateParams(
        input_ids=ids, max_new_tokens=max_new, temperature=temperature,
        ignore_eos=_bool(sp.get("ignore_eos", False), "ignore_eos"),
        stream=_bool(data.get("stream", False), "stream"), return_logprob=ret_lp,
        logprob_start_len=start if ret_lp and start >= 0 else None, top_logprobs_num=top if ret_lp else 0,
        seed=None if seed is None else _int(seed, "sampling_seed"), text_input=text_input,
    )


def parse_completions(data: Mapping[str, Any], vocab: int, context: int) -> GenerateParams:
    _unknown(data, COMPLETION_FIELDS, "the request")
    _unsupported(data)
    if data.get("logprobs") not in (None, 0) or data.get("echo", False):
        raise BadRequest("logprobs and echo are not supported on /v1/completions; use /generate")
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list | str):
        prompt = prompt[0]
    ids = _tokens(encode(prompt) if isinstance(prompt, str) else prompt, vocab, context)
    max_new = _int(data.get("max_tokens", 16), "max_tokens", minimum=0)
    if len(ids) + max_new > context:
        raise BadRequest(f"prompt ({len(ids)}) + max_tokens ({max_new}) exceeds the context length {context}")
    temperature = _float(data.get("temperature", 1.0), "temperature")
    if temperature < 0:
        raise BadRequest("temperature must be >= 0")
    seed = data.get("seed")
    return GenerateParams(
        input_ids=ids, max_new_tokens=max_new, temperature=temperature,
        ignore_eos=_bool(data.get("ignore_eos", False), "ignore_eos"),
        stream=_bool(data.get("stream", False), "stream"), return_logprob=False, logprob_start_len=None,
        top_logprobs_num=0, seed=None if seed is None else _int(seed, "seed"), text_input=isinstance(prompt, str),
    )

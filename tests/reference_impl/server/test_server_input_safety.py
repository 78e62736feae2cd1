"""Request content can never kill the server or earn a 500; real clients' extra fields are accepted.

Each case here once crashed the model thread (seed overflow, temperature 1e-45), answered 500
(lone surrogate) or refused a field real SGLang clients send.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from server_harness import Server, error_message, running_server

CONTEXT = 512
PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--arm", "branching", "--max-total-tokens", "4000", "--context-length", str(CONTEXT),
                        "--log-level", "warning") as s:
        yield s


def post(server: Server, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    status, out = server.request("POST", path, body, raw=raw)
    assert server.proc.poll() is None, "the server died"
    return status, json.loads(out)


def assert_400(server: Server, path: str, body: Any, needle: str, raw: bytes | None = None) -> None:
    status, out = post(server, path, body, raw=raw)
    assert status == 400, out
    assert needle in error_message(path, out), out


def gen(max_new: int = 4, **sampling: Any) -> dict[str, Any]:
    return {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": max_new, **sampling}}


# ---------------------------------------------------------------------------------------------- seeds
@pytest.mark.parametrize("seed", [99999999999999999999999, 1 << 63, -(1 << 63) - 1, -(10**30)])
def test_out_of_range_seed_is_a_400(server: Server, seed: int) -> None:
    assert_400(server, "/generate", gen(sampling_seed=seed), "sampling_seed must be in [")
    assert_400(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "seed": seed}, "seed must be in [")


@pytest.mark.parametrize("seed", [(1 << 63) - 1, -(1 << 63), -1, 0])
def test_64_bit_seeds_sample_reproducibly(server: Server, seed: int) -> None:
    outs = [server.generate(gen(8, sampling_seed=seed, temperature=1.0, ignore_eos=True))["output_ids"]
            for _ in range(2)]
    assert outs[0] == outs[1]
    status, body = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "seed": seed})
    assert status == 200, body


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    # a wrong JSON type is 0.5.23's contract gate's (serde's text, reference_impl/server/contract.py)
    [("max_new_tokens", True, "invalid type: boolean `true`, expected i64"),
     ("max_new_tokens", 2.5, "invalid type: floating point `2.5`, expected i64"),
     ("max_new_tokens", 10**30, "exceeds the context length"),
     ("sampling_seed", 1.0, "invalid type: floating point `1.0`, expected i64"),
     ("sampling_seed", "7", 'invalid type: string "7", expected i64')],
)
def test_integer_sampling_fields_are_typed_and_bounded(server: Server, field: str, value: Any, needle: str) -> None:
    assert_400(server, "/generate", gen(**{field: value}), needle)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [("logprob_start_len", 10**30, "logprob_start_len must be in [-1, "),
     ("logprob_start_len", -2, "logprob_start_len must be in [-1, "),
     ("logprob_start_len", len(PROMPT), "must be below the prompt length"),
     ("top_logprobs_num", 10**30, "top_logprobs_num must be in [0, 20]"),
     ("top_logprobs_num", 1.5, "top_logprobs_num must be an integer"),
     ("top_logprobs_num", False, "top_logprobs_num must be an integer"),
     ("return_logprob", 1, "return_logprob must be true or false")],
)
def test_integer_request_fields_are_typed_and_bounded(server: Server, field: str, value: Any, needle: str) -> None:
    assert_400(server, "/generate", {**gen(), "return_logprob": True, field: value}, needle)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    # SGLang bounds neither (reference_impl/server/openai_logprobs.py): the reference's own [0, 20], as above
    [("logprobs", 21, "logprobs must be in [0, 20]"), ("logprobs", -1, "logprobs must be in [0, 20]"),
     ("logprobs", True, "logprobs must be an integer"), ("logprobs", 1.5, "logprobs must be an integer"),
     ("echo", 1, "echo must be true or false")],
)
def test_openai_logprob_fields_are_typed_and_bounded(server: Server, field: str, value: Any, needle: str) -> None:
    assert_400(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, field: value}, needle)


# ---------------------------------------------------------------------------------------------- temperature
@pytest.mark.parametrize("temperature", [1e-45, 5e-324, 1e-7])
def test_temperature_below_sglangs_epsilon_is_greedy(server: Server, temperature: float) -> None:
    greedy = server.generate(gen(12, temperature=0, ignore_eos=True))["output_ids"]
    tiny = server.generate(gen(12, temperature=temperature, ignore_eos=True, sampling_seed=3))["output_ids"]
    assert tiny == greedy


@pytest.mark.parametrize("temperature", [1e-6, 1e-5, 1e300])
def test_extreme_valid_temperatures_sample(server: Server, temperature: float) -> None:
    out = server.generate(gen(12, temperature=temperature, ignore_eos=True))
    assert out["meta_info"]["completion_tokens"] == 12


@pytest.mark.parametrize(("literal", "type_error"), [
    ("NaN", ""), ("Infinity", ""), ("-Infinity", ""), ("-1", ""), ("-1e-45", ""),
    ("true", "boolean `true`"), ('"hot"', 'string "hot"'), ("[1]", "sequence")])
def test_bad_temperature_is_a_400(server: Server, literal: str, type_error: str) -> None:
    raw = f'{{"input_ids": [5], "sampling_params": {{"temperature": {literal}}}}}'.encode()
    needle = f"invalid type: {type_error}, expected f64" if type_error else "temperature must be a non-negative finite"
    assert_400(server, "/generate", None, needle, raw=raw)
    raw = f'{{"prompt": [5], "temperature": {literal}}}'.encode()
    assert_400(server, "/v1/completions", None, "temperature must be a non-negative finite number", raw=raw)


# ---------------------------------------------------------------------------------------------- text and shapes
@pytest.mark.parametrize("text", ["\\ud800", "ok\\udfffok", "\\udc00\\ud800"])
def test_lone_surrogate_text_is_a_400(server: Server, text: str) -> None:
    assert_400(server, "/generate", None, "text is not valid Unicode", raw=f'{{"text": "{text}"}}'.encode())
    assert_400(server, "/v1/completions", None, "prompt is not valid Unicode",
               raw=f'{{"prompt": "{text}"}}'.encode())
    assert_400(server, "/v1/completions", None, "prompt is not valid Unicode",
               raw=f'{{"prompt": ["{text}"]}}'.encode())


def test_a_surrogate_pair_is_ordinary_text(server: Server) -> None:
    out = server.generate({"text": "\U0001f600", "sampling_params": {"max_new_tokens": 1}})  # sent as \ud83d\ude00
    assert out["meta_info"]["prompt_tokens"] == 4


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [("/generate", {"text": ""}, "text is empty"),
     ("/generate", {"text": []}, "text is an empty batch"),
     ("/generate", {"text": ["a", 5]}, "text[1] must be a string"),
     ("/generate", {"text": 5}, "text must be a string"),
     ("/generate", {"input_ids": {"0": 1}}, "input_ids must be a list"),
     ("/generate", {"input_ids": [1.0]}, "outside the vocabulary"),
     ("/generate", {"input_ids": [True]}, "outside the vocabulary"),
     ("/generate", {"input_ids": []}, "input_ids cannot be empty."),
     ("/generate", {"input_ids": [[1], []]}, "input_ids cannot be empty."),
     ("/generate", {"input_ids": [[1], 2]}, "input_ids must be a list of token ids"),
     ("/generate", {"input_ids": [[1], [2]], "sampling_params": [{}]}, "sampling_params has 1 entries for 2"),
     ("/generate", {"input_ids": [[1], [2]], "return_logprob": [True, False]}, "per-prompt list"),
     ("/generate", {"input_ids": [0] * 200_000}, "context length"),
     ("/generate", {"input_ids": [1], "sampling_params": [{}, {}]}, "sampling_params has 2 entries for 1"),
     ("/generate", {"input_ids": [1], "sampling_params": 3}, "sampling_params must be an object"),
     ("/generate", {"input_ids": [1], "sampling_params": {"stop": ["x"]}}, "stop=['x'] is not supported"),
     ("/generate", {"input_ids": [1], "sampling_params": {"stop": [{}]}}, "invalid type: map, expected a string"),
     ("/generate", {"input_ids": [1], "sampling_params": {"stop_token_ids": [7]}}, "stop_token_ids=[7]"),
     ("/generate", {"input_ids": [1], "sampling_params": {"n": True}}, "invalid type: boolean `true`, expected i64"),
     ("/generate", {"input_ids": [1], "sampling_params": {"top_k": 5}}, "top_k=5 is not supported"),
     ("/generate", {"input_ids": [1], "stream": "yes"}, "stream must be true or false"),
     ("/v1/completions", {"prompt": None}, "prompt must be a string or a list of token ids"),
     ("/v1/completions", {"prompt": {"a": 1}}, "prompt must be a string or a list of token ids"),
     ("/v1/completions", {"prompt": [[1], 5]}, "prompt must be a string or a list of token ids, got 5"),
     ("/v1/completions", {"prompt": ["a", ""]}, "prompt is empty"),
     ("/v1/completions", {"prompt": [1], "max_tokens": 1e3}, "max_tokens must be a non-negative integer"),
     ("/v1/completions", {"prompt": [1], "stop": "\n"}, "stop='\\n' is not supported"),
     ("/v1/completions", {"prompt": [1], "stream_options": []}, "stream_options must be an object")],
)
def test_wrong_shapes_and_types_are_400s(server: Server, path: str, body: dict[str, Any], needle: str) -> None:
    assert_400(server, path, body, needle)


@pytest.mark.parametrize("raw", [b"[" * 100_000, b'{"input_ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                 b'{"input_ids": [1e999]}', b"\xff\xfe{}"])
def test_pathological_json_is_a_400(server: Server, raw: bytes) -> None:
    status, out = post(server, "/generate", raw=raw)
    assert status == 400, out


def test_flush_cache_timeout_must_be_finite(server: Server) -> None:
    for value in ("inf", "nan", "1e999", "soon"):
        status, body = server.request("POST", f"/flush_cache?timeout={value}")
        assert status == 400 and b"finite number" in body


# ---------------------------------------------------------------------------------------------- real clients' fields
def test_bench_servings_generate_body_is_accepted(server: Server) -> None:
    body = {"input_ids": PROMPT, "stream": True, "return_logprob": False, "logprob_start_len": -1,
            "lora_path": None, "return_routed_experts": False, "rid": "bench-1",
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 3, "ignore_eos": True, "top_p": 1.0,
                                "top_k": -1, "n": None, "stop": None, "min_new_tokens": 0, "no_stop_trim": True}}
    events = server.stream("/generate", body)
    assert events[-1] == "[DONE]" and events[-2]["meta_info"]["completion_tokens"] == 3


def test_openai_clients_completion_body_is_accepted(server: Server) -> None:
    body = {"model": "whatever", "prompt": PROMPT, "max_tokens": 3, "best_of": 1, "n": None, "top_p": None,
            "temperature": None, "stop": None, "user": "u-1", "logprobs": None, "echo": False, "seed": None,
            "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": None, "suffix": None,
            "stream_options": {"include_usage": True}, "return_routed_experts": False, "ignore_eos": True}
    status, out = post(server, "/v1/completions", body)
    assert status == 200, out
    assert out["usage"]["completion_tokens"] == 3
    events = server.stream("/v1/completions", body)
    assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [("/generate", {**gen(), "return_routed_experts": True}, "return_routed_experts=True is not supported"),
     ("/generate", {**gen(), "return_hidden_states": True}, "return_hidden_states=True is not supported"),
     ("/generate", {**gen(), "lora_path": "adapter"}, "lora_path='adapter' is not supported"),
     ("/generate", gen(top_p=0.9), "top_p=0.9 is not supported"),
     ("/generate", gen(n=2), "n=2 is not supported"),
     ("/v1/completions", {"prompt": PROMPT, "best_of": 2}, "best_of=2 is not supported"),
     ("/v1/completions", {"prompt": PROMPT, "best_of": True}, "best_of=True is not supported"),
     ("/v1/completions", {"prompt": PROMPT, "stream_options": {"continuous_usage_stats": True}},
      "continuous_usage_stats=True is not supported"),
     ("/v1/completions", {"prompt": PROMPT, "stream_options": {"bogus": 1}}, "unknown field(s) in stream_options"),
     ("/generate", {**gen(), "bogus": 1}, "unknown field(s) in the request: bogus"),
     ("/generate", gen(bogus=1), "unknown field `bogus`, expected one of `max_new_tokens`"),
     ("/v1/completions", {"prompt": PROMPT, "bogus": 1}, "unknown field(s) in the request: bogus")],
)
def test_features_the_server_lacks_are_400s_naming_the_field(server: Server, path: str, body: dict[str, Any],
                                                            needle: str) -> None:
    assert_400(server, path, body, needle)


def test_null_max_new_tokens_fills_the_context(server: Server) -> None:
    prompt = list(range(300, 300 + CONTEXT - 5))
    out = server.generate({"input_ids": prompt, "sampling_params": {"max_new_tokens": None, "ignore_eos": True}})
    assert out["meta_info"]["completion_tokens"] == 5


def test_return_text_in_logprobs_and_cached_tokens_details(server: Server) -> None:
    out = server.generate({"text": "hi", "return_logprob": True, "return_text_in_logprobs": True,
                           "logprob_start_len": 0, "sampling_params": {"max_new_tokens": 1}})
    assert [e[2] for e in out["meta_info"]["input_token_logprobs"]] == ["h", "i"]
    assert isinstance(out["meta_info"]["output_token_logprobs"][0][2], str)
    status, body = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 1,
                                                    "return_cached_tokens_details": True})
    assert status == 200 and body["sglext"]["cached_tokens_details"]["host"] == 0


def test_the_server_survived_all_of_it(server: Server) -> None:
    assert server.request("GET", "/health_generate")[0] == 200
    assert server.proc.poll() is None

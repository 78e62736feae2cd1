"""What of its context each GPU server serves a request whole, and the context a vLLM --max-model-len gives, held to the
releases' own rules (hybridbench/engines/context_length.py cites their source lines; tests/vllm_cpu and
tests/sglang_oracle check the parses against the releases themselves)."""

from __future__ import annotations

import pytest
from test_experiment_sizing import composed

from hybridbench.engines.context_length import refuse_over_context
from hybridbench.errors import ConfigError
from workloads.trace import TraceRow


def _fits(engine: str, extra: list[str], input_tokens: int, new_tokens: int) -> bool:
    cfg = composed(f"engine={engine}", "model=nemotron-h-8b")  # 8,192 tokens of context
    cfg.engine.extra_args = extra
    try:
        refuse_over_context(cfg, {"w": [TraceRow(0, 0, 0.0, [1] * input_tokens, [2] * new_tokens)]})
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize(("input_tokens", "new_tokens", "served"), [
    # SGLang 0.5.23: a prompt of max_req_input_len = (C - 1) - 5 or more is refused, so C - 7 is the longest
    (8192 - 7, 1, True), (8192 - 6, 1, False),
    # and max_new_tokens is cut to max_req_len - input - 1: input + new up to C - 2 is answered whole
    (8000, 190, True), (8000, 191, False),
])
def test_sglangs_two_part_rule(input_tokens: int, new_tokens: int, served: bool) -> None:
    # An 8-token margin on input + new refused requests SGLang serves whole (8185 + 1; 8000 + 190).
    assert _fits("sglang", [], input_tokens, new_tokens) is served
    assert _fits("sim", [], input_tokens, new_tokens) is served  # the simulator models the same server


def test_vllm_serves_its_whole_context() -> None:
    assert _fits("vllm", [], 8191, 1) and not _fits("vllm", [], 8191, 2) and not _fits("vllm", [], 8192, 1)


@pytest.mark.parametrize(("value", "context"), [
    ("4k", 4000), ("4K", 4096), ("3.5k", 3500), ("4000", 4000), (" 2k ", 2000), ("4_000", 4000),
    ("auto", 8192), ("AUTO", 8192), ("-1", 8192),  # the longest that fits memory, never past the model's own
])
def test_vllm_reads_max_model_len_as_its_parser_does(value: str, context: int) -> None:
    # "--max-model-len 4k" is 4,000 tokens to vLLM; read as unknown, the plan held requests to the model's 8,192.
    for extra in (["--max-model-len", value], [f"--max_model_len={value}"]):
        assert _fits("vllm", extra, context - 1, 1), (extra, context)
        assert not _fits("vllm", extra, context, 1), (extra, context)


def test_the_refusal_names_both_limits() -> None:
    cfg = composed("engine=sglang", "model=nemotron-h-8b")
    with pytest.raises(ConfigError, match=r"^workloads\.w: 1 of 1 requests .* needs 8192 tokens \(8191 input \+ 1 "
                                          r"new\) but it serves 8185 input and 8190 input \+ new at most "
                                          r"\(model\.context_length=8192: 8192 less the server's own reserve\)"):
        refuse_over_context(cfg, {"w": [TraceRow(0, 0, 0.0, [1] * 8191, [2])]})

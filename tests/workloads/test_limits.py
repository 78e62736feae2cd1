"""One workload may generate at most MAX_REQUESTS requests and MAX_TOKENS tokens, refused from the parameters
before any row is drawn (num_groups=100000000 ran the generator to 12 GB and no output); every shipped
workload is far below both."""

from __future__ import annotations

import glob
import json
import random
from array import array
from pathlib import Path

import pytest
import yaml

from workloads import sharegpt, swebench
from workloads.errors import WorkloadError
from workloads.generate import generate_trace
from workloads.limits import MAX_REQUESTS, MAX_SESSIONS, MAX_TOKENS
from workloads.registry import WORKLOADS
from workloads.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("workload", "values", "message"), [
    ("gsp", {"num_groups": 100_000_000}, r"num_groups \* prompts_per_group \* num_turns = 1,600,000,000 requests"),
    ("gsp", {"num_groups": 1, "system_prompt_len": 10**11}, r"num_groups \* prompts_per_group \* \(system_prompt"),
    ("gsp", {"num_groups": 100, "num_turns": 10_000}, r"requests; one workload may generate at most 1,000,000"),
    ("random", {"num_prompts": 5_000_000}, "num_prompts = 5,000,000 requests"),
    ("random", {"input_len": 10**9}, r"num_prompts \* \(input_len \+ output_len\): up to "),
    ("prefix_groups", {"num_noise": 10**8}, r"num_groups \* prompts_per_group \+ num_noise = "),
    ("prefix_groups", {"prefix_min": 1, "prefix_max": 10**8}, "tokens; one workload may generate at most"),
    ("sharegpt", {"num_sessions": 10**7}, "num_sessions = 10,000,000 synthetic sessions"),
    ("sharegpt", {"min_turns": 10**8, "max_turns": 10**8}, r"num_sessions \* min_turns \(synthetic turns\)"),
    ("sharegpt", {"output_len": 10**12}, "output_len must be <= 200,000,000"),
    ("swebench", {"num_sessions": 10**7}, "num_sessions = 10,000,000 synthetic sessions"),
])
def test_a_workload_over_the_caps_is_refused_before_generating(tmp_path: Path, workload: str,
                                                               values: dict[str, object], message: str) -> None:
    with pytest.raises(WorkloadError, match=message) as e:
        generate_trace(workload, values, vocab_size=1000, seed=1, output=str(tmp_path / "t.jsonl"))
    assert "\n" not in str(e.value) and not (tmp_path / "t.jsonl").exists()


def test_every_shipped_workload_and_preset_is_far_below_the_caps() -> None:
    assert (MAX_REQUESTS, MAX_TOKENS, MAX_SESSIONS) == (1_000_000, 200_000_000, 100_000)
    for w in WORKLOADS.values():
        for params in w.presets.values():
            params.validate()
    for f in glob.glob(str(ROOT / "conf" / "workload" / "*.yaml")):
        spec = yaml.safe_load(Path(f).read_text())
        WORKLOADS[spec["kind"]].resolve(spec.get("params") or {}, preset=spec.get("preset"))
    # the largest: gsp_prefix_heavy, 64 x 16 prompts of 8192 + 256 tokens in and 128 out
    heavy = yaml.safe_load((ROOT / "conf" / "workload" / "gsp_prefix_heavy.yaml").read_text())["params"]
    p = heavy
    tokens = p["num_groups"] * p["prompts_per_group"] * (p["system_prompt_len"] + p["question_len"] + p["output_len"])
    assert tokens * 20 < MAX_TOKENS


def _no_draws(*_args: object) -> tuple[int, ...]:
    raise AssertionError("a token was drawn before the size was checked")


@pytest.mark.parametrize(("workload", "values", "message"), [
    # 900 x 1000 turns of ~440 tokens: under the request cap, 0.4 billion tokens drawn (and ran for minutes)
    ("sharegpt", {"num_sessions": 900, "min_turns": 1000, "max_turns": 1000},
     r"num_sessions=900, min_turns=1000, .*: the synthetic sessions would draw about 398,700,000 tokens"),
    # 90,000 sessions draw ~140M tokens but send ~490M: every turn re-sends its conversation
    ("sharegpt", {"num_sessions": 90_000}, r"their turns would send \(each re-sends the conversation\) about 4\d\d,"),
    ("swebench", {"num_sessions": 4_000}, r"num_sessions=4,000, max_turns=50, max_input=32768: the synthetic "
                                          r"sessions would draw about 282,400,000 tokens"),
    ("swebench", {"num_sessions": 100_000, "max_turns": 100_000}, "would draw about 7,060,000,000 tokens"),
])
def test_synthetic_sessions_over_the_cap_are_refused_before_the_first_draw(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workload: str, values: dict[str, object],
        message: str) -> None:
    draw = "random_token_array" if workload == "swebench" else "random_tokens"
    monkeypatch.setattr(f"workloads.{workload}.{draw}", _no_draws)
    with pytest.raises(WorkloadError, match=message) as e:
        generate_trace(workload, values, vocab_size=200_000, seed=1, output=str(tmp_path / "t.jsonl"))
    assert "\n" not in str(e.value) and not (tmp_path / "t.jsonl").exists()


def test_the_expected_sizes_match_what_the_generators_draw_and_send(tmp_path: Path) -> None:
    """The estimate refuses only what is really that large: within 35% of what the rows generated send."""
    cases = [("sharegpt", {"num_sessions": 200, "min_turns": 10},
              sharegpt.expected_synthetic_tokens(sharegpt.ShareGptParams(min_turns=10))[1]),
             ("swebench", {"num_sessions": 30},
              swebench.expected_synthetic_tokens(swebench.SwebenchParams(), swebench.SyntheticShape())[1])]
    for workload, values, per_session in cases:
        out = tmp_path / f"{workload}.jsonl"
        generate_trace(workload, values, vocab_size=200_000, seed=3, output=str(out))
        sent = sum(len(r.input_tokens) + len(r.output_tokens) for r in read_trace(out).rows)
        assert 0.65 < int(values["num_sessions"]) * per_session / sent < 1.35, (workload, per_session, sent)


def test_a_sharegpt_file_whose_turns_resend_too_much_is_refused_before_its_rows_are_built(tmp_path: Path) -> None:
    """One conversation of 2,000 turns of ~100 words: a 2 MB file whose rows would send ~0.4 billion tokens (each
    turn re-sends the conversation): refused from the turns' lengths, exactly, before a row is built."""
    words = " ".join(f"w{i}" for i in range(100))
    turns = [m for _ in range(2000) for m in ({"from": "human", "value": words}, {"from": "gpt", "value": words})]
    src = tmp_path / "long.json"
    src.write_text(json.dumps([{"id": "a", "conversations": turns}]))
    with pytest.raises(WorkloadError, match=r"num_sessions, max_turns and max_context \(every turn re-sends the "
                                            r"conversation\): up to 4\d\d,\d{3},\d{3} tokens") as e:
        generate_trace("sharegpt", {"path": str(src), "max_turns": 5000, "max_context": 10**6}, vocab_size=200_000,
                       seed=1, output=str(tmp_path / "t.jsonl"))
    assert "\n" not in str(e.value) and not (tmp_path / "t.jsonl").exists()


def test_swebench_rows_that_would_send_past_the_streamed_cap_are_refused_before_the_first_row() -> None:
    """Sessions whose rows are within every per-row limit but send 18 billion tokens between them (300 turns
    re-sending six 10M-token observations): refused from the lengths before a row is built."""
    obs, act = array("I", bytes(4 * 10_000_000)), array("I", [1])
    sessions = [[swebench.TokenRound(obs, act)] * 300]
    params = swebench.SwebenchParams(num_sessions=1, max_turns=300, max_input=10**8)
    rows = swebench._rows(sessions, params, random.Random(0))
    with pytest.raises(WorkloadError, match=r"max_input \(rows are built one at a time\): up to "
                                            r"1[78],\d{3},\d{3},\d{3} tokens; one workload may generate at most "
                                            r"2,000,000,000"):
        next(rows)

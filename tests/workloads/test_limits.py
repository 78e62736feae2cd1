"""One workload may generate at most MAX_REQUESTS requests and MAX_TOKENS tokens, refused from the parameters
before any row is drawn (num_groups=100000000 ran the generator to 12 GB and no output); every shipped
workload is far below both."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import yaml

from workloads.errors import WorkloadError
from workloads.generate import generate_trace
from workloads.limits import MAX_REQUESTS, MAX_SESSIONS, MAX_TOKENS
from workloads.registry import WORKLOADS

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

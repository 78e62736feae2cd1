"""The reference server's model of SGLang 0.5.23's JSON contract gate against the real one.

Every ``sampling_params`` below goes through 0.5.23's own ``generate_contract_error`` (srt/entrypoints/
api_contract.py, run in its venv) and through ``reference_impl.server.contract``; the answers must be equal,
text for text: None for a body the gate passes, serde's error otherwise (the 400 body's ``error`` string).
Hand-picked cases, then random ones: keys from SamplingParams and not, values of every JSON type.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest
import warm_release
from oracle_client import env_python, env_ready

from reference_impl.server.contract import SAMPLING_FIELDS, sampling_contract_problem
from reference_impl.server.fields import SAMPLING

pytestmark = pytest.mark.sglang

REAL_GATE = """
import json, sys
from sglang.srt.entrypoints.api_contract import generate_contract_error
print(json.dumps([generate_contract_error({"sampling_params": sp}) for sp in json.load(sys.stdin)]))
"""

VALUES: list[Any] = [None, True, False, 0, -3, 7, 2**70, 1.5, -0.0, 1e20, "x", "", [], [1], [1.5], ["a"], [True],
                     ["a", 2], {}, {"7": 1.0}, {"7": "b"}, {"enabled": True}, {"key": 5}, {"bogus": 1},
                     {"context_window": 2, "key": "k"}]
KEYS = [*SAMPLING_FIELDS, "bogus", "Temperature", "", "stop_strs", "max_tokens"]

HAND = [
    {}, {"bogus": 1}, {"max_new_tokens": 4, "bogus": 1}, {"bogus": 1, "temperature": "hot"},
    {"temperature": "hot", "bogus": 1}, {"max_new_tokens": True}, {"max_new_tokens": 2.5}, {"temperature": 1},
    {"temperature": [1]}, {"stop": "x"}, {"stop": ["x", 1]}, {"stop": 5}, {"stop_token_ids": 5},
    {"stop_token_ids": [1, "2"]}, {"logit_bias": []}, {"logit_bias": {"1": True}}, {"watermark": 1},
    {"watermark": {"enabled": "yes"}}, {"watermark": {"x": 1}}, {"choice": "a"}, {"choice": [None]},
    {"custom_params": [1, "anything"]}, {"n": None, "top_k": None, "stop": None}, [{"bogus": 1}],
    [{}, {"n": "2"}], [{"temperature": 0.5}, {"top_p": 1}],
]


def _random_cases(n: int, seed: int = 0) -> list[Any]:
    rng = random.Random(seed)

    def one() -> dict[str, Any]:
        return {rng.choice(KEYS): rng.choice(VALUES) for _ in range(rng.randint(1, 4))}

    return [one() if rng.random() < 0.8 else [one() for _ in range(rng.randint(1, 3))] for _ in range(n)]


def test_the_gate_agrees_with_sglang_0_5_23_text_for_text() -> None:
    if not env_ready("0.5.23"):
        # CI builds the venv first: missing there is a failure, never a quiet skip.
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            "SGLang 0.5.23 venv missing: run bash tests/sglang_oracle/build_env.sh 0.5.23")
    cases = HAND + _random_cases(600)
    proc = warm_release.run(env_python("0.5.23"), ["-c", REAL_GATE], input=json.dumps(cases), timeout=600,
                            env=warm_release.oracle_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    mine = [sampling_contract_problem(sp) for sp in json.loads(json.dumps(cases))]
    differ = [(sp, r, m) for sp, r, m in zip(cases, real, mine, strict=True) if r != m]
    assert not differ, differ[:5]
    refused = sum(r is not None for r in real)
    assert 0.3 * len(cases) < refused < len(cases)  # the cases exercise both answers


def test_the_servers_field_table_is_sglangs_sampling_params() -> None:
    """A name the gate knows is never 'unknown' to the server, and the reverse (0.5.16's path uses the table)."""
    assert SAMPLING.used | set(SAMPLING.neutral) == set(SAMPLING_FIELDS)

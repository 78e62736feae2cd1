"""``reference_impl.engine.config.state_ratio`` (state slots a running request reserves) against SGLang's own
``_calculate_mamba_ratio`` in 0.5.16 and 0.5.23 (``mamba_ratio_oracle.py``), for every strategy, the overlap schedule
on and off, the radix cache on and off: the simulator's ``max_running_requests`` on a GPU comes from it
(``max_mamba_cache_size // ratio``), and extra_buffer_lazy's point is a smaller one. A combination SGLang refuses
(extra_buffer_lazy without the overlap schedule) must be refused by the reference's ``EngineConfig`` too.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent, except in CI.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
import warm_release
from oracle_client import env_python, env_ready

from reference_impl.engine.config import EngineConfig, state_ratio

pytestmark = pytest.mark.sglang

ORACLE = Path(__file__).resolve().parent / "mamba_ratio_oracle.py"
CASES = [{"strategy": s, "overlap": o, "radix": r}
         for s, o, r in itertools.product(("no_buffer", "extra_buffer", "extra_buffer_lazy"), (True, False),
                                          (True, False))]


def reference(case: dict[str, Any], version: str) -> int | str:
    cache = case["strategy"] if case["radix"] else "disabled"
    try:
        config = EngineConfig(kv_tokens=4096, state_slots=64, cache=cache, overlap=case["overlap"], semantics=version)
    except ValueError as exc:
        return f"refused: {exc}"
    return state_ratio(config)


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_state_slots_per_running_request_equal_sglangs(version: str) -> None:
    if not env_ready(version):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    proc = warm_release.run(env_python(version), [str(ORACLE)], input=json.dumps(CASES), timeout=300,
                            env=warm_release.oracle_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply = json.loads(proc.stdout)
    assert reply["version"] == version
    bad = []
    for case, sg in zip(CASES, reply["results"], strict=True):
        ref = reference(case, version)
        if isinstance(sg, dict) != isinstance(ref, str) or (not isinstance(sg, dict) and sg != ref):
            bad.append(f"  {case}: sglang {sg}, reference {ref}")
    assert not bad, f"state slots per running request differ from SGLang {version}:\n" + "\n".join(bad)
    # the cases reach every answer: 1 (cache off), 3, 4, 5 slots, and the refusal
    assert {r for r in reply["results"] if not isinstance(r, dict)} == {1, 3, 4, 5}
    assert any(isinstance(r, dict) for r in reply["results"])

"""SGLang 0.5.16's own cache and scheduler-side code, the recorded 0.5.16 server and reference_impl agree on
every request of the recorded 0.5.16 eviction run (274 requests, 16 states, 6000 KV tokens).

``lifecycle_0516.py`` drives the requests through 0.5.16's code in its venv; the reference replays them with
``semantics="0.5.16"``. Both must equal what the real server reported, request by request; and with one state
slot fewer both must still agree with each other (the semantics, not the numbers, are what is checked; that
variant is marked slow: about 1.5 minutes each on 2 busy cores).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import warm_release
from oracle_client import env_python, env_ready

from hybridbench.plan.arms import plan_arm
from hybridbench.probes.exact_hits import CachePredictor, predictor_config
from reference_impl.engine.config import EngineConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixtures" / "sglang_cpu"))
from recorded_runs import fixture, served  # noqa: E402

pytestmark = pytest.mark.sglang
RUN = "evict-0.5.16"


def sglang_0516(requests: list[list[Any]], kv: int, states: int, chunk: int) -> list[int | None]:
    proc = warm_release.run(env_python("0.5.16"), [str(HERE / "lifecycle_0516.py")],
                            input=json.dumps({"kv_size": kv, "mamba_size": states, "chunk": chunk,
                                              "requests": requests}),
                            timeout=900, env=warm_release.oracle_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: list[int | None] = json.loads(proc.stdout)
    return result


def reference(requests: list[list[Any]], config: EngineConfig) -> list[int | None]:
    out: list[int | None] = []
    predictor = CachePredictor(config)
    for prompt, output in requests:
        if prompt == "flush":
            predictor = CachePredictor(config)
            out.append(None)
        else:
            out.append(predictor.predict(prompt, output, len(output)))
    return out


@pytest.mark.parametrize("states", [16, pytest.param(15, marks=pytest.mark.slow)])
def test_sglang_0516_code_the_recorded_server_and_the_reference_agree(states: int, tmp_path: Path) -> None:
    if not env_ready("0.5.16"):
        # CI builds the venv first: missing there is a failure, never a quiet skip.
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            "SGLang 0.5.16 venv missing: run bash tests/sglang_oracle/build_env.sh 0.5.16")
    fx = fixture(RUN)
    info = {**fx["server_info"], "version": fx["version"], "max_mamba_cache_size": states}
    config = predictor_config(plan_arm(fx["arm"]), info)
    assert isinstance(config, EngineConfig) and config.semantics == "0.5.16"
    requests: list[list[Any]] = []
    recorded: list[int | None] = []
    trial = None
    for req in served(RUN, tmp_path):
        if req.trial_id != trial:
            trial = req.trial_id
            requests.append(["flush", []])
            recorded.append(None)
        requests.append([req.prompt, req.output])
        recorded.append(req.cached_tokens)
    real = sglang_0516(requests, config.kv_tokens, states, config.chunked_prefill_size or 8192)
    ours = reference(requests, config)
    assert [(i, a, b) for i, (a, b) in enumerate(zip(real, ours, strict=True)) if a != b] == []
    if states == 16:  # what the server ran with
        assert [(i, a, b) for i, (a, b) in enumerate(zip(real, recorded, strict=True)) if a != b] == []

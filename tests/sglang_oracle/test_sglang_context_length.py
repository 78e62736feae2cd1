"""The context length hybridbench holds a GPU plan's requests to (hybridbench/engines/context_length.py) against each
SGLang release: the length it derives from each model's config.json (the published values tests/vllm_cpu/
real_configs.py records) equals conf/model's ``context_length``, and ``--context-length`` in engine.extra_args is
the flag its parser reads as the context length, to the value the plan reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import warm_release
from omegaconf import OmegaConf
from oracle_client import env_python, env_ready
from served_models import SERVED, real_configs

from hybridbench.config.schema import EngineCfg, ModelCfg, RunCfg
from hybridbench.engines.context_length import served_context

pytestmark = pytest.mark.sglang

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ORACLE = HERE / "context_length_oracle.py"



def _conf_context(name: str) -> int:
    (path,) = [p for p in (ROOT / "conf" / "model").glob("*.yaml")
               if OmegaConf.load(p).get("name") == name and "FP8" not in str(OmegaConf.load(p).get("hf_id"))]
    return int(OmegaConf.load(path).context_length)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.16", "0.5.23"])
def test_the_context_length_is_the_releases_own(version: str) -> None:
    if not env_ready(version):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    argv = ["--context-length", "12288"]
    proc = warm_release.run(env_python(version), [str(ORACLE)],
                            input=json.dumps({"configs": real_configs(), "argv": argv}), timeout=300,
                            env=warm_release.oracle_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply = json.loads(proc.stdout.strip().splitlines()[-1])
    assert reply["version"] == version
    assert reply["derived"] == {name: _conf_context(name) for name in SERVED}
    assert reply["derived"]["nemotron-h-8b"] == 8192  # the one model whose context the seeds' loads outgrow
    cfg = RunCfg(engine=EngineCfg(name="sglang", extra_args=argv), model=ModelCfg(context_length=8192))
    got = served_context(cfg)
    assert got is not None and (got.context, got.key) == (reply["parsed"],
                                                          "--context-length 12288 in engine.extra_args")
    # the release's own reserve (hybridbench/engines/context_length.py cites its lines): input <= C - 7, all <= C - 2
    assert (got.max_input, got.max_total) == (reply["parsed"] - 7, reply["parsed"] - 2)

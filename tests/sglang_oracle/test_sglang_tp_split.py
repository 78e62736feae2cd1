"""engine.tp against each SGLang release's own layers (hybridbench/engines/tp_split.py): for every model SGLang serves
and a range of TP sizes, the plan refuses exactly the TP sizes the release's own attention, gated-delta and Mamba2
layer classes refuse when built at that TP (tp_split_oracle.py), or whose linear-attention heads the release would
have to pad (it does so on CPU only, never on a GPU). The head counts the plan holds (conf/model) are the published
config.json values tests/vllm_cpu/real_configs.py records, the ones the oracle builds the layers from."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

import pytest
import warm_release
from oracle_client import env_python, env_ready
from served_models import SERVED, real_configs

from hybridbench.config.schema import RunCfg
from hybridbench.engines.tp_split import split_refusal
from hybridbench.preview.compose import compose_run

pytestmark = pytest.mark.sglang

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ORACLE = HERE / "tp_split_oracle.py"
TPS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64)
# config.json name -> the conf/model key that holds it
KEYS = {"num_attention_heads": "attention_heads", "num_key_value_heads": "kv_heads",
        "linear_num_key_heads": "linear_key_heads", "linear_num_value_heads": "linear_value_heads",
        "mamba_num_heads": "mamba_heads", "n_groups": "mamba_groups"}



@functools.cache  # a compose (~0.1 CPU s) per model, not per model and release: the tests read it, never change it
def planned(name: str) -> RunCfg:
    return compose_run([f"model={name}", "engine=sglang"]).cfg


def test_the_plans_head_counts_are_config_jsons() -> None:
    for name, cfg in real_configs().items():
        text = cfg.get("text_config", cfg)
        model = planned(name).model
        assert {key: getattr(model, key) for key in KEYS.values()} == {
            key: text.get(field, 0) for field, key in KEYS.items()}, name


@pytest.mark.parametrize("version", ["0.5.9", "0.5.16", "0.5.23"])
def test_the_plan_refuses_the_tps_the_release_refuses(version: str) -> None:
    if not env_ready(version):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    proc = warm_release.run(env_python(version), [str(ORACLE)],
                            input=json.dumps({"configs": real_configs(), "tps": TPS}), timeout=600,
                            env=warm_release.oracle_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply = json.loads(proc.stdout.strip().splitlines()[-1])
    assert reply["version"] == version
    # what a release cannot import is left out; every layer kind is built in at least the releases that import it
    assert set(reply["unimportable"]) <= ({"sglang.srt.models.nemotron_h"} if version == "0.5.23" else set()), (
        reply["unimportable"])
    for name in SERVED:
        base = planned(name)
        for tp in TPS:
            layers = reply["verdicts"][name][str(tp)]
            refused = {layer: why for layer, why in layers.items() if why not in ("ok", "unimportable")}
            why = split_refusal(dataclasses.replace(base, engine=dataclasses.replace(base.engine, tp=tp)))
            assert bool(why) == bool(refused), (name, tp, why, layers)
    # the rules past the attention heads decide real cases: 16 key heads on 32 ranks (Qwen3.5-122B, whose 32
    # attention heads split), 8 Mamba2 groups on 16 (Nemotron-H, whose 32 attention heads split)
    assert reply["verdicts"]["qwen3.5-122b-a10b"]["32"]["attention"] == "ok"
    assert reply["verdicts"]["qwen3.5-122b-a10b"]["32"]["linear heads"].startswith("pads")
    assert reply["verdicts"]["nemotron-h-8b"]["16"]["mamba2"].startswith("AssertionError")
    assert reply["verdicts"]["qwen3-next-80b-a3b"]["16"] == {"attention": "ok", "gated delta net": "ok",
                                                             "linear heads": "ok"}  # 2 KV heads copied 8 times

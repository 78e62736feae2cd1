"""engine.tp against each TokenSpeed release's own attention check (hybridbench/engines/tp_split.py): for every
model conf/model has head counts for and a range of TP sizes, the plan refuses for its attention or KV heads exactly
where the release's ``validate_attention_partition`` raises (probe_tp_split.py), and plans where it passes unless
another layer's heads refuse. Build with ``bash tests/tokenspeed/build_env.sh``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import pytest
from tokenspeed_env import HERE, PYTHON, pythonpath, release, require

from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_VERSIONS
from hybridbench.engines.tp_split import split_refusal
from hybridbench.preview.compose import compose_run

pytestmark = pytest.mark.tokenspeed

require(*map(release, TOKENSPEED_VERSIONS), what="releases")

MODELS = ("qwen3-next-80b-a3b", "qwen3.5-9b", "qwen3.5-122b-a10b", "nemotron-h-8b", "jamba-1.5-mini")
TPS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64)
ATTENTION = ("(model.attention_heads", "(model.kv_heads")


@pytest.mark.parametrize("version", TOKENSPEED_VERSIONS)
def test_the_attention_refusals_are_the_releases(version: str) -> None:
    planned = {name: compose_run([f"model={name}", "engine=tokenspeed"]).cfg for name in MODELS}
    heads = {name: [cfg.model.attention_heads, cfg.model.kv_heads] for name, cfg in planned.items()}
    proc = subprocess.run([str(PYTHON), str(HERE / "probe_tp_split.py")],
                          input=json.dumps({"heads": heads, "tps": TPS}), capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": pythonpath(release(version))}, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdicts = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, cfg in planned.items():
        for tp in TPS:
            why = split_refusal(dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, tp=tp)))
            release_refuses = verdicts[name][str(tp)] != "ok"
            assert release_refuses == any(key in why for key in ATTENTION), (name, tp, why, verdicts[name][str(tp)])
            assert not release_refuses or why  # what the release refuses, the plan refuses

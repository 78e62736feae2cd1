"""The simulator's GPU pool sizes against SGLang 0.5.23's own sizing code.

``pool_sizing_oracle.py`` runs 0.5.23's ``KVCacheConfigurator`` (``_profile_available_bytes`` ->
``_handle_max_mamba_cache`` -> ``config_from_budget``), ``DefaultPoolConfigurator._compute_cell_size`` and the
model configs' ``mamba_cache_per_req`` in its venv, fed the per-rank memory the simulator assumes (its docstring
lists each function with file:line and every stand-in). For every case both sides must agree on the bytes of one
state slot (SGLang's per rank x TP = ``ModelSpec.state_bytes``), the KV bytes of one token on one rank (SGLang's
cell size = ``ModelSpec.kv_bytes_per_token_per_rank``), the state slots and KV tokens of ``engine_config``, and on
whether the model fits at all.

Cases: every SGLang-served hybrid model of ``reference_impl/models.py`` on H100s, TP 1/2/4/8, memory fraction
0.77/0.85, the model's temporal dtype and ``--mamba-ssm-dtype bfloat16``, page size 1/16/64. Needs the venv from
``tests/sglang_oracle/build_env.sh``; skipped with a reason when it is absent, a failure under CI.
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

from reference_impl.engine.arms import ARMS
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.engine.sizing import engine_config
from reference_impl.models import get_model

pytestmark = pytest.mark.sglang

ORACLE = Path(__file__).resolve().parent / "pool_sizing_oracle.py"
MODELS = ("qwen3-next-80b-a3b", "qwen3.5-9b", "qwen3.5-122b-a10b", "nemotron-h-8b")
TPS = (1, 2, 4, 8)
FRACTIONS = (0.77, 0.85)
SSM_DTYPES = ("default", "bfloat16")  # default: the model's own temporal dtype (fp32)
PAGE_SIZES = (1, 16, 64)
GPU = "h100"

Case = dict[str, Any]


def reference(model_name: str, ssm_dtype: str, tp: int, fraction: float, page_size: int) -> dict[str, Any]:
    """The case as the simulator sizes it, plus the per-rank memory figure SGLang is fed."""
    model = get_model(model_name, temporal_dtype="" if ssm_dtype == "default" else ssm_dtype)
    gpu = get_gpu(GPU)
    timer = CostModel(model, gpu, tp)
    ref: dict[str, Any] = {
        "hbm_bytes": gpu.hbm_bytes, "weight_bytes": timer.total_weight_bytes(),
        "state_bytes": model.state_bytes(), "cell_size": model.kv_bytes_per_token_per_rank(tp),
    }
    # Pool sizing does not depend on the cache strategy; no_buffer (lru) only runs with page size 1.
    arm = ARMS["lru" if page_size == 1 else "branching"]
    try:
        cfg = engine_config(arm, timer, mem_fraction_static=fraction, page_size=page_size)
        ref.update(state_slots=cfg.state_slots, kv_tokens=cfg.kv_tokens)
    except ValueError as e:
        ref["error"] = str(e)
    return ref


def cases() -> list[tuple[Case, dict[str, Any]]]:
    out = []
    for name, dtype, tp, fraction, page in itertools.product(MODELS, SSM_DTYPES, TPS, FRACTIONS, PAGE_SIZES):
        ref = reference(name, dtype, tp, fraction, page)
        case = {"model": name, "tp": tp, "fraction": fraction, "ssm_dtype": dtype, "page_size": page,
                "hbm_bytes": ref["hbm_bytes"], "weight_bytes": ref["weight_bytes"]}
        out.append((case, ref))
    return out


def differences(case: Case, ref: dict[str, Any], sg: dict[str, Any]) -> list[str]:
    tp = case["tp"]
    diffs = []
    if sg["mamba_cache_per_req"] * tp != ref["state_bytes"]:
        diffs.append(f"state bytes per slot: sglang {sg['mamba_cache_per_req']} x tp {tp} = "
                     f"{sg['mamba_cache_per_req'] * tp}, reference {ref['state_bytes']}")
    if sg["cell_size"] != ref["cell_size"]:
        diffs.append(f"KV bytes per token per rank: sglang {sg['cell_size']} "
                     f"({sg['num_kv_heads_per_rank']} KV heads a rank), reference {ref['cell_size']}")
    if ("error" in sg) != ("error" in ref):
        diffs.append(f"does not fit: sglang {sg.get('error', 'fits')!r}, reference {ref.get('error', 'fits')!r}")
    elif "error" not in sg:
        if sg["max_mamba_cache_size"] != ref["state_slots"]:
            diffs.append(f"state slots: sglang {sg['max_mamba_cache_size']}, reference {ref['state_slots']}")
        if sg["max_total_num_tokens"] != ref["kv_tokens"]:
            diffs.append(f"KV tokens: sglang {sg['max_total_num_tokens']}, reference {ref['kv_tokens']}")
    return diffs


def test_gpu_pool_sizes_equal_sglang_0_5_23() -> None:
    if not env_ready("0.5.23"):
        # CI builds the venv first: missing there is a failure, never a quiet skip.
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            "SGLang 0.5.23 venv missing: run bash tests/sglang_oracle/build_env.sh 0.5.23")
    pairs = cases()
    proc = warm_release.run(env_python("0.5.23"), [str(ORACLE)], input=json.dumps([c for c, _ in pairs]),
                            timeout=600, env=warm_release.oracle_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply: dict[str, Any] = json.loads(proc.stdout)
    assert reply["version"] == "0.5.23"
    bad = []
    for (case, ref), sg in zip(pairs, reply["results"], strict=True):
        if diffs := differences(case, ref, sg):
            name = (f"{case['model']} tp{case['tp']} fraction {case['fraction']} ssm {case['ssm_dtype']} "
                    f"page {case['page_size']}")
            bad.append(f"  {name}:\n" + "\n".join(f"    {d}" for d in diffs))
    assert not bad, (f"{len(bad)} of {len(pairs)} cases differ from SGLang 0.5.23; the first ones:\n"
                     + "\n".join(bad[:8]))
    # The cases reach both answers: models that fit and models that do not.
    fits = sum("error" not in sg for sg in reply["results"])
    assert 0 < fits < len(pairs)

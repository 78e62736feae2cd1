"""Every SGLang arm's planned GPU command line through the real release's own start-up resolution.

``--help`` says which flags a build has, not which combinations it refuses when the server starts: SGLang 0.5.16
and 0.5.23 refused the ``lru`` arm (``no_buffer`` with the overlap schedule) before any weight loaded, on every
GPU. Here each arm of a GPU plan (``hybridbench plan --json``) runs through ``prepare_server_args`` and the
resolution the server does next (``resolve_once``), in the release's venv, with the model swapped for a tiny
Qwen3-Next config, TP 1 and ``--device cpu``; only the platform's "extra_buffer needs CUDA" probe is answered
as an H100 answers it. The resolved settings must be what the arm claims.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent, except
in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from oracle_client import REPO, env_python, env_ready

pytestmark = pytest.mark.sglang

RESOLVE = """
import json, sys
try:  # an H100 supports extra_buffer; this CPU's platform says it does not
    import sglang.srt.arg_groups.mamba_hook as hook
    hook._platform_supports_mamba_cache_extra_buffer = lambda: True
except ImportError:
    import sglang.srt.server_args as sa_module
    sa_module.is_cuda = lambda: True
from sglang.srt.server_args import prepare_server_args
KEYS = ("disable_radix_cache", "mamba_radix_cache_strategy", "mamba_scheduler_strategy", "disable_overlap_schedule",
        "enable_hierarchical_cache", "mamba_track_interval", "page_size")
out = {}
for arm, argv in json.load(sys.stdin).items():
    try:
        args = prepare_server_args(argv)
        getattr(args, "resolve_once", lambda: None)()
        try:
            from sglang.srt.arg_groups.overrides import resolving_view
            args = resolving_view(args)
        except ImportError:
            pass
    except (AssertionError, ValueError, SystemExit) as exc:
        out[arm] = {"refused": f"{type(exc).__name__}: {exc}"[:400]}
    else:
        out[arm] = {k: getattr(args, k, None) for k in KEYS}
print(json.dumps(out))
"""

# A Qwen3-Next config small enough for a CPU (SGLang reads the model's config.json while resolving).
CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 128, "head_dim": 64,
    "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
    "linear_value_head_dim": 128, "max_position_embeddings": 4096, "moe_intermediate_size": 64, "num_experts": 4,
    "num_experts_per_tok": 2, "shared_expert_intermediate_size": 64, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "partial_rotary_factor": 0.25, "rope_theta": 10000.0, "rms_norm_eps": 1e-06, "vocab_size": 1024,
    "torch_dtype": "bfloat16", "hidden_act": "silu", "tie_word_embeddings": False,
}
ARMS = ("disabled", "lru", "branching", "l2")


def _plan(version: str, arms: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hybridbench.cli", "plan", "--json", "--no-forecast", "+experiment=kl",
         "engine=sglang", f"engine.python={env_python(version)}", f"arms=[{','.join(arms)}]",
         f"checks.baseline_arm={arms[0]}"],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO)


def _on_cpu(argv: list[str], model: Path) -> list[str]:
    """The server's flags (after ``python -m sglang.launch_server``), the model and TP swapped, on the CPU."""
    out, rest = [], argv[3:]
    values = {"--model-path": str(model), "--tp-size": "1"}
    i = 0
    while i < len(rest):
        if rest[i] in values:
            out += [rest[i], values[rest[i]]]
            i += 2
        else:
            out.append(rest[i])
            i += 1
    return [*out, "--device", "cpu"]


@pytest.mark.parametrize("version", ["0.5.23", "0.5.16", "0.5.9"])
def test_every_arm_of_a_gpu_plan_passes_the_releases_own_startup_resolution(version: str, tmp_path: Path) -> None:
    if not env_ready(version):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv not built (tests/sglang_oracle/build_env.sh)")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    arms = ARMS
    if version == "0.5.9":  # its host tier takes MHA and MLA pools only: l2 is refused at plan time, not at start-up
        refused = _plan(version, ARMS)
        assert refused.returncode == 2 and "SGLang 0.5.9 has no host tier for hybrid models" in refused.stderr
        arms = tuple(a for a in ARMS if a != "l2")
    proc = _plan(version, arms)
    assert proc.returncode == 0, proc.stderr[-1500:]
    plan: dict[str, Any] = json.loads(proc.stdout)
    argvs = {arm: _on_cpu(plan["arms"][arm]["argv"], tmp_path) for arm in arms}
    proc = subprocess.run([str(env_python(version)), "-c", RESOLVE], input=json.dumps(argvs), capture_output=True,
                          text=True, timeout=600, check=False, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-1500:]
    resolved: dict[str, dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    refused = {arm: r["refused"] for arm, r in resolved.items() if "refused" in r}
    assert not refused, f"SGLang {version} refuses: {refused}"

    def strategy(arm: str) -> Any:
        r = resolved[arm]
        return r["mamba_radix_cache_strategy"] or r["mamba_scheduler_strategy"]

    assert resolved["disabled"]["disable_radix_cache"] is True
    assert not resolved["lru"]["disable_radix_cache"] and strategy("lru") == "no_buffer"
    assert resolved["lru"]["disable_overlap_schedule"] is True
    for arm in {"branching", "l2"} & set(arms):
        assert not resolved[arm]["disable_radix_cache"] and strategy(arm) == "extra_buffer"
        assert resolved[arm]["mamba_track_interval"] == 256  # the GPU plan's, not a CPU stand-in's
    assert "l2" not in arms or resolved["l2"]["enable_hierarchical_cache"] is True
    assert not resolved["branching"]["enable_hierarchical_cache"]

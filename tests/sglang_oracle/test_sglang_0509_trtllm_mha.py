"""SGLang 0.5.9's trtllm_mha platform check against the plan's (hybridbench.engines.sglang_refusal).

0.5.9 is not among tests/sglang_oracle/test_sglang_startup_departures.py's releases (most of those refusals are
0.5.16's and 0.5.23's). Its GPU-dependent one the plan reads, trtllm_mha named by any attention-backend flag off
Blackwell (server_args.py:1894-1902, after equal prefill and decode backends replace --attention-backend), runs here
through its own ``prepare_server_args`` on the tiny Qwen3-Next config with ``--device cpu``, ``is_sm100_supported``
answered as the case's engine.gpu answers it: the plan must refuse exactly the lines 0.5.9 refuses.

Needs the venv from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when it is absent, except in CI.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from oracle_client import PRETEND_H100, env_python, env_ready
from tiny_configs import QWEN3_NEXT

from hybridbench.config.schema import ArmCfg, EngineCfg, ModelCfg
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.sglang_cmd import sglang_command, sglang_help_argv, sglang_refusal
from hybridbench.plan.arms import plan_arm

pytestmark = pytest.mark.sglang

VERSION = "0.5.9"
# (engine.gpu, engine.extra_args, whether 0.5.9 refuses the line), on the branching arm with pages of 64 tokens
CASES: list[tuple[str, list[str], bool]] = [
    ("h100", ["--decode-attention-backend", "trtllm_mha"], True),  # 0.5.16 and 0.5.23 run decode on SM90
    ("h100", ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "triton"], True),  # the raw flag
    ("h100", ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "triton",
              "--decode-attention-backend", "triton"], False),  # equal stage backends replace --attention-backend
    ("b200", ["--attention-backend", "trtllm_mha"], False),
    ("h100", ["--attention-backend", "triton"], False),
]
RESOLVE = "import json, sys" + PRETEND_H100 + """
import sglang.srt.server_args as sa_module
from sglang.srt.server_args import prepare_server_args
out = []
for blackwell, argv in json.load(sys.stdin):
    sa_module.is_sm100_supported = lambda blackwell=blackwell: blackwell
    try:
        prepare_server_args(argv)
    except (AssertionError, ValueError, SystemExit) as exc:
        out.append(f"{type(exc).__name__}: {exc}"[:300])
    else:
        out.append("")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    """Per case: (the plan's refusal or "", 0.5.9's refusal or "")."""
    if not env_ready(VERSION):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {VERSION} venv not built (tests/sglang_oracle/build_env.sh)")
    root = tmp_path_factory.mktemp("trtllm_0509")
    (root / "config.json").write_text(json.dumps(QWEN3_NEXT))
    python = str(env_python(VERSION))
    help_text = installed_help(sglang_help_argv(python, []), "sglang", python)
    spec, ours, lines = plan_arm("branching", ArmCfg()), [], []
    for gpu, extra, _ in CASES:
        engine = EngineCfg(tp=4, gpu=gpu, page_size=64, extra_args=extra)
        ours.append(sglang_refusal(ModelCfg(), spec, VERSION, extra, gpu))
        args = sglang_command(python=python, model=ModelCfg(), engine=engine, arm=spec, port=0,
                              help_text=help_text)[3:]
        args[args.index("--model-path") + 1] = str(root)
        lines.append((gpu == "b200", [*args, "--device", "cpu"]))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([python, "-c", RESOLVE], input=json.dumps(lines), capture_output=True, text=True,
                          timeout=600, check=False, cwd=root, env=env)
    assert proc.returncode == 0 and proc.stdout.strip(), f"SGLang {VERSION} resolve failed: {proc.stderr[-1500:]}"
    return list(zip(ours, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True))


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{g}:{' '.join(e)}" for g, e, _ in CASES])
def test_the_plan_refuses_trtllm_mha_where_0_5_9_does(case: int, decided: list[tuple[str, str]]) -> None:
    gpu, extra, refused = CASES[case]
    ours, theirs = decided[case]
    assert bool(theirs) == refused, f"SGLang {VERSION} on {gpu} with {extra}: {theirs or 'runs it'}"
    assert bool(ours) == bool(theirs), f"SGLang {VERSION}: {theirs or 'runs it'}; plan: {ours or 'runs it'}"
    if theirs:
        assert "TRTLLM MHA" in theirs and ours.startswith(f"engine.gpu={gpu}: "), (theirs, ours)

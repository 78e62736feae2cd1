"""SGLang 0.5.9's start-up departures from the plan against the plan's (hybridbench.engines.sglang_refusal).

0.5.9 is not among tests/sglang_oracle/test_sglang_startup_departures.py's releases (most of those refusals are
0.5.16's and 0.5.23's). Its own the plan reads run here through its own ``prepare_server_args`` on the tiny
Qwen3-Next config with ``--device cpu``: trtllm_mha named by any attention-backend flag off Blackwell
(server_args.py:1894-1902, after equal prefill and decode backends replace --attention-backend), with
``is_sm100_supported`` answered as the case's engine.gpu answers it; and speculative decoding with the no_buffer
strategy, which turns the radix cache off (server_args.py:1760-1764), so a cache-on arm would be measured with no
cache. SGLang departs from the arm when it refuses the line or resolves the radix cache or the strategy otherwise
than the arm; the plan must refuse exactly those lines.

Needs the venv from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when it is absent, except in CI.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import warm_release
from oracle_client import PRETEND_H100, env_python, env_ready
from tiny_configs import QWEN3_NEXT

from hybridbench.config.schema import ArmCfg, EngineCfg, ModelCfg
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.sglang_cmd import sglang_command, sglang_help_argv, sglang_refusal
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

pytestmark = pytest.mark.sglang

VERSION = "0.5.9"
_NGRAM = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]
# (arm, engine options, engine.extra_args, whether 0.5.9 departs from the arm with them)
CASES: list[tuple[str, dict[str, Any], list[str], bool]] = [
    # trtllm_mha on its page sizes: Blackwell only for any of the three flags
    ("branching", {"page_size": 64}, ["--decode-attention-backend", "trtllm_mha"], True),  # 0.5.16/0.5.23 run it
    ("branching", {"page_size": 64}, ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "triton"],
     True),  # the raw flag
    ("branching", {"page_size": 64}, ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "triton",
                                      "--decode-attention-backend", "triton"], False),  # equal stage backends win
    ("branching", {"page_size": 64, "gpu": "b200"}, ["--attention-backend", "trtllm_mha"], False),
    ("branching", {"page_size": 64}, ["--attention-backend", "triton"], False),
    # speculative decoding turns the radix cache off under no_buffer (lru), not under extra_buffer
    ("lru", {}, _NGRAM, True),
    ("lru", {}, ["--speculative-algorithm", "NGRAM"], True),
    ("lru", {}, ["--speculative-num-draft-tokens", "8"], False),  # no algorithm: no speculative decoding
    ("lru", {}, [], False),
    ("branching", {}, _NGRAM, False),
    ("disabled", {}, _NGRAM, False),  # no cache to lose
]
RESOLVE = "import json, sys" + PRETEND_H100 + """
import sglang.srt.server_args as sa_module
from sglang.srt.server_args import prepare_server_args
speculative = sa_module.ServerArgs._handle_speculative_decoding

def on_cuda(self):  # NGRAM's device check (server_args.py:2461-2465) answered as on the GPU: --device cpu here
    device, self.device = self.device, "cuda"
    try:
        speculative(self)
    finally:
        self.device = device

sa_module.ServerArgs._handle_speculative_decoding = on_cuda
out = []
for blackwell, argv in json.load(sys.stdin):
    sa_module.is_sm100_supported = lambda blackwell=blackwell: blackwell
    try:
        args = prepare_server_args(argv)
    except (AssertionError, ValueError, SystemExit) as exc:
        out.append({"refused": f"{type(exc).__name__}: {exc}"[:300]})
    else:
        out.append({k: getattr(args, k) for k in ("disable_radix_cache", "mamba_scheduler_strategy")})
print(json.dumps(out))
"""


def _departs(arm: str, got: dict[str, Any]) -> str:
    """How 0.5.9's resolution departs from ``arm`` ("" when it runs the arm as planned)."""
    if "refused" in got:
        return str(got["refused"])
    spec = plan_arm(arm, ArmCfg())
    claims = {"disable_radix_cache": not spec.cache_on}
    if spec.cache_on:
        claims["mamba_scheduler_strategy"] = spec.strategy
    diff = {k: (v, got.get(k)) for k, v in claims.items() if got.get(k) != v}
    return f"resolved otherwise (planned, resolved): {diff}" if diff else ""


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    """Per case: (the plan's refusal or "", how 0.5.9 departs from the arm or "")."""
    if not env_ready(VERSION):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {VERSION} venv not built (tests/sglang_oracle/build_env.sh)")
    root = tmp_path_factory.mktemp("departures_0509")
    (root / "config.json").write_text(json.dumps(QWEN3_NEXT))
    python = str(env_python(VERSION))
    help_text = installed_help(sglang_help_argv(python, []), "sglang", python)
    ours, lines = [], []
    for arm, eng, extra, _ in CASES:
        spec, engine = plan_arm(arm, ArmCfg()), EngineCfg(tp=4, extra_args=extra, **eng)
        why = sglang_refusal(ModelCfg(), spec, VERSION, extra, engine.gpu, engine.page_size)
        if not why:
            try:
                sglang_command(python=python, model=ModelCfg(), engine=engine, arm=spec, port=0, help_text=help_text)
            except ConfigError as exc:
                why = str(exc)
        ours.append(why)
        # the arm's own line with the extra flags last, as merge_extra gives them (argparse keeps a flag's last value)
        args = sglang_command(python=python, model=ModelCfg(), engine=EngineCfg(tp=4, **eng), arm=spec, port=0,
                              help_text=help_text)[3:] + extra
        args[args.index("--model-path") + 1] = str(root)
        lines.append((engine.gpu == "b200", [*args, "--device", "cpu"]))
    proc = warm_release.run(env_python(VERSION), ["-c", RESOLVE], input=json.dumps(lines), timeout=600, cwd=root,
                            env=warm_release.oracle_env())
    assert proc.returncode == 0 and proc.stdout.strip(), f"SGLang {VERSION} resolve failed: {proc.stderr[-1500:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return [(why, _departs(arm, g)) for why, (arm, _, _, _), g in zip(ours, CASES, got, strict=True)]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{a}:{' '.join(e)}" + "".join(f"@{k}={v}" for k, v in
                                                                                           g.items())
                                                         for a, g, e, _ in CASES])
def test_the_plan_refuses_what_0_5_9_refuses_or_rewrites_at_start_up(case: int, decided: list[tuple[str, str]]) -> None:
    arm, eng, extra, departs = CASES[case]
    ours, theirs = decided[case]
    assert bool(theirs) == departs, f"SGLang {VERSION} on {arm} + {extra} ({eng}): {theirs or 'as planned'}"
    assert bool(ours) == bool(theirs), f"SGLang {VERSION}: {theirs or 'runs it as planned'}; plan: {ours or 'runs it'}"
    assert "\n" not in ours
    if "TRTLLM MHA" in theirs:
        assert ours.startswith(f"engine.gpu={eng.get('gpu', 'h100')}: "), (theirs, ours)
    elif theirs:  # the radix cache turned off, not a refusal
        assert "'disable_radix_cache': (False, True)" in theirs, theirs
        assert ours.startswith(f"arm {arm}: engine.extra_args has --speculative-algorithm NGRAM"), (theirs, ours)

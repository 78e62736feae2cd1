"""The plan's start-up refusals (hybridbench.engines.sglang_refusal) against each release's own start-up resolution.

``--help`` says which flags a build has, not which combinations it refuses or rewrites when the server starts. Each
case is an arm plus flags in ``engine.extra_args``. For every release: the plan decides (``sglang_refusal`` with the
installed version, then ``sglang_command`` with the installed ``--help``), and the same command line, the arm's
planned flags followed by the extra ones as ``merge_extra`` puts them, goes through ``prepare_server_args`` and the
resolution the server does next, in the release's venv, on a tiny config of the model's architecture with
``--device cpu`` (tests/sglang_oracle/tiny_configs.py; the "extra_buffer needs CUDA" probe answered as an H100 does).

SGLang departs from the arm when it refuses the line, resolves it to another cache than the arm's (the strategy, the
radix cache on or off, the host tier and its io backend and layout as planned), or starts a line its own validator
refuses once the speculative settings it filled in (draft tokens, steps, top-k) are given explicitly (0.5.16's
``ServerArgs._validate_mamba_extra_buffer`` runs before the algorithm's defaults fill them in, so
``--speculative-algorithm`` alone slips past its "extra_buffer_lazy unsupported with spec"). The plan must refuse
exactly the cases a release departs from, and each case says where it expects that, so a case that stops
exercising anything fails too. Overlap scheduling is not compared: speculative decoding on a CPU turns it off.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent, except in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from oracle_client import env_python, env_ready
from tiny_configs import QWEN3_NEXT

from hybridbench.config.schema import ArmCfg, EngineCfg, ModelCfg
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.sglang_cmd import sglang_command, sglang_help_argv, sglang_refusal
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

pytestmark = pytest.mark.sglang

RELEASES = ("0.5.16", "0.5.23")
HICACHE_DEFAULTS = {"hicache_io_backend": "kernel", "hicache_mem_layout": "page_first"}

# (arm, engine.extra_args, the releases that depart from the arm with them)
CASES: list[tuple[str, list[str], set[str]]] = [
    ("lazy", ["--speculative-algorithm", "EAGLE"], {"0.5.16"}),  # starts, unsupported; PR #30437 in 0.5.23
    ("lazy", ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"], {"0.5.16"}),  # refused
    ("branching", ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"], set()),
    ("lazy", ["--disaggregation-mode", "prefill"], {"0.5.23"}),
    ("branching", ["--disaggregation-mode", "prefill"], set()),
    ("branching", ["--disaggregation-mode", "decode"], {"0.5.16", "0.5.23"}),  # the radix cache off
    ("lru", ["--disaggregation-mode", "decode"], {"0.5.16", "0.5.23"}),
    ("disabled", ["--disaggregation-mode", "decode"], set()),
    ("branching", ["--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"], set()),
    ("lazy", ["--enable-deterministic-inference", "--attention-backend", "flashinfer"], {"0.5.16", "0.5.23"}),
    ("lazy", ["--enable-deterministic-inference", "--attention-backend", "triton"], set()),
    ("branching", ["--enable-mis"], {"0.5.16", "0.5.23"}),
    ("lazy", ["--linear-attn-backend", "cutedsl"], {"0.5.16", "0.5.23"}),
    ("branching", ["--linear-attn-backend", "cutedsl"], {"0.5.16", "0.5.23"}),
    ("lazy", ["--linear-attn-backend", "triton"], set()),
    ("lazy", ["--enable-linear-replayssm"], {"0.5.16", "0.5.23"}),
    ("branching", ["--speculative-num-draft-tokens", "257"], {"0.5.16", "0.5.23"}),  # track interval 256
    ("branching", ["--speculative-num-draft-tokens", "256"], set()),
    ("lazy+l2", ["--enable-int8-mamba-checkpoint"], {"0.5.16", "0.5.23"}),
    ("lazy", ["--enable-int8-mamba-checkpoint"], set()),
    ("lazy+l2", ["--hicache-io-backend", "kernel"], {"0.5.16", "0.5.23"}),  # with page_first_direct: io -> direct
    ("l2", ["--hicache-mem-layout", "page_first"], {"0.5.16", "0.5.23"}),  # with direct: layout -> page_first_direct
    ("lazy+l2", ["--hicache-io-backend", "kernel", "--hicache-mem-layout", "layer_first"], set()),
]
IDS = [f"{arm}:{' '.join(extra)}" for arm, extra, _ in CASES]

RESOLVE = """
import json, sys
try:  # an H100 supports extra_buffer; this CPU's platform says it does not
    import sglang.srt.arg_groups.mamba_hook as hook
    hook._platform_supports_mamba_cache_extra_buffer = lambda: True
except ImportError:
    import sglang.srt.server_args as sa_module
    sa_module.is_cuda = lambda: True
from sglang.srt.server_args import prepare_server_args
KEYS = ("disable_radix_cache", "mamba_radix_cache_strategy", "enable_hierarchical_cache", "hicache_io_backend",
        "hicache_mem_layout", "speculative_num_draft_tokens")
SPEC = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
def resolve(argv):
    try:
        args = prepare_server_args(argv)
        getattr(args, "resolve_once", lambda: None)()
        try:
            from sglang.srt.arg_groups.overrides import resolving_view
            args = resolving_view(args)
        except ImportError:
            pass
    except (AssertionError, ValueError, NotImplementedError, SystemExit) as exc:
        return {"refused": f"{type(exc).__name__}: {exc}"[:300]}
    return {k: getattr(args, k, None) for k in (*KEYS, *SPEC)}
out = []
for argv in json.load(sys.stdin):
    got = resolve(argv)
    drafts = got.get("speculative_num_draft_tokens")
    if drafts is not None and "--speculative-num-draft-tokens" not in argv:
        # the speculative settings filled in after validation: would the validator take the line with them given?
        given = [x for k in SPEC if got[k] is not None for x in ("--" + k.replace("_", "-"), str(got[k]))]
        again = resolve([*argv, *given])
        got["refused_once_drafts_given"] = again.get("refused", "")
    out.append(got)
print(json.dumps(out))
"""


def _last(argv: list[str], flag: str) -> str | None:
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    return values[-1] if values else None


def _departs(arm: str, argv: list[str], got: dict[str, Any]) -> str:
    """How SGLang's resolution departs from ``arm`` planned as ``argv`` ("" when it runs the arm as planned)."""
    if "refused" in got:
        return str(got["refused"])
    spec = plan_arm(arm, ArmCfg())
    claims: dict[str, Any] = {"disable_radix_cache": not spec.cache_on, "enable_hierarchical_cache": spec.host_tier}
    if spec.cache_on:
        claims["mamba_radix_cache_strategy"] = spec.strategy
    if spec.host_tier:
        for key, default in HICACHE_DEFAULTS.items():
            claims[key] = _last(argv, "--" + key.replace("_", "-")) or default
    diff = {k: (v, got.get(k)) for k, v in claims.items() if got.get(k) != v}
    if diff:
        return f"resolved otherwise (planned, resolved): {diff}"
    if refused := got.get("refused_once_drafts_given"):
        return f"starts a line its own validator refuses with the speculative settings it filled in given ({refused})"
    return ""


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str]]]:
    """Per built release, per case: (the plan's refusal or "", how SGLang departs from the arm or "")."""
    root = tmp_path_factory.mktemp("startup")
    (root / "config.json").write_text(json.dumps(QWEN3_NEXT))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    model = ModelCfg()  # Qwen3-Next: the tiny config's architecture
    out = {}
    for version in (v for v in RELEASES if env_ready(v)):
        python = str(env_python(version))
        help_text = installed_help(sglang_help_argv(python, []), "sglang", python)
        ours, argvs = [], []
        for arm, extra, _ in CASES:
            spec = plan_arm(arm, ArmCfg())
            base = sglang_command(python=python, model=model, engine=EngineCfg(tp=4), arm=spec, port=0,
                                  help_text=help_text)
            why = sglang_refusal(model, spec, version, extra)
            if not why:
                try:
                    sglang_command(python=python, model=model, engine=EngineCfg(tp=4, extra_args=extra), arm=spec,
                                   port=0, help_text=help_text)
                except ConfigError as exc:
                    why = str(exc)
            rest = base[3:] + extra  # what merge_extra gives SGLang; argparse keeps the last value of a flag
            rest[rest.index("--model-path") + 1] = str(root)
            ours.append(why)
            argvs.append([*rest, "--device", "cpu"])
        proc = subprocess.run([python, "-c", RESOLVE], input=json.dumps(argvs), capture_output=True, text=True,
                              timeout=600, check=False, cwd=root, env=env)
        assert proc.returncode == 0 and proc.stdout.strip(), f"SGLang {version} resolve failed: {proc.stderr[-1500:]}"
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        arms = [arm for arm, _, _ in CASES]
        out[version] = [(why, _departs(arm, argv, g)) for why, arm, argv, g in zip(ours, arms, argvs, got, strict=True)]
    return out


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
@pytest.mark.parametrize("version", RELEASES)
def test_the_plan_refuses_exactly_what_the_release_refuses_or_rewrites_at_start_up(
        version: str, case: int, decided: dict[str, list[tuple[str, str]]]) -> None:
    if version not in decided:
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv not built (tests/sglang_oracle/build_env.sh)")
    arm, extra, expected = CASES[case]
    ours, theirs = decided[version][case]
    assert bool(theirs) == (version in expected), f"SGLang {version} on {arm} + {extra}: {theirs or 'as planned'}"
    assert bool(ours) == bool(theirs), f"SGLang {version}: {theirs or 'runs it as planned'}; plan: {ours or 'runs it'}"
    assert "\n" not in ours

"""The plan's start-up refusals (hybridbench.engines.sglang_refusal) against each release's own start-up resolution.

``--help`` says which flags a build has, not which combinations it refuses or rewrites when the server starts. Each
case is an arm plus flags in ``engine.extra_args``. For every release: the plan decides (``sglang_refusal`` with the
installed version, then ``sglang_command`` with the installed ``--help``), and the same command line, the arm's
planned flags followed by the extra ones as ``merge_extra`` puts them, goes through ``prepare_server_args`` and the
resolution the server does next, in the release's venv, on a tiny config of the model's architecture with
``--device cpu`` (tests/sglang_oracle/tiny_configs.py; the "extra_buffer needs CUDA" probe answered as an H100
answers it, and the SM90/SM100/SM120 probes as the case's engine.gpu answers them: an H100 unless it names another).

SGLang departs from the arm when it refuses the line, resolves it to another cache than the arm's (the strategy, the
radix cache on or off, the host tier caching with its io backend, layout and write policy as planned), or starts a
line its own validator refuses once the speculative settings it filled in (draft tokens, steps, top-k) are given
explicitly (0.5.16's ``ServerArgs._validate_mamba_extra_buffer`` runs before the algorithm's defaults fill them in, so
``--speculative-algorithm`` alone slips past its "extra_buffer_lazy unsupported with spec"). The plan must refuse
exactly the cases a release departs from, and each case says where it expects that, so a case that stops exercising
anything fails too. Overlap scheduling is not compared: speculative decoding on a CPU turns it off.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent, except in CI.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import warm_release
from oracle_client import env_python, env_ready
from startup_resolution import RESOLVE
from tiny_configs import KIMI_LINEAR, QWEN3_NEXT

from hybridbench.config.schema import ArmCfg, EngineCfg, ModelCfg
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.sglang_cmd import sglang_command, sglang_help_argv, sglang_refusal
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

pytestmark = pytest.mark.sglang

RELEASES = ("0.5.16", "0.5.23")
HICACHE_DEFAULTS = {"hicache_io_backend": "kernel", "hicache_mem_layout": "page_first"}

# (arm, engine.extra_args, the releases that depart from the arm with them)
_CASES: list[tuple[str, list[str], set[str]]] = [
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
    # another prefix cache than the arm's: 0.5.23 builds it, 0.5.16 ignores it for a hybrid model (still asked for)
    ("branching", ["--enable-lmcache"], {"0.5.16", "0.5.23"}),
    ("lru", ["--enable-flexkv"], {"0.5.16", "0.5.23"}),
    ("disabled", ["--radix-cache-backend", "flexkv"], {"0.5.16", "0.5.23"}),  # replaces the chunk cache too
    ("branching", ["--mamba-max-states-per-path", "4"], {"0.5.16", "0.5.23"}),  # 0.5.16 has no such flag
    ("disabled", ["--mamba-max-states-per-path", "4"], {"0.5.16"}),  # no states to cap
    ("branching", ["--mamba-max-states-per-path", "-1"], {"0.5.16"}),
    # the unified pool needs the triton attention backend (0.5.16); with the host tier 0.5.16 refuses it and 0.5.23
    # switches a page_first_direct layout to page_first with the kernel io backend
    ("l2", ["--enable-unified-memory", "--attention-backend", "triton"], {"0.5.16", "0.5.23"}),
    ("l2", ["--enable-unified-memory", "--attention-backend", "triton", "--hicache-io-backend", "kernel",
            "--hicache-mem-layout", "page_first"], {"0.5.16"}),
    ("branching", ["--enable-unified-memory", "--attention-backend", "triton"], set()),
    ("l2", ["--hicache-storage-backend", "mooncake", "--hicache-io-backend", "kernel", "--hicache-mem-layout",
            "layer_first"], {"0.5.16", "0.5.23"}),  # -> page_first
    ("l2", ["--hicache-storage-backend", "mooncake", "--hicache-mem-layout", "page_first_direct"], set()),
    ("l2", ["--hicache-storage-backend", "file", "--hicache-io-backend", "kernel", "--hicache-mem-layout",
            "layer_first"], set()),
    # DP attention divides the chunked prefill size among the groups: the plan gives it times the groups
    ("branching", ["--enable-dp-attention", "--dp-size", "2"], set()),
    ("branching", ["--attn-dp-size", "2"], {"0.5.16"}),  # 0.5.23's own spelling; 0.5.16 has no such flag
    # trtllm_mha: no_buffer refuses it; it runs pages of 16, 32 or 64 tokens and switches page size 1 to 64 (on an
    # H100 0.5.16 refuses it for prefill outright: SM100 only)
    ("lru", ["--attention-backend", "trtllm_mha"], {"0.5.16", "0.5.23"}),
    ("disabled", ["--attention-backend", "trtllm_mha"], {"0.5.16", "0.5.23"}),
    ("branching", ["--decode-attention-backend", "trtllm_mha"], {"0.5.16", "0.5.23"}),
    ("lru", ["--attention-backend", "triton"], set()),
    # EAGLE's steps, top-k and draft tokens: none (SGLang picks them) or steps and top-k
    ("lru", ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"], {"0.5.16", "0.5.23"}),
    ("branching", ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1"], {"0.5.16", "0.5.23"}),
    ("branching", ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"], {"0.5.16", "0.5.23"}),
    ("lru", ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1"],
     set()),
    # decode context parallelism: 0.5.23 runs the host tier with it for MLA models only
    ("l2", ["--dcp-size", "2"], {"0.5.23"}),
    ("l2", ["--hicache-storage-backend", "mooncake", "--hicache-io-backend", "kernel", "--hicache-mem-layout",
            "layer_first", "--dcp-size", "2"], {"0.5.16", "0.5.23"}),  # 0.5.16: -> page_first
    ("branching", ["--dcp-size", "2"], set()),
    # 0.5.23's buffer_only host memory: a staging buffer for the storage backend, no host tier (and write_back becomes
    # write_through; without a storage backend it refuses). 0.5.16 has no such flag.
    ("l2", ["--hicache-storage-backend", "file", "--hicache-host-memory-mode", "buffer_only"], {"0.5.16", "0.5.23"}),
    ("lazy+l2", ["--hicache-storage-backend", "file", "--hicache-host-memory-mode=buffer_only",
                 "--hicache-write-policy", "write_back"], {"0.5.16", "0.5.23"}),
    ("l2", ["--hicache-host-memory-mode", "buffer_only"], {"0.5.16", "0.5.23"}),
    ("l2", ["--hicache-host-memory-mode", "cache"], {"0.5.16"}),
    ("l2", ["--hicache-write-policy", "write_back"], set()),
    ("branching", ["--hicache-storage-backend", "file", "--hicache-host-memory-mode", "buffer_only"], {"0.5.16"}),
]
# The same arms with a small engine.track_interval: the draft tokens SGLang fills in are held against it.
# (arm, engine.extra_args, engine.track_interval, the releases that depart)
_SMALL_INTERVAL: list[tuple[str, list[str], int, set[str]]] = [
    ("branching", ["--speculative-algorithm", "NGRAM"], 8, {"0.5.16", "0.5.23"}),  # 12 draft tokens
    ("branching", ["--speculative-algorithm", "NGRAM"], 12, set()),
    ("branching", ["--speculative-algorithm", "EAGLE"], 2, {"0.5.16", "0.5.23"}),  # 3 steps, top-k 1: 4
    ("branching", ["--speculative-algorithm", "EAGLE"], 4, set()),
    ("branching", ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "9", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "4"], 8, {"0.5.16", "0.5.23"}),  # steps + 1 = 10 wins
    ("lru", ["--speculative-algorithm", "NGRAM"], 8, set()),  # no tracking interval
]
# (arm, engine.extra_args, engine options, the releases that depart): trtllm_mha on its own page sizes, on the GPU the
# plan names. Prefill on it takes SM100 on 0.5.16 and SM90 too on 0.5.23; decode takes SM90 on both; an A100 neither.
_ON_GPU: list[tuple[str, list[str], dict[str, Any], set[str]]] = [
    ("branching", ["--decode-attention-backend", "trtllm_mha"], {"page_size": 64}, set()),
    ("branching", ["--attention-backend", "trtllm_mha"], {"page_size": 64}, {"0.5.16"}),
    ("lazy", ["--prefill-attention-backend", "trtllm_mha"], {"page_size": 32}, {"0.5.16"}),
    ("branching", ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "triton"], {"page_size": 64},
     set()),
    ("branching", ["--attention-backend", "trtllm_mha"], {"page_size": 64, "gpu": "b200"}, set()),
    # 0.5.23's SM90 prefill kernel has no context-parallel masking: SM100 only with --attn-cp-size > 1
    ("branching", ["--attention-backend", "trtllm_mha", "--attn-cp-size", "2"], {"page_size": 64},
     {"0.5.16", "0.5.23"}),
    ("lazy", ["--prefill-attention-backend", "trtllm_mha", "--attention-context-parallel-size", "2"],
     {"page_size": 64, "gpu": "b200"}, set()),
    ("branching", ["--decode-attention-backend", "trtllm_mha"], {"page_size": 64, "gpu": "a100"},
     {"0.5.16", "0.5.23"}),
    ("branching", ["--prefill-attention-backend", "trtllm_mha"], {"page_size": 64, "gpu": "a100"},
     {"0.5.16", "0.5.23"}),
    # pages of 128: 0.5.23 keeps them, 0.5.16 switches them to 64; 0.5.23 also reads the draft model's backend
    ("branching", ["--decode-attention-backend", "trtllm_mha"], {"page_size": 128}, {"0.5.16"}),
    ("branching", ["--decode-attention-backend", "trtllm_mha"], {"page_size": 256}, {"0.5.16", "0.5.23"}),
    ("branching", ["--speculative-draft-attention-backend", "trtllm_mha"], {"page_size": 256}, {"0.5.23"}),
]
# (arm, engine.extra_args, engine options, model options, the releases that depart): on Kimi-Linear (an MLA hybrid:
# tiny_configs.KIMI_LINEAR) or with model.mamba_ssm_dtype, on the GPU the plan names.
_KIMI = {"architecture": "KimiLinearForCausalLM"}
_FP16 = {"mamba_ssm_dtype": "float16"}
_NGRAM = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]
_ON_MODEL: list[tuple[str, list[str], dict[str, Any], dict[str, Any], set[str]]] = [
    # decode context parallelism with the host tier of an MLA model: 0.5.23 refuses a speculative algorithm other than
    # DSPARK (which needs a CUDA device: not run here) and HiSparse; 0.5.16 refuses DCP with any speculative algorithm
    # on CUDA, host tier or not
    ("l2", ["--dcp-size", "2"], {}, _KIMI, set()),
    ("l2", ["--dcp-size", "2", *_NGRAM], {}, _KIMI, {"0.5.16", "0.5.23"}),
    ("l2", ["--decode-context-parallel-size", "2", "--speculative-algorithm", "dspark"], {}, _KIMI,
     {"0.5.16", "0.5.23"}),  # DSPARK's own spelling only
    ("l2", _NGRAM, {}, _KIMI, set()),
    ("l2", ["--dcp-size", "2", "--enable-hisparse"], {}, _KIMI, {"0.5.23"}),
    # 0.5.23's aux-hidden-state capture: the algorithm only names the capture convention and is reset first, so the
    # host tier's DCP rule sees none (0.5.9 and 0.5.16 have no such flag)
    ("l2", ["--dcp-size", "2", "--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states"], {}, _KIMI,
     {"0.5.9", "0.5.16"}),
    ("l2", ["--enable-hisparse"], {}, _KIMI, set()),
    ("branching", ["--dcp-size", "2", "--enable-hisparse"], {}, _KIMI, set()),
    ("branching", ["--dcp-size", "2", *_NGRAM], {}, _KIMI, {"0.5.16"}),
    ("branching", ["--dcp-size", "2", *_NGRAM], {}, {}, {"0.5.16"}),
    # stochastic rounding of the SSM cache: float16 states only, and with the triton mamba backend (its default) on
    # SM100 only
    ("lru", ["--enable-mamba-cache-stochastic-rounding"], {}, _FP16, {"0.5.16", "0.5.23"}),
    ("branching", ["--enable-mamba-cache-stochastic-rounding", "--mamba-backend", "triton"], {"gpu": "a100"}, _FP16,
     {"0.5.16", "0.5.23"}),
    ("lru", ["--enable-mamba-cache-stochastic-rounding"], {"gpu": "b200"}, _FP16, set()),
    ("lru", ["--enable-mamba-cache-stochastic-rounding"], {"gpu": "b200"}, {}, {"0.5.16", "0.5.23"}),
    ("lru", [], {}, _FP16, set()),
]
CASES: list[tuple[str, list[str], set[str], dict[str, Any], dict[str, Any]]] = [
    *((arm, extra, expected, {}, {}) for arm, extra, expected in _CASES),
    *((arm, extra, expected, {"track_interval": ti}, {}) for arm, extra, ti, expected in _SMALL_INTERVAL),
    *((arm, extra, expected, eng, {}) for arm, extra, eng, expected in _ON_GPU),
    *((arm, extra, expected, eng, mdl) for arm, extra, eng, mdl, expected in _ON_MODEL),
]
IDS = [f"{arm}:{' '.join(extra)}" + "".join(f"@{k}={v}" for k, v in {**eng, **mdl}.items())
       for arm, extra, _, eng, mdl in CASES]
# The tiny config of each model.architecture a case names ("": the default model's, Qwen3-Next)
CONFIGS = {"": QWEN3_NEXT, "KimiLinearForCausalLM": KIMI_LINEAR}
# The CUDA major of each engine.gpu a case names (startup_resolution answers the platform probes as it does)
SM_MAJOR = {"a100": 8, "h100": 9, "b200": 10}


def _last(argv: list[str], flag: str) -> str | None:
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    return values[-1] if values else None


def _departs(arm: str, argv: list[str], got: dict[str, Any], base: dict[str, Any], engine: EngineCfg) -> str:
    """How SGLang's resolution departs from ``arm`` planned as ``argv`` ("" when it runs the arm as planned); ``base``
    is the release's resolution of the arm's line without engine.extra_args, ``engine`` the case's engine options."""
    if "refused" in got:
        return str(got["refused"])
    spec = plan_arm(arm, ArmCfg())
    claims: dict[str, Any] = {
        "disable_radix_cache": not spec.cache_on, "enable_hierarchical_cache": spec.host_tier,
        # the prefix cache the arm's own line builds, and nothing else asked for
        "tree_cache": base["tree_cache"], "radix_cache_backend": None, "enable_lmcache": False, "enable_flexkv": False,
        # what each scheduler runs is engine.chunked_prefill_size, which the plan and the record carry
        "chunked_prefill_size": engine.chunked_prefill_size, "page_size": max(engine.page_size, 1),
    }
    if spec.cache_on:
        claims["mamba_radix_cache_strategy"] = spec.strategy
        claims["mamba_max_states_per_path"] = base["mamba_max_states_per_path"]  # -1 (unlimited) where it exists
    if spec.host_tier:
        for key, default in HICACHE_DEFAULTS.items():
            claims[key] = _last(argv, "--" + key.replace("_", "-")) or default
        # a host tier that caches (where the release has the mode: 0.5.23), written back as the line says
        claims["hicache_host_memory_mode"] = base["hicache_host_memory_mode"]
        claims["hicache_write_policy"] = _last(argv, "--hicache-write-policy")
    diff = {k: (v, got.get(k)) for k, v in claims.items() if got.get(k) != v}
    if diff:
        return f"resolved otherwise (planned, resolved): {diff}"
    if refused := got.get("refused_once_drafts_given"):
        return f"starts a line its own validator refuses with the speculative settings it filled in given ({refused})"
    return ""


def _on_cpu(args: list[str], root: Path) -> list[str]:
    """The server's flags with the model swapped for the tiny config at ``root``, on the CPU."""
    rest = list(args)
    rest[rest.index("--model-path") + 1] = str(root)
    return [*rest, "--device", "cpu"]


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str]]]:
    """Per built release, per case: (the plan's refusal or "", how SGLang departs from the arm or "")."""
    root = tmp_path_factory.mktemp("startup")
    roots = {arch: root / (arch or "default") for arch in CONFIGS}
    for arch, path in roots.items():
        path.mkdir()
        (path / "config.json").write_text(json.dumps(CONFIGS[arch]))
    # each arm's own line on each model a case names: what the arm resolves to there
    plain = sorted({(arm, json.dumps(mdl, sort_keys=True)) for arm, _, _, _, mdl in CASES})
    out = {}
    for version in (v for v in RELEASES if env_ready(v)):
        python = str(env_python(version))
        help_text = installed_help(sglang_help_argv(python, []), "sglang", python)
        ours, argvs, majors = [], [], []
        for arm, extra, _, eng, mdl in CASES:
            spec, model, at = plan_arm(arm, ArmCfg()), ModelCfg(**mdl), roots[mdl.get("architecture", "")]
            base = sglang_command(python=python, model=model, engine=EngineCfg(tp=4, **eng), arm=spec, port=0,
                                  help_text=help_text)
            why = sglang_refusal(model, spec, version, extra, EngineCfg(**eng).gpu, EngineCfg(**eng).page_size)
            if not why:
                try:
                    sglang_command(python=python, model=model, engine=EngineCfg(tp=4, extra_args=extra, **eng),
                                   arm=spec, port=0, help_text=help_text)
                except ConfigError as exc:
                    why = str(exc)
            rest = _on_cpu(base[3:] + extra, at)  # what merge_extra gives SGLang; argparse keeps a flag's last value
            if {"--enable-dp-attention", "--attn-dp-size"} & set(extra):  # the plan's --chunked-prefill-size for them
                rest = _on_cpu(sglang_command(python=python, model=model, engine=EngineCfg(tp=4, extra_args=extra),
                                              arm=spec, port=0, help_text=None)[3:], at)
            ours.append(why)
            argvs.append(rest)
            majors.append(SM_MAJOR[EngineCfg(**eng).gpu])
        bases = []
        for arm, key in plain:
            mdl = json.loads(key)
            bases.append(_on_cpu(sglang_command(python=python, model=ModelCfg(**mdl), engine=EngineCfg(tp=4),
                                                arm=plan_arm(arm, ArmCfg()), port=0, help_text=help_text)[3:],
                                 roots[mdl.get("architecture", "")]))
        lines = [*zip(majors, argvs, strict=True), *((SM_MAJOR["h100"], argv) for argv in bases)]  # each on its GPU
        proc = warm_release.run(env_python(version), ["-c", RESOLVE], input=json.dumps(lines), timeout=600, cwd=root,
                                env=warm_release.oracle_env())
        assert proc.returncode == 0 and proc.stdout.strip(), f"SGLang {version} resolve failed: {proc.stderr[-1500:]}"
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        base_of = dict(zip(plain, got[len(argvs):], strict=True))
        out[version] = [(why, _departs(arm, argv, g, base_of[arm, json.dumps(mdl, sort_keys=True)], EngineCfg(**eng)))
                        for why, (arm, _, _, eng, mdl), argv, g in zip(ours, CASES, argvs, got[:len(argvs)],
                                                                         strict=True)]
    return out


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
@pytest.mark.parametrize("version", RELEASES)
def test_the_plan_refuses_exactly_what_the_release_refuses_or_rewrites_at_start_up(
        version: str, case: int, decided: dict[str, list[tuple[str, str]]]) -> None:
    if version not in decided:
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv not built (tests/sglang_oracle/build_env.sh)")
    arm, extra, expected, _, _ = CASES[case]
    ours, theirs = decided[version][case]
    assert bool(theirs) == (version in expected), f"SGLang {version} on {arm} + {extra}: {theirs or 'as planned'}"
    assert bool(ours) == bool(theirs), f"SGLang {version}: {theirs or 'runs it as planned'}; plan: {ours or 'runs it'}"
    assert "\n" not in ours

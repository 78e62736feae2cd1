"""Provenance: no secret reaches the run dir (plan.json, bundle.json, Hydra's files), and the git sha names
the hybridbench checkout that ran, wherever it was started from."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import venv
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from hybridbench.config.redact import redact, redact_config
from hybridbench.config.schema import EngineCfg, RunCfg, WorkloadCfg
from hybridbench.engines.base import EngineInfo
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan
from hybridbench.plan.types import RunPlan
from hybridbench.results import bundle
from hybridbench.results.bundle import package_checkout, provenance

ROOT = Path(__file__).resolve().parents[2]
SECRETS = ("sk-SECRET1", "sk-SECRET2", "sk-SECRET3", "hf_SECRET4", "hf_SECRET5", "SECRET6")


def run_cfg(extra_args: list[str], seed: int = 0, python: Path | None = None) -> RunCfg:
    """A sim run, or with ``extra_args`` a run whose server gets them: the reference engine under ``python``,
    another interpreter, whose server reads them only at launch (sim and replay start no server: they refuse it)."""
    workloads = {"gsp": WorkloadCfg(kind="gsp", params={"num_groups": 2, "prompts_per_group": 2})}
    engine = EngineCfg(name="reference", python=str(python), extra_args=extra_args) if python else EngineCfg()
    return RunCfg(arms=["disabled", "lru"], workloads=workloads, seed=seed, engine=engine)


@pytest.fixture(scope="module")
def pr_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PR's own interpreter: to the plan, one whose server's parser reads engine.extra_args only at launch (where
    this checkout's refuses --api-key: a server that dies quoting its command line). It has the server's
    dependencies (the plan runs its --help): this venv's, lent."""
    pr = tmp_path_factory.mktemp("pr-venv")
    venv.create(pr, with_pip=False, symlinks=True)
    lib = next((pr / "lib").glob("python*/site-packages"))
    (lib / "lent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return pr / "bin" / "python"


def plan_for(cfg: RunCfg, run_dir: Path) -> RunPlan:
    return build_plan(cfg, run_dir, asdict(cfg))


# ------------------------------------------------------------------------------------------- redaction rules


def test_a_secret_flag_hides_every_value_up_to_the_next_flag() -> None:
    # vLLM: --api-key K1 K2 (several keys); the values stop at the next argument starting with "-".
    cmd = ["vllm", "serve", "m", "--api-key", "sk-SECRET1", "sk-SECRET2", "--tp", "4", "--token", "SECRET6"]
    assert redact(cmd) == ["vllm", "serve", "m", "--api-key", "***", "***", "--tp", "4", "--token", "***"]


def test_secret_names_in_name_value_arguments_are_hidden_and_token_counts_are_not() -> None:
    args = ["--hf-token=hf_x", "HF_TOKEN=hf_y", "OPENAI_API_KEY=k", "--openai-api-key", "k2",
            "--max-num-batched-tokens=8192", "--max-tokens", "16", "MIN_TOKEN_HIT_RATE=0.1"]
    assert redact(args) == ["--hf-token=***", "HF_TOKEN=***", "OPENAI_API_KEY=***", "--openai-api-key", "***",
                            "--max-num-batched-tokens=8192", "--max-tokens", "16", "MIN_TOKEN_HIT_RATE=0.1"]


def test_redact_config_hides_secret_keys_argument_lists_and_name_value_strings() -> None:
    config = {
        "engine": {"extra_args": ["--api-key", "sk-SECRET1", 7, "--tp", 4, "--hf-token=hf_SECRET4"], "kv_tokens": 0},
        "checks": {"min_token_hit_rate": 0.1, "enabled": ["survival", "ttft"]},
        "auth": {"api_key": "sk-SECRET2", "hfToken": "hf_SECRET5", "password": None},
        "env": "HF_TOKEN=SECRET6",
    }
    assert redact_config(config) == {
        "engine": {"extra_args": ["--api-key", "***", "***", "--tp", 4, "--hf-token=***"], "kv_tokens": 0},
        "checks": {"min_token_hit_rate": 0.1, "enabled": ["survival", "ttft"]},
        "auth": {"api_key": "***", "hfToken": "***", "password": None},
        "env": "HF_TOKEN=***",
    }
    assert redact_config(redact_config(config)) == redact_config(config)  # idempotent: safe to apply twice


# ------------------------------------------------------------------------------------------- plan and bundle


def test_the_plan_holds_the_redacted_config_and_a_stable_fingerprint(tmp_path: Path, pr_python: Path) -> None:
    args = ["--api-key", "sk-SECRET1", "sk-SECRET3", "--api-key=sk-SECRET2", "HF_TOKEN=hf_SECRET4"]
    plan = plan_for(run_cfg(args, python=pr_python), tmp_path)
    saved = json.dumps(plan.to_json(), default=str)
    assert not [s for s in SECRETS if s in saved]
    assert plan.config["engine"]["extra_args"] == ["--api-key", "***", "***", "--api-key=***", "HF_TOKEN=***"]
    # Identical configs give identical fingerprints; a different secret is not recoverable from it either.
    assert plan_for(run_cfg(args, python=pr_python), tmp_path).fingerprint == plan.fingerprint
    other = ["--api-key", "other", "x", "--api-key=y", "HF_TOKEN=z"]
    assert plan_for(run_cfg(other, python=pr_python), tmp_path).fingerprint == plan.fingerprint
    assert plan_for(run_cfg(args, seed=1, python=pr_python), tmp_path).fingerprint != plan.fingerprint


def test_bundle_provenance_redacts_the_config_and_engine_it_is_given(tmp_path: Path) -> None:
    plan = plan_for(run_cfg([]), tmp_path)
    leaky = replace(plan, config={"engine": {"extra_args": ["--api-key", "sk-SECRET1"]}})
    engine = EngineInfo("vllm", "0", ("vllm", "--api-key", "sk-SECRET2"), {"commands": {"lru": ["HF_TOKEN=SECRET6"]}})
    prov = json.dumps(provenance(leaky, engine))
    assert not [s for s in SECRETS if s in prov]


def test_a_run_leaves_no_secret_and_no_hydra_dir_in_the_run_dir(tmp_path: Path, pr_python: Path) -> None:
    """Secrets in engine.extra_args reach a server's command line only. This server cannot start (its parser refuses
    --api-key): the run ends as an infrastructure failure, its log quoting the command line, and still no
    file in the run dir holds a secret."""
    extra = '[--api-key,sk-SECRET1,sk-SECRET3,"--api-key=sk-SECRET2","HF_TOKEN=hf_SECRET4","--hf-token=hf_SECRET5"]'
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=reference", f"engine.python={pr_python}",
         f"engine.extra_args={extra}", "engine.startup_timeout_s=60", f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )
    assert proc.returncode == 3, proc.stderr
    assert not [s for s in SECRETS if s in proc.stdout + proc.stderr]
    assert not (run_dir / ".hydra").exists()
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name.startswith("server-") for p in files), files  # the server's log was kept, and read here
    leaks = [(str(p), s) for p in files for s in SECRETS if s in p.read_text(errors="replace")]
    assert leaks == []
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["config"]["engine"]["extra_args"][:3] == ["--api-key", "***", "***"]


def test_an_engine_that_starts_no_server_refuses_server_flags_and_interpreters(tmp_path: Path) -> None:
    """``engine=sim engine.python=<a build>`` ran this checkout's simulator and passed, the build never run; extra
    server flags did nothing. One line, exit 2, nothing written, and a secret given there not repeated."""
    for engine in ("sim", "replay"):
        for override, needle in (("engine.python=/opt/pr/bin/python", "engine.python: engine "),
                                 ("engine.extra_args=[--api-key,sk-SECRET1]", "engine.extra_args: engine ")):
            run_dir = tmp_path / f"{engine}-{len(override)}"
            proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", f"engine={engine}",
                                   override, f"hydra.run.dir={run_dir}"],
                                  capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
            assert proc.returncode == 2, proc.stderr
            line = proc.stderr.strip()
            assert line.startswith(f"error: {needle}{engine} ") and "starts no server" in line, line
            assert len(line.splitlines()) == 1 and "sk-SECRET1" not in line
            assert not run_dir.exists()


# ------------------------------------------------------------------------------------------- git and PR number


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_git_sha_comes_from_the_package_checkout_not_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # not a git repository
    monkeypatch.delenv("GIT_DIR", raising=False)
    before = git("rev-parse", "HEAD")
    prov = provenance(plan_for(run_cfg([]), tmp_path), EngineInfo("sim", "x"))
    assert prov["git_sha"] in {before, git("rev-parse", "HEAD")}  # others may commit meanwhile
    assert len(prov["git_sha"]) == 40
    checkout = package_checkout()
    assert checkout is not None and checkout.resolve() == ROOT.resolve()


def test_no_git_checkout_gives_an_empty_sha(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "site-packages" / "hybridbench"  # a pip-installed copy, outside any repository
    wheel.mkdir(parents=True)
    shutil.copy(ROOT / "hybridbench" / "__init__.py", wheel / "__init__.py")
    assert package_checkout(wheel) is None
    monkeypatch.setattr(bundle, "_PACKAGE_DIR", wheel)
    prov = provenance(plan_for(run_cfg([]), tmp_path), EngineInfo("sim", "x"))
    assert (prov["git_sha"], prov["git_dirty"]) == ("", False)


def test_an_installed_copy_inside_another_repo_does_not_take_its_sha(tmp_path: Path) -> None:
    # A venv inside some project's checkout: git would find that project, which is not hybridbench's source.
    repo = tmp_path / "project"
    venv_pkg = repo / ".venv" / "lib" / "hybridbench"
    venv_pkg.mkdir(parents=True)
    (repo / ".gitignore").write_text(".venv/\n")
    shutil.copy(ROOT / "hybridbench" / "__init__.py", venv_pkg / "__init__.py")
    git("init", "-q", cwd=repo)
    git("add", ".gitignore", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init", cwd=repo)
    assert package_checkout(venv_pkg) is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HYBRIDBENCH_PR": "123"}, "123"),
        ({"PR_NUMBER": "45"}, "45"),
        ({"HYBRIDBENCH_PR": "123", "PR_NUMBER": "45"}, "123"),  # the harness's own variable wins
        ({}, None),
    ],
)
def test_pr_number_comes_from_the_environment(
    env: dict[str, str], expected: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("HYBRIDBENCH_PR", "PR_NUMBER", "GITHUB_PR_NUMBER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert provenance(plan_for(run_cfg([]), tmp_path), EngineInfo("sim", "x"))["pr_number"] == expected


@pytest.mark.parametrize(("key", "value"), [("HYBRIDBENCH_PR", "abc"), ("HYBRIDBENCH_PR", "-3"),
                                            ("HYBRIDBENCH_PR", "0"), ("HYBRIDBENCH_PR", "7/head"),
                                            ("HYBRIDBENCH_PR", " 7"), ("PR_NUMBER", "1.5"),
                                            ("GITHUB_PR_NUMBER", "refs/pull/12/merge")])
def test_a_pr_number_that_is_no_positive_integer_names_its_variable(
        key: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each was written into the bundle as it came: a run on the branch "pr-abc", or "pr-7/head"
    for other in ("HYBRIDBENCH_PR", "PR_NUMBER", "GITHUB_PR_NUMBER"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as info:
        provenance(plan_for(run_cfg([]), tmp_path), EngineInfo("sim", "x"))
    assert str(info.value) == f"{key} must be a pull request number (a positive integer), got {value!r}"


def test_a_bad_pr_number_is_one_line_exit_2_before_any_work(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PR_NUMBER", "GITHUB_PR_NUMBER")}
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim",
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300,
                          check=False, cwd=ROOT, env={**env, "HYBRIDBENCH_PR": "pr-7"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: HYBRIDBENCH_PR must be a pull request number (a positive integer), got 'pr-7'"]
    assert not (tmp_path / "run").exists()


def test_the_host_cpu_is_recorded_from_cpuinfo_and_read_back(tmp_path: Path) -> None:
    # compare holds wall-clock timings of the reference server to one CPU: the bundle must say which.
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    assert bundle.machine(info) == {"cpu": "AMD EPYC 7B13", "cores": len(os.sched_getaffinity(0))}
    assert bundle.machine(tmp_path / "absent")["cores"] == len(os.sched_getaffinity(0))  # no cpuinfo: no crash
    # Limited to one core (taskset, a container's cpuset), a run is timed on one, whatever the host has.
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert bundle.machine(info)["cores"] == 1
    finally:
        os.sched_setaffinity(0, allowed)
    from hybridbench.results.reader import read_bundle

    path = tmp_path / "bundle.json"
    for machine, cpu in (({"cpu": "AMD EPYC 7B13", "cores": 8}, "AMD EPYC 7B13, 8 cores"), (None, ""),
                         ({"cpu": "AMD EPYC 7B13"}, "")):  # an older bundle, or a half record: unknown
        prov = {"engine": {"name": "reference"}, **({"machine": machine} if machine else {})}
        path.write_text(json.dumps({"schema_version": 1, "trials": [], "provenance": prov}))
        assert read_bundle(path).provenance.cpu == cpu

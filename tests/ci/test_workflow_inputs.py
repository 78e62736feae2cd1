"""The pull-request workflow's dispatch inputs reach its scripts as data: an input is never pasted into a `run:`
script (GitHub expands `${{ ... }}` there before bash reads it), so shell code in one never runs on the runner."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
import yaml
from workflow_steps import ROOT, WORKFLOWS, commands


def test_no_run_script_pastes_an_expression() -> None:
    """GitHub expands `${{ ... }}` in a `run:` script before bash reads it, so a dispatch input holding `$(...)` would
    run as code on the self-hosted runner: every value reaches the scripts through `env:`."""
    for workflow in WORKFLOWS:
        doc: dict[Any, Any] = yaml.safe_load(workflow.read_text())
        for job in doc["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in str(step.get("run", "")), (workflow.name, step.get("name"))


def test_hostile_inputs_stay_data() -> None:
    """An override that is shell code reaches hybridbench as words (which it then refuses as overrides), never run;
    overrides still split at whitespace into separate overrides."""
    hostile = {"overrides": "engine.tp=1 $(printf INJECTED) `printf TICKS`", "pr_arms": "[lru]$(printf X)"}
    runs = dict(commands(ROOT / "ci" / "pr.yml", hostile))
    for step in ("main", "pull request"):
        argv = runs[step]
        assert "engine.tp=1" in argv and "$(printf" in argv and "INJECTED)" in argv and "`printf" in argv, argv
        assert "INJECTED" not in argv and "TICKS" not in argv, argv
    assert "arms=[lru]$(printf X)" in runs["pull request"]


@pytest.mark.parametrize(("number", "code"), [("22172", 0), ("22172; echo hi", 2), ("$(id)", 2), ("", 2)])
def test_the_pull_request_number_must_be_digits(number: str, code: int) -> None:
    """It becomes part of a git ref and a URL: anything but digits stops the job before SGLang is installed, and
    the publish job (the one with a token that can write) checks it again rather than trusting the other job."""
    doc: dict[Any, Any] = yaml.safe_load((ROOT / "ci" / "pr.yml").read_text())
    steps = [(job, st) for job, spec in doc["jobs"].items() for st in spec["steps"]
             if "SGLANG_PR" in (st.get("env") or {})]
    assert [job for job, _ in steps] == ["compare", "publish"]
    for _, step in steps:
        check = str(step["run"]).splitlines()[0]
        proc = subprocess.run(["bash", "-c", check], capture_output=True, text=True, check=False,
                              env={"PATH": os.environ.get("PATH", ""), "SGLANG_PR": number})
        assert proc.returncode == code, proc.stderr
        assert ("sglang_pr must be a pull request number" in proc.stderr) == (code == 2)


@pytest.mark.parametrize(("overrides", "code"), [("engine.tp=2 model=qwen3.5-9b", 0), ("", 0),
                                                 ("engine.tp=2\nmodel=qwen3.5-9b", 2)])
def test_overrides_on_more_than_one_line_stop_the_run(overrides: str, code: int) -> None:
    """`read -a` reads one line: an API-dispatched input with a newline would run with its later lines dropped."""
    doc: dict[Any, Any] = yaml.safe_load((ROOT / "ci" / "pr.yml").read_text())
    steps = [st for st in doc["jobs"]["compare"]["steps"] if "OVERRIDES" in (st.get("env") or {})]
    assert [st["name"] for st in steps] == ["main", "pull request"]
    for step in steps:
        check = str(step["run"]).splitlines()[0]
        proc = subprocess.run(["bash", "-c", check], capture_output=True, text=True, check=False,
                              env={"PATH": os.environ.get("PATH", ""), "OVERRIDES": overrides})
        assert proc.returncode == code, proc.stderr

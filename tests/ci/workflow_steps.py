"""The workflows' hybridbench command lines as a runner's shell expands them, and each run's composed config:
computed once per process (a bash per line, a third of a second per compose; up to five tests of
test_workflows.py ask for the same ones), handed out as copies a test may change.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.config.strict import reject_unknown_keys

__all__ = ["CONF", "PNG_URL", "ROOT", "TOOLS", "WORKFLOWS", "commands", "compose_run", "runs_of"]

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
WORKFLOWS = sorted((ROOT / "ci").glob("*.yml"))


# read runs, run nothing
TOOLS = ("hybridbench.compare", "hybridbench.results", "hybridbench.dashboard", "hybridbench.dashboard.pr_summary")
PNG_URL = "https://raw.githubusercontent.com/owner/repo/0123abcd/pr-12345/1.png"  # what an earlier step output


def commands(workflow: Path, inputs_set: dict[str, str] | None = None, **env_set: str) -> list[tuple[str, list[str]]]:
    """:func:`_commands` (once per process per arguments: a bash per line), in lists the caller may change."""
    found = _commands(workflow, tuple(sorted((inputs_set or {}).items())), tuple(sorted(env_set.items())))
    return [(step, list(argv)) for step, argv in found]


@functools.cache
def _commands(workflow: Path, inputs_items: tuple[tuple[str, str], ...],
              env_items: tuple[tuple[str, str], ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(step name, argv after `python -m`) of every hybridbench invocation, with the workflow's inputs at
    their defaults (a required input gets a sample value) and its env variables as they would expand
    (``inputs_set`` and ``env_set`` replace some). Each command line is expanded by bash after the lines of its
    step before it (``arms="..."; if ...; fi``), so the shell a runner would run decides the argv."""
    doc: dict[Any, Any] = yaml.safe_load(workflow.read_text())
    on = doc.get("on") or doc.get(True) or {}  # YAML 1.1 reads a bare `on:` key as True
    declared = (on.get("workflow_dispatch") or {}).get("inputs") or {}
    inputs = {k: str(v.get("default", "12345")) for k, v in declared.items()} | dict(inputs_items)
    env = {k: str(v) for k, v in (doc.get("env") or {}).items()} | dict(env_items)
    # Left as written, as the tests expect to find them (a file named so in the working directory).
    shell_env = {"PATH": os.environ.get("PATH", ""), "GITHUB_STEP_SUMMARY": "$GITHUB_STEP_SUMMARY"}
    def expand(text: str) -> str:  # GitHub's pass before any shell: inputs, an earlier step's output (a URL)
        text = re.sub(r"\$\{\{\s*inputs\.(\w+)\s*\}\}", lambda m: inputs[m.group(1)], text)
        return re.sub(r"\$\{\{\s*(?:steps|needs)\.[\w-]+\.outputs\.([\w-]+)\s*\}\}",
                      lambda m: PNG_URL if m.group(1) == "url" else f"https://example.invalid/{m.group(1)}", text)

    out = []
    for job in doc["jobs"].values():
        for step in job["steps"]:
            before: list[str] = []
            step_env = {k: expand(str(v)) for k, v in (step.get("env") or {}).items()}
            for raw in str(step.get("run", "")).splitlines():
                text = expand(raw)
                if "-m hybridbench" not in raw:
                    before.append(text)
                    continue
                text = re.split(r"\s*(?:\|\||;|&&)\s*", text)[0]  # the command, not the shell around it
                script = "\n".join([*before, f"printf '%s\\0' {text}"])
                proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                                      env={**shell_env, **env, **step_env,
                                           **{k: v for k, v in os.environ.items() if k == "HOME"}})
                argv = proc.stdout.split("\0")[:-1]
                out.append((str(step.get("name", "")), tuple(argv[argv.index("-m") + 1:])))
    return tuple(out)


def compose_run(args: list[str]) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    overrides = [a for a in args if not a.startswith("hydra.")]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=overrides)
    reject_unknown_keys(cfg, RunCfg)
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunCfg)
    return run


def runs_of(workflow: Path, inputs_set: dict[str, str] | None = None) -> list[tuple[str, RunCfg]]:
    """Each hybridbench step's config, composed once per process (up to five tests compose the same), a copy."""
    return [(step, copy.deepcopy(cfg)) for step, cfg in _runs(workflow, tuple(sorted((inputs_set or {}).items())))]


@functools.cache
def _runs(workflow: Path, inputs_items: tuple[tuple[str, str], ...]) -> tuple[tuple[str, RunCfg], ...]:
    out = []
    for step, argv in commands(workflow, dict(inputs_items)):
        if argv[0] in TOOLS:
            continue
        assert argv[0] == "hybridbench", step
        out.append((step, compose_run(argv[1:])))
    return tuple(out)

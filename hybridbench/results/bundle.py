"""bundle.json: summaries, verdicts and provenance of one run (schema-versioned)."""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from hybridbench.checks.base import CheckResult, run_verdict
from hybridbench.config.redact import redact_config, redact_overrides
from hybridbench.errors import ConfigError
from hybridbench.metrics.published import compare_published
from hybridbench.plan.types import MODELLED_ENGINES, RunPlan

__all__ = ["BUNDLE_SCHEMA_VERSION", "PR_VARIABLES", "EngineBuild", "build_bundle", "machine", "package_checkout",
           "pr_number", "provenance"]

BUNDLE_SCHEMA_VERSION = 1
class EngineBuild(Protocol):
    """What provenance records of the engine that ran (``engines.base.EngineInfo``; results import no engine)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def extra(self) -> dict[str, Any]: ...


# The package's own source tree: provenance names the hybridbench that ran, not whatever repo the cwd is in.
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Set by git hooks and some CI steps; they would point git at another repository than the package's.
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")


def _git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECTS}
    try:
        proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=10,
                              check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def package_checkout(package_dir: Path | None = None) -> Path | None:
    """The git checkout hybridbench runs from, or None (an installed wheel, even one in a venv inside a repo).

    The package's ``__init__.py`` must be tracked there: a site-packages copy under some repo's ignored
    ``.venv`` must not report that repo's sha.
    """
    package_dir = package_dir or _PACKAGE_DIR
    if not (package_dir / "__init__.py").is_file() or not _git(package_dir, "ls-files", "--", "__init__.py"):
        return None
    top = _git(package_dir, "rev-parse", "--show-toplevel")
    return Path(top) if top else None


def _git_state() -> tuple[str, bool]:
    repo = package_checkout()
    if repo is None:
        return "", False
    return _git(repo, "rev-parse", "HEAD"), bool(_git(repo, "status", "--porcelain"))


def command_line() -> str:
    """The command that reproduces this run: this job's own Hydra overrides (a sweep's job gets its point of
    the sweep, not the sweep), secrets masked; "" outside a Hydra run."""
    try:
        from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415 - only a Hydra-launched run has one

        if not HydraConfig.initialized():
            return ""
        overrides = list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):
        return ""
    return " ".join(["python", "-m", "hybridbench", *(shlex.quote(o) for o in redact_overrides(overrides))])


# Where the pull request a run measures comes from, the first set one winning (the harness's own first).
PR_VARIABLES = ("HYBRIDBENCH_PR", "PR_NUMBER", "GITHUB_PR_NUMBER")
_PR = re.compile(r"[1-9][0-9]{0,9}")


def pr_number() -> str | None:
    """The pull request number from the environment (None: unset or empty). It becomes the run's branch
    ``pr-N``, the index's ``pr_number`` that ``--pr`` filters on, and "PR N" in a comparison: anything but a
    pull request's number (a positive integer) is a ConfigError naming the variable read."""
    key = next((k for k in PR_VARIABLES if os.environ.get(k)), None)
    if key is None:
        return None
    value = os.environ[key]
    if not _PR.fullmatch(value):
        raise ConfigError(f"{key} must be a pull request number (a positive integer), got {value!r}")
    return value


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The host CPU the run was timed on: a wall clock on a CPU compares only with the same CPU (compare). The
    model is /proc/cpuinfo's first "model name" (else the platform's processor string; "" when neither says)."""
    model = ""
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as fh:
            model = next((v.strip() for k, _, v in (line.partition(":") for line in fh) if k.strip() == "model name"),
                         "")
    except OSError:
        pass
    # The cores this process may run on (affinity, a container's cpuset), not the host's: a run limited to 2 of 8
    # is timed on 2.
    return {"cpu": model or platform.processor(), "cores": len(os.sched_getaffinity(0))}


def provenance(plan: RunPlan, engine: EngineBuild) -> dict[str, Any]:
    pr = pr_number()
    try:
        version = metadata.version("hybridbench")
    except metadata.PackageNotFoundError:
        version = "unknown"
    sha, dirty = _git_state()
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "pr_number": pr,
        "hybridbench_version": version,
        "python": platform.python_version(),
        "host": platform.node(),
        "machine": machine(),
        # Both already redacted upstream (plan, engine); again here since this goes to disk.
        "engine": redact_config({"name": engine.name, "version": engine.version,
                                "command": list(engine.command), "extra": engine.extra}),
        "plan_fingerprint": plan.fingerprint,
        "command": command_line(),
        "config": redact_config(plan.config),
    }


def build_bundle(
    plan: RunPlan,
    engine: EngineBuild,
    trials: list[dict[str, Any]],
    aggregates: dict[str, dict[str, dict[str, Any]]],
    checks: list[CheckResult],
) -> dict[str, Any]:
    return {
        "schema_version": BUNDLE_SCHEMA_VERSION,
        "name": plan.name,
        "run_dir": plan.run_dir,
        # Who this run is, whatever path reaches it (a copy, a link): results count it once.
        "run_id": uuid.uuid4().hex,
        "created": datetime.now(timezone.utc).isoformat(),
        "modelled": plan.engine in MODELLED_ENGINES,
        "arms": list(plan.arms),
        "baseline_arm": plan.baseline_arm,
        "trials": trials,
        "aggregates": aggregates,
        "checks": [asdict(c) for c in checks],
        "published": compare_published(plan.config, aggregates, [str(g) for g in engine.extra.get("gpus") or ()]),
        "notes": {name: w["note"] for name, w in (plan.config.get("workloads") or {}).items()
                  if isinstance(w, dict) and w.get("note")},
        # A run that could not decide is not a pass (exit 1 like a failure), but it is named for what it is.
        "verdict": run_verdict(c.status for c in checks),
        "provenance": provenance(plan, engine),
    }


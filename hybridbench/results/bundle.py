"""bundle.json: summaries, verdicts and provenance of one run (schema-versioned)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from hybridbench.checks.base import CheckResult
from hybridbench.engines.base import EngineInfo
from hybridbench.plan.types import RunPlan

__all__ = ["BUNDLE_SCHEMA_VERSION", "build_bundle", "provenance", "redact"]

BUNDLE_SCHEMA_VERSION = 1
_SECRET_FLAGS = ("--api-key", "--token", "--hf-token", "--admin-api-key")
_SECRET_ENV = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD)", re.IGNORECASE)


def redact(command: tuple[str, ...] | list[str]) -> list[str]:
    """Hide the values of secret flags (``--api-key X`` and ``--api-key=X``) and secret env assignments."""
    out: list[str] = []
    hide_next = False
    for arg in command:
        if hide_next:
            out.append("***")
            hide_next = False
        elif arg in _SECRET_FLAGS:
            out.append(arg)
            hide_next = True
        elif "=" in arg and (arg.split("=", 1)[0] in _SECRET_FLAGS or _SECRET_ENV.search(arg.split("=", 1)[0])):
            out.append(arg.split("=", 1)[0] + "=***")
        else:
            out.append(arg)
    return out


def _git(*args: str) -> str:
    try:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def provenance(plan: RunPlan, engine: EngineInfo) -> dict[str, Any]:
    pr = next((os.environ[k] for k in ("HYBRIDBENCH_PR", "PR_NUMBER", "GITHUB_PR_NUMBER") if os.environ.get(k)), None)
    try:
        version = metadata.version("hybridbench")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "git_sha": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
        "pr_number": pr,
        "hybridbench_version": version,
        "python": platform.python_version(),
        "host": platform.node(),
        "engine": {**asdict(engine), "command": redact(engine.command)},
        "plan_fingerprint": plan.fingerprint,
        "config": plan.config,
    }


def build_bundle(
    plan: RunPlan,
    engine: EngineInfo,
    trials: list[dict[str, Any]],
    aggregates: dict[str, dict[str, dict[str, Any]]],
    checks: list[CheckResult],
) -> dict[str, Any]:
    failed = [c for c in checks if c.status == "fail"]
    return {
        "schema_version": BUNDLE_SCHEMA_VERSION,
        "name": plan.name,
        "run_dir": plan.run_dir,
        "created": datetime.now(timezone.utc).isoformat(),
        "modelled": plan.engine == "sim",
        "arms": list(plan.arms),
        "baseline_arm": plan.baseline_arm,
        "trials": trials,
        "aggregates": aggregates,
        "checks": [asdict(c) for c in checks],
        "verdict": "fail" if failed else "pass",
        "provenance": provenance(plan, engine),
    }


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)

"""A results root of real runs, made once per session by the harness on the sim engine: three nightly main runs,
two more after a code change that slows the server's frontend (a TTFT regression the history must find, configured
as the others), a pull request's run of the same slower code, an old-schema run, a corrupt directory and an
unfinished one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLD_RUN = ROOT / "tests" / "hybridbench" / "fixtures" / "runs" / "fbde869-smoke-sim"
MAIN_RUNS = ("main-1", "main-2", "main-3", "main-4", "main-5")
SLOW = ("main-4", "main-5")  # the simulated frontend 25% slower (slow_frontend/sitecustomize.py), sized as the others
SLOWER_CODE = {"PYTHONPATH": str(Path(__file__).resolve().parent / "slow_frontend")}


def harness(run_dir: Path, *overrides: str, env: dict[str, str] | None = None, engine: str = "sim") -> None:
    # two repeats: one a side decides no timing verdict (inconclusive), and these runs must pass to be "main"
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", f"engine={engine}", "repeats=2",
                           *overrides, f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=300,
                          check=False, cwd=ROOT, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="session")
def results_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("results") / "runs"
    for name in MAIN_RUNS:
        harness(root / name, env=SLOWER_CODE if name in SLOW else None)
    harness(root / "pr-7", env={**SLOWER_CODE, "HYBRIDBENCH_PR": "7"})
    shutil.copytree(OLD_RUN, root / "old-schema")
    (root / "corrupt").mkdir()
    (root / "corrupt" / "plan.json").write_text("{not json")
    (root / "unfinished").mkdir()
    shutil.copy(root / "main-1" / "plan.json", root / "unfinished" / "plan.json")
    return root

"""A run directory holds one run: reusing one (a fixed ``hydra.run.dir``) once appended a second run's records
to the first's records.jsonl, and the report then counted 36 completed requests for 18-request trials.

A directory that already holds files is refused unless ``overwrite=true`` asks to replace the run in it; even
then only a directory that holds a hybridbench run (its plan.json) and nothing but a run's files is emptied: with
anything else in it (``hydra.run.dir=.`` in a checkout holding a plan.json) the whole directory, ``.git`` and all,
was removed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from hybridbench.errors import ConfigError
from hybridbench.records.accuracy import ACCURACY_SAMPLES
from hybridbench.records.exact_hits import EXACT_HITS_SAMPLES
from workloads.atomic_file import output_problem

__all__ = ["claim_run_dir", "release_run_dir", "run_dir_refusal"]


# What a run writes into its directory (docs/reference/run-files.md): overwrite=true removes these and only these.
RUN_FILES = frozenset({"plan.json", "records.jsonl", "bundle.json", "report.md", "forecast.json", "crash.txt",
                       "kl.jsonl", ACCURACY_SAMPLES, EXACT_HITS_SAMPLES})
RUN_FOLDERS = frozenset({"traces", "logs", "accuracy"})
_TEMPORARY = re.compile(r"\.(.+)\.[a-z0-9_]{8}")  # workloads/atomic_file.py's mkstemp(prefix=".<name>.")


def _a_runs(entry: Path) -> bool:
    """A file or folder a run writes, or an atomic writer's ``.<name>.<random>`` left by a killed run."""
    name = entry.name
    if killed := _TEMPORARY.fullmatch(name):  # tempfile's 8 characters: ".plan.json.bak" is the user's
        name = killed.group(1)
    if entry.is_symlink():
        return False  # a run writes none: a link is the user's (and rmtree would follow it nowhere)
    return (name in RUN_FILES and entry.is_file()) or (name in RUN_FOLDERS and entry.is_dir())


def _ours(entry: Path) -> bool:
    """Hydra's own job log (``__main__.log``), opened before the run starts, is not a previous run."""
    return entry.is_file() and entry.suffix == ".log"


def run_dir_refusal(run_dir: Path, *, overwrite: bool) -> str | None:
    """Why :func:`claim_run_dir` would refuse ``run_dir`` (None: it would not), nothing made or removed: the run's rule,
    asked by ``hybridbench doctor`` too, which said ``ready`` for a run directory the run then refused."""
    if run_dir.exists() and not run_dir.is_dir():
        return f"hydra.run.dir: {run_dir} exists and is not a directory"
    if dangling := next((a for a in (run_dir, *run_dir.parents) if a.is_symlink() and not a.exists()), None):
        return f"hydra.run.dir: {run_dir}: {dangling} is a symlink to nothing"
    if problem := output_problem(run_dir, folder=True):
        return f"hydra.run.dir: {problem}"
    held = _held(run_dir)
    if not held:
        return None
    names = ", ".join(p.name for p in held[:4]) + (" ..." if len(held) > 4 else "")
    if not overwrite:
        return (f"hydra.run.dir: {run_dir} already holds files ({names}); choose a new directory, or pass "
                "overwrite=true to replace the run in it")
    if not (run_dir / "plan.json").is_file():
        return (f"hydra.run.dir: {run_dir} holds files ({names}) but no hybridbench run (plan.json); "
                "overwrite=true only replaces a previous run")
    if foreign := [p.name for p in held if not _a_runs(p)]:
        listed = ", ".join(foreign[:4]) + (" ..." if len(foreign) > 4 else "")
        return (f"hydra.run.dir: {run_dir} holds a run and files no run writes ({listed}); overwrite=true "
                "only removes a previous run's files: move those, or choose a new directory")
    return None


def _held(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.iterdir() if not _ours(p)) if run_dir.is_dir() else []


def claim_run_dir(run_dir: Path, *, overwrite: bool) -> None:
    """Make ``run_dir`` an empty directory for this run, or raise ConfigError (exit 2) saying why not."""
    if why := run_dir_refusal(run_dir, overwrite=overwrite):
        raise ConfigError(why)
    run_dir.mkdir(parents=True, exist_ok=True)
    for p in _held(run_dir):  # a previous run's files alone (run_dir_refusal), with overwrite=true
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def release_run_dir(run_dir: Path) -> None:
    """Undo a claim when the run is refused before its first trial: remove what it wrote (its plan and traces).
    The claim left the directory empty but for Hydra's job log, so everything else in it is this run's."""
    for p in run_dir.iterdir():
        if _ours(p):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()

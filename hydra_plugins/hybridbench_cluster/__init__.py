"""Hydra's submitit launchers (``hydra/launcher=submitit_local`` or ``submitit_slurm``, conf/hydra/launcher/) with
each job's exit code carried back to the launching process: the sweep exits with its worst job's code (0 pass,
1 a check failed, 3 infrastructure), and a job that never reported (timed out, killed, node lost) counts as an
infrastructure failure named in one line, never as a pass.

Each job writes its run directory under ``HydraConfig.get().runtime.output_dir`` (``hydra.sweep.dir``/N, one
results root for the whole sweep) and appends its line to that root's index.jsonl; ``python -m hybridbench.results
index ROOT`` rebuilds the index from the run directories whatever the order the jobs finished in."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from hybridbench import sweep_status

try:  # the cluster extra; Hydra imports every hydra_plugins module at start-up, so its absence must stay quiet
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - hydra/launcher=submitit_* then fails with "Unknown plugin class"
    submitit_launcher = None
# submitit itself is imported when a sweep launches (~50 ms at every start-up of every Hydra process otherwise)
if importlib.util.find_spec("submitit") is None:  # pragma: no cover - as above
    submitit_launcher = None

# conf/hydra/launcher/submitit_*.yaml shadow the plugin's configs on purpose (to point at the launchers below) and
# are validated against its schemas; Hydra warns about that name match in every process that composes them.
_SHADOWED = "(?s).*is validated against ConfigStore schema with the same name"


def _report(returns: Sequence[JobReturn]) -> list[JobReturn]:
    for ret in returns:
        value = ret._return_value  # .return_value would re-raise a failed job's exception
        if ret.status == JobStatus.COMPLETED and isinstance(value, int):
            sweep_status.record(value)
        else:  # the task catches every exception itself, so this is a job the launcher could not run
            print(f"error: sweep job {ret.hydra_cfg.hydra.job.num if ret.hydra_cfg else '?'} failed: {value}",
                  file=sys.stderr)
            sweep_status.record(3)
    return [ret for ret in returns if ret.status == JobStatus.COMPLETED]


if submitit_launcher is not None:
    class LocalLauncher(submitit_launcher.LocalLauncher):  # type: ignore[misc]
        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
            return _launch(super().launch, self.params["submitit_folder"], job_overrides, initial_job_idx)

        def __call__(self, *args: Any) -> JobReturn:  # in the job's process, before it composes its config
            warnings.filterwarnings("ignore", message=_SHADOWED)
            return super().__call__(*args)  # type: ignore[no-any-return]

    class SlurmLauncher(submitit_launcher.SlurmLauncher):  # type: ignore[misc]
        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
            return _launch(super().launch, self.params["submitit_folder"], job_overrides, initial_job_idx)

        def __call__(self, *args: Any) -> JobReturn:  # in the job's process, before it composes its config
            warnings.filterwarnings("ignore", message=_SHADOWED)
            return super().__call__(*args)  # type: ignore[no-any-return]


def _launch(launch: object, folder: str, job_overrides: Sequence[Sequence[str]], idx: int) -> list[JobReturn]:
    from submitit.core.utils import UncompletedJobError  # noqa: PLC0415 - see the import of submitit_launcher

    assert callable(launch)
    try:
        returns = launch(job_overrides, idx)
    except UncompletedJobError as exc:  # submitit waits for every job; one never wrote its result
        first = " ".join(str(exc).split())[:300]
        print(f"error: a sweep job did not finish ({first}); its logs are under {folder}", file=sys.stderr)
        sweep_status.record(3)
        return []
    return _report(returns)

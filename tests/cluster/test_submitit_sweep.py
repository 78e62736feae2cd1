"""Beyond one machine: a sweep sent through Hydra's submitit launchers (conf/hydra/launcher/, hydra_plugins/
hybridbench_cluster). submitit_local runs a real two-job sweep on the sim engine; the SLURM sweep is submitted to
submitit's own fake SLURM, which records the sbatch script it would have run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _hb(*args: str, cwd: Path = ROOT, code: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "hybridbench", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False, cwd=cwd, env=env)


def test_submitit_local_sweep_writes_every_job_under_one_root_and_exits_with_the_worst_job(tmp_path: Path) -> None:
    # The sweep dir carries microseconds: a job that re-resolved ${now:} instead of the launcher's value would
    # write into a root of its own.
    proc = _hb("-m", "hydra/launcher=submitit_local", "+experiment=smoke", "engine=sim", "repeats=2",
               "checks.min_token_hit_rate=0.0,0.99", f"hydra.sweep.dir={tmp_path}/runs/${{now:%H%M%S%f}}-sweep")
    assert proc.returncode == 1, proc.stderr  # the second job's hit-rate check fails; a local sweep exits 1 too
    (sweep,) = (tmp_path / "runs").iterdir()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == [".submitit", "0", "1"]
    assert (sweep / "0" / "bundle.json").is_file() and (sweep / "1" / "bundle.json").is_file()
    assert len(list((sweep / ".submitit").rglob("*_result.pkl"))) == 2  # each ran as a submitit job
    ls = subprocess.run([sys.executable, "-m", "hybridbench.results", "index", str(tmp_path)], capture_output=True,
                        text=True, check=False, cwd=ROOT)
    assert ls.returncode == 0, ls.stderr
    lines = [json.loads(ln) for ln in (tmp_path / "index.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    listed = subprocess.run([sys.executable, "-m", "hybridbench.results", "ls", str(tmp_path)], capture_output=True,
                            text=True, check=False, cwd=ROOT)
    rows = listed.stdout.splitlines()
    assert len(rows) == 2, listed.stdout
    assert sorted(row.split()[2] for row in rows) == ["fail", "pass"]


_FAKE_SLURM = """
import runpy, sys
from submitit.core import core
from submitit.slurm.test_slurm import mocked_slurm

core.Job._results_timeout_s = 0  # the fake jobs never write a result: do not wait for one
with mocked_slurm() as mock:
    sbatch = mock.sbatch

    def finished(args):  # submitted, then reported COMPLETED by sacct without a result (a node lost)
        out = sbatch(args)
        mock.set_job_state(mock.last_job, "COMPLETED", 2)
        return out

    mock.sbatch = finished
    sys.argv = ["hybridbench", *sys.argv[1:]]
    runpy.run_module("hybridbench", run_name="__main__")
"""


def test_slurm_sweep_renders_the_sbatch_script_and_a_job_without_result_is_an_infrastructure_failure(
        tmp_path: Path) -> None:
    proc = _hb("-m", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=h100", "hydra.launcher.timeout_min=90",
               "+experiment=smoke", "engine=sglang", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep", code=_FAKE_SLURM)
    (script,) = (tmp_path / "sweep" / ".submitit").rglob("*_submission.sh")
    text = script.read_text()
    for line in ("#SBATCH --partition=h100", "#SBATCH --gpus-per-node=8", "#SBATCH --time=90",
                 "#SBATCH --array=0-1%2", "#SBATCH --job-name=hybridbench-smoke", "#SBATCH --ntasks-per-node=1"):
        assert line in text.splitlines(), text
    assert proc.returncode == 3, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "a sweep job did not finish" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr

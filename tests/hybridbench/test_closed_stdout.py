"""A command whose stdout reader went away (``... | head``) stops quietly with 141, as a C tool killed by SIGPIPE
does; a broken pipe anywhere else is still an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.closed_stdout import EXIT_STDOUT_CLOSED, quiet_on_closed_stdout, stdout_closed

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "workloads" / "fixtures" / "swebench_sps=10_art=5_nums=2.jsonl"


def run_into_closed_pipe(argv: list[str], cwd: Path = ROOT, *,
                         buffered: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` with stdout a pipe whose reader has already gone: its first write fails. ``buffered``: as a shell
    gives it, what a command prints reaches the pipe only when stdout is flushed (else PYTHONUNBUFFERED=1)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | ({} if buffered else
                                                                             {"PYTHONUNBUFFERED": "1"})
    try:
        return subprocess.run(argv, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300, check=False,
                              cwd=cwd, env=env)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [
    ["-m", "workloads.stats", str(TRACE)],
    ["-m", "reference_impl.replay", str(TRACE), "--policy", "lru,seglen", "--capacity-bytes", "2e9"],
    ["-m", "reference_impl.simulate", str(TRACE), "--model", "qwen3.5-9b", "--gpu", "h100", "--max-concurrency", "4"],
    ["-m", "hybridbench.cli", "list"],
    ["-m", "hybridbench.cli_list"],
    ["-m", "hybridbench.preview", "+experiment=smoke", "engine=sim"],
], ids=lambda a: a[1])
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_closed_stdout_ends_the_command_quietly(argv: list[str], buffered: bool) -> None:
    done = run_into_closed_pipe([sys.executable, *argv], buffered=buffered)
    assert (done.returncode, done.stderr) == (EXIT_STDOUT_CLOSED, "")


def test_a_run_whose_report_reader_went_away_keeps_its_results(tmp_path: Path) -> None:
    """The run's report goes to stdout last: everything is on disk by then, and nothing is an internal error."""
    done = run_into_closed_pipe([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim",
                                 f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == EXIT_STDOUT_CLOSED, done.stderr[-2000:]
    assert "internal" not in done.stderr and not (tmp_path / "run" / "crash.txt").exists()
    assert (tmp_path / "run" / "bundle.json").is_file() and (tmp_path / "run" / "report.md").is_file()


def test_another_broken_pipe_is_still_an_error() -> None:
    """A server that hung up mid-request also raises BrokenPipeError; stdout (pytest's capture file) is fine."""

    def broken() -> int:
        raise BrokenPipeError(32, "Broken pipe")

    assert not stdout_closed(BrokenPipeError())
    with pytest.raises(BrokenPipeError):
        quiet_on_closed_stdout(broken)

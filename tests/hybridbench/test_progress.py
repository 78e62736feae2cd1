"""TrialProgress: a tqdm bar on a terminal, readable plain lines in logs, nothing when switched off."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.errors import ConfigError
from hybridbench.load.progress import ENV_VAR, TrialProgress

ROOT = Path(__file__).resolve().parents[2]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def run(stream: io.StringIO, total: int, outcomes: list[bool], label: str = "") -> TrialProgress:
    with TrialProgress(total, label, stream=stream) as p:
        for ok in outcomes:
            p.update(ok)
    return p


def last_frame(text: str) -> str:
    return text.rstrip("\n").split("\r")[-1]


# ---------------------------------------------------------------- plain lines (not a TTY)
def test_log_gets_a_line_per_tenth_with_running_failure_counts() -> None:
    out = io.StringIO()
    outcomes = [i not in (2, 17, 18) for i in range(40)]  # requests 3, 18 and 19 fail
    p = run(out, 40, outcomes)
    assert out.getvalue().splitlines() == [
        f"    {done}/40 requests done, {failed} failed"
        for done, failed in [(4, 1), (8, 1), (12, 1), (16, 1), (20, 3), (24, 3), (28, 3), (32, 3), (36, 3), (40, 3)]
    ]
    assert (p.done, p.failed) == (40, 3)


def test_uneven_totals_still_get_one_line_per_tenth_and_the_final_one() -> None:
    out = io.StringIO()
    run(out, 25, [True] * 25)
    done = [int(line.split("/")[0]) for line in out.getvalue().splitlines()]
    assert done == [3, 5, 8, 10, 13, 15, 18, 20, 23, 25]


def test_small_totals_print_every_request() -> None:
    out = io.StringIO()
    run(out, 3, [True, False, True])
    assert out.getvalue().splitlines() == ["    1/3 requests done, 0 failed", "    2/3 requests done, 1 failed",
                                           "    3/3 requests done, 1 failed"]


def test_no_bar_frames_reach_a_log() -> None:
    out = io.StringIO()
    run(out, 50, [True] * 50)
    assert "\r" not in out.getvalue()
    assert "%|" not in out.getvalue()


def test_stopping_early_prints_the_final_state_once() -> None:
    out = io.StringIO()
    run(out, 40, [True, False, True, True, False, True, True])  # 7 of 40, then the trial dies
    assert out.getvalue().splitlines() == ["    4/40 requests done, 1 failed", "    7/40 requests done, 2 failed"]


def test_stopping_right_after_a_line_does_not_repeat_it() -> None:
    out = io.StringIO()
    p = run(out, 40, [True] * 8)
    p.close()  # a second close changes nothing
    assert out.getvalue().splitlines() == ["    4/40 requests done, 0 failed", "    8/40 requests done, 0 failed"]


def test_an_exception_in_the_block_still_prints_the_final_state() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), TrialProgress(10, stream=out) as p:
        p.update(False)
        p.update(True)
        p.update(True)
        raise RuntimeError("server died")
    assert out.getvalue().splitlines()[-1] == "    3/10 requests done, 1 failed"


def test_no_requests_at_all_still_reports_the_final_state() -> None:
    out = io.StringIO()
    run(out, 12, [])
    assert out.getvalue() == "    0/12 requests done, 0 failed\n"


def test_label_prefixes_each_line() -> None:
    out = io.StringIO()
    run(out, 2, [True, True], label="on r1")
    assert out.getvalue().splitlines() == ["    on r1: 1/2 requests done, 0 failed",
                                           "    on r1: 2/2 requests done, 0 failed"]


# ---------------------------------------------------------------- live bar (a TTY)
def test_terminal_gets_a_tqdm_bar_ending_at_total_with_the_failed_count() -> None:
    out = Tty()
    run(out, 40, [i % 10 != 0 for i in range(40)], label="arm on")
    text = out.getvalue()
    assert "\r" in text  # redrawn in place
    assert "requests done" not in text
    final = last_frame(text)
    assert final.startswith("arm on: 100%")
    assert "40/40" in final
    assert "failed=4" in final
    assert "req/s" in final
    assert text.endswith("\n")  # the last frame stays on screen


def test_terminal_bar_closed_early_shows_where_it_stopped() -> None:
    out = Tty()
    run(out, 40, [True] * 10 + [False, False])
    final = last_frame(out.getvalue())
    assert "12/40" in final
    assert "failed=2" in final


# ---------------------------------------------------------------- overrides
@pytest.mark.parametrize("value", ["0", "off", "false", "OFF"])
@pytest.mark.parametrize("stream_type", [io.StringIO, Tty])
def test_env_var_switches_it_off(monkeypatch: pytest.MonkeyPatch, value: str, stream_type: type[io.StringIO]) -> None:
    monkeypatch.setenv(ENV_VAR, value)
    out = stream_type()
    p = run(out, 10, [True, False, True])
    assert out.getvalue() == ""
    assert (p.done, p.failed) == (3, 1)  # still counted, only not shown


def test_env_var_forces_plain_lines_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "lines")
    out = Tty()
    run(out, 2, [True, False])
    assert out.getvalue() == "    1/2 requests done, 0 failed\n    2/2 requests done, 1 failed\n"


def test_mode_parameter_beats_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "0")
    out = io.StringIO()
    with TrialProgress(4, stream=out, mode="bar") as p:
        for _ in range(4):
            p.update()
    assert "4/4" in last_frame(out.getvalue())


@pytest.mark.parametrize("value", ["sparkly", "bars", "2"])
def test_an_unknown_env_value_is_refused_naming_the_var_and_its_values(monkeypatch: pytest.MonkeyPatch,
                                                                       value: str) -> None:
    monkeypatch.setenv(ENV_VAR, value)
    with pytest.raises(ConfigError) as info:
        TrialProgress(1, stream=io.StringIO())
    assert str(info.value) == (f"HYBRIDBENCH_PROGRESS must be one of 0, off, false, no, lines, plain, bar, 1, auto, "
                               f"got {value!r}")


def test_an_empty_env_value_means_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, " ")
    out = io.StringIO()
    run(out, 1, [True])
    assert out.getvalue() == "    1/1 requests done, 0 failed\n"


def test_on_the_command_line_a_bad_value_is_one_line_exit_2_before_any_work(tmp_path: Path) -> None:
    env = {**os.environ, ENV_VAR: "bogus"}
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim",
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300,
                          check=False, cwd=ROOT, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: HYBRIDBENCH_PROGRESS must be one of 0, off, false, no, lines, plain, bar, 1, auto, got 'bogus'"]
    assert not (tmp_path / "run").exists()

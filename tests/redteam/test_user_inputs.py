"""User inputs that got past plan time (the red-team pass of 2026-12-01): each is now one line naming the key, flag or
file, exit 2, before any work starts and with nothing left on disk that the refusal did not need."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hb_in_process import HbHere, hb_here_fixture  # noqa: F401 - the hb_here fixture

ROOT = Path(__file__).resolve().parents[2]


def hb(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench", *args], capture_output=True, text=True, timeout=300,
                          check=False, cwd=cwd)


def test_an_interpolation_that_does_not_resolve_is_a_config_error_naming_its_key(tmp_path: Path,
                                                                                  hb_here: HbHere) -> None:
    # The run resolved the config before its checks: "error: internal InterpolationResolutionError ..." (exit 3)
    # and a crash.txt in a run dir, where `hybridbench plan` with the same overrides said exit 2.
    run_dir = tmp_path / "run"
    proc = hb_here("+experiment=smoke", "engine=sim", "seed=${oc.env:REDTEAM_UNSET_VARIABLE}",
              f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: seed: KeyError raised while resolving interpolation: "
        "\"Environment variable 'REDTEAM_UNSET_VARIABLE' not found\""], proc.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("python", ["missing/bin/python", "folder", "not-executable.txt", "/bin/false"])
def test_a_reference_engine_python_that_cannot_start_its_server_is_refused_before_a_run(tmp_path: Path, python: str,
                                                                                       hb_here: HbHere) -> None:
    # Plan and doctor said ready; the run made its run dir and failed at launch: "cannot start ...: No such file
    # or directory" / "Permission denied" / "server exited with code 1", an infrastructure failure (exit 3).
    (tmp_path / "folder").mkdir()
    (tmp_path / "not-executable.txt").write_text("#!/bin/sh\n")
    given = python if python.startswith("/") else str(tmp_path / python)
    run_dir = tmp_path / "run"
    proc = hb_here("+experiment=smoke", "engine=reference", f"engine.python={given}", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr[-600:]
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: engine.python={given}: ")
    assert not run_dir.exists()


def test_a_sweep_no_job_of_which_runs_leaves_no_secret_in_its_multirun_yaml(tmp_path: Path) -> None:
    # Hydra writes the sweep's overrides verbatim before any job runs; each job scrubbed the file, but a first job
    # Hydra cannot compose (a typo in a swept value) ends the sweep with none run: the key stayed in plain text.
    sweep = tmp_path / "sweep"
    proc = hb("-m", "+experiment=smoke", "engine=reference", "engine.extra_args=[--api-key,sk-SWEPTSECRET1]",
              "engine.tp=abc,1", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2, proc.stderr
    assert "engine.tp=abc" in proc.stderr.strip().splitlines()[-1]
    text = (sweep / "multirun.yaml").read_text()
    assert "--api-key" in text and "sk-SWEPTSECRET1" not in text


def test_a_swept_secret_is_hidden_in_multirun_yaml_too(tmp_path: Path) -> None:
    # A swept value is in no composed config (Hydra leaves sweeps out of it), only in the overrides the file records.
    sweep = tmp_path / "sweep"
    proc = hb("-m", "+experiment=smoke", "engine=reference",
              "engine.extra_args=[--api-key,sk-SWEPTAAAA],[--api-key,sk-SWEPTBBBB]", "engine.tp=abc,1",
              f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2, proc.stderr
    text = (sweep / "multirun.yaml").read_text()
    assert "--api-key" in text and "sk-SWEPTAAAA" not in text and "sk-SWEPTBBBB" not in text


def test_scaling_a_trace_with_no_rows_is_refused_and_writes_nothing(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # A metadata line alone: every other trace tool said "the trace has no rows" (exit 2); scale wrote a trace of
    # none (exit 0), which the run and every tool then refused.
    from workloads.cli import run_cli
    from workloads.scale import main as scale_main

    src, out = tmp_path / "meta-only.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"__trace_metadata__": {"generator": "gsp", "vocab_size": 1000}}) + "\n")
    assert run_cli(scale_main, "python -m workloads.scale", [str(src), "-o", str(out), "--factor", "2"]) == 2
    assert capsys.readouterr().err.strip() == f"python -m workloads.scale: error: {src}: the trace has no rows"
    assert not out.exists()


def test_doctor_refuses_the_run_directories_the_run_refuses(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from hybridbench.doctor.__main__ import main as doctor_main

    # doctor said "ready" for a run dir under a file, under a symlink to nothing, or already holding a run; the run
    # then refused each (exit 2) on the GPU node the check was meant to vouch for.
    (tmp_path / "afile").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "plan.json").write_text("{}")
    cases = {"afile/run": "cannot create it: ", "link/run": "is a symlink to nothing", "old": "already holds files"}
    for where, needle in cases.items():  # the refusals in this process; the ready case below runs the real one
        code = doctor_main(["+experiment=smoke", "engine=sim", f"hydra.run.dir={tmp_path / where}"])
        stdout = capsys.readouterr().out
        assert code == 2, (where, stdout)
        [line] = [ln for ln in stdout.splitlines() if ln.startswith("FAIL")]
        assert line.startswith(f"FAIL run dir: hydra.run.dir: {tmp_path / where}") and needle in line, line
    ok = subprocess.run([sys.executable, "-m", "hybridbench.doctor", "+experiment=smoke", "engine=sim",
                         f"hydra.run.dir={tmp_path / 'new'}"], capture_output=True, text=True, timeout=300,
                        check=False, cwd=ROOT)
    assert ok.returncode == 0 and f"ok   run dir: {tmp_path / 'new'}: free for this run" in ok.stdout, ok.stdout
    assert not (tmp_path / "new").exists()


def test_a_sweep_directory_that_cannot_be_made_is_named_as_the_sweeps(tmp_path: Path) -> None:
    # "hydra.run.dir: cannot create the run directory" for a sweep, whose hydra.run.dir is not read at all.
    (tmp_path / "afile").write_text("x")
    proc = hb("-m", "+experiment=smoke", "engine=sim", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'afile' / 'sweep'}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: hydra.sweep.dir: cannot create the sweep directory ([Errno 20] Not a directory: "
        f"'{tmp_path / 'afile' / 'sweep'}')"], proc.stderr


@pytest.mark.parametrize(("args", "key", "kind"), [
    (["load.request_rate=3"], "load.request_rate", "closed"),
    (["load=trace", "workloads.gsp.request_rate=3"], "workloads.gsp.request_rate", "trace"),
])
def test_a_request_rate_typed_for_a_load_without_one_is_refused(tmp_path: Path, args: list[str], key: str,
                                                               kind: str, hb_here: HbHere) -> None:
    # The closed loop (or the trace's timestamps) ran and the rate was dropped without a word, exit 0.
    proc = hb_here("+experiment=smoke", "engine=sim", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {key}: only a poisson load reads a request rate; load.kind is {kind}"), line
    assert not (tmp_path / "run").exists()


def test_an_experiments_own_rates_under_its_cpu_closed_loop_are_not_refused() -> None:
    from hybridbench.preview.compose import compose_run

    composed = compose_run(["+experiment=seglen", "engine=reference", "load.max_concurrency=3"])
    assert composed.cfg.load.kind == "closed" and composed.cfg.load.request_rate == 8


@pytest.mark.parametrize(("tool", "args", "message"), [
    ("reference_impl.simulate", ["--max-concurrency", "2", "--slowdown", "2"],
     "error: --slowdown 2 scales the trace's timestamps: give --trace-timestamps too"),
    ("reference_impl.simulate", ["--max-concurrency", "2", "--arm", "lru", "--host-capacity-tokens", "100"],
     "error: --host-capacity-tokens sizes a host tier; arm lru has none (use l2, or an arm composed with '+l2')"),
    ("reference_impl.replay", ["--capacity-bytes", "1e9", "--policy", "lru", "--eff-weight", "0.5"],
     "error: --eff-weight is read by marconi and seglen only; --policy lists lru"),
    ("reference_impl.replay", ["--capacity-bytes", "1e9", "--policy", "lru,vllm_plus", "--marconi-mode", "corrected"],
     "error: --marconi-mode is read by marconi and sglang_plus only; --policy lists lru,vllm_plus"),
    ("reference_impl.replay", ["--capacity-bytes", "1e9", "--policy", "seglen", "--bootstrap-multiplier", "3"],
     "error: --bootstrap-multiplier is read by marconi only; --policy lists seglen"),
])
def test_a_flag_no_chosen_arm_or_policy_reads_is_refused(tmp_path: Path, tool: str, args: list[str],
                                                          message: str) -> None:
    # Each ran without the flag, exit 0, its figures read as the setting given.
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"__trace_metadata__": {"vocab_size": 1000}}) + "\n" + json.dumps(
        {"session_id": 0, "turn_id": 0, "ts": 0.0, "input_tokens": list(range(1, 40)), "output_tokens": [7, 8]}) + "\n")
    proc = subprocess.run([sys.executable, "-m", tool, str(trace), *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [message], proc.stderr
    assert proc.stdout == ""


def test_hydras_rerun_flag_is_one_line_not_a_traceback(tmp_path: Path, hb_here: HbHere) -> None:
    # Hydra's --experimental-rerun reads a pickle no hybridbench run writes; its refusal of a missing file was a
    # traceback (ValueError from hydra/main.py).
    proc = hb_here("--experimental-rerun", str(tmp_path / "config.pickle"))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: --experimental-rerun: ") and "rescore" in line


def test_a_glob_sweep_still_hides_the_secret_in_multirun_yaml(tmp_path: Path) -> None:
    # glob(...) cannot be listed before Hydra's config loader is at hand: listing it raised in the callback, which
    # Hydra only warns about, and the file kept the (unswept) key in plain text.
    sweep = tmp_path / "sweep"
    proc = hb("-m", "+experiment=glob(smok*)", "engine.extra_args=[--api-key,sk-GLOBSECRET1]", "engine=nonexistent,sim",
              f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2, proc.stderr
    text = (sweep / "multirun.yaml").read_text()
    assert "--api-key" in text and "sk-GLOBSECRET1" not in text
    assert "Callback" not in proc.stderr

"""No planted secret reaches any file of a run, in any form a user may pass it (issue 13): a flag and its value
as one list element, a value starting with '-', several values, a secret-named workload parameter; through
every writer: plan, bundle, report, index, the server's log and last words, Hydra's multirun.yaml, compare."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hybridbench.config.redact import redact_config, secret_values

ROOT = Path(__file__).resolve().parents[2]

# Each planted once, each in its own form.
ONE_ELEMENT, DASHED, MULTI_A, MULTI_B, PARAM = "sk-ONEELEMENT1", "-sk-DASHED2", "sk-MULTI3", "sk-MULTI4", "sk-PARAM5"
PLANTED = (ONE_ELEMENT, DASHED, MULTI_A, MULTI_B, PARAM)
EXTRA = f'engine.extra_args=["--api-key {ONE_ELEMENT}",--api-key,"{DASHED}",--api-key,{MULTI_A},{MULTI_B}]'


def hb(*args: str, module: str = "hybridbench") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300,
                          check=False, cwd=ROOT)


def leaks(root: Path, *streams: str) -> list[tuple[str, str]]:
    found = [(str(p), s) for p in root.rglob("*") if p.is_file() for s in PLANTED
             if s.lstrip("-") in p.read_text(errors="replace")]
    return found + [("terminal", s) for text in streams for s in PLANTED if s.lstrip("-") in text]


def test_each_form_is_hidden_by_the_one_redaction() -> None:
    config = {"engine": {"extra_args": [f"--api-key {ONE_ELEMENT}", "--api-key", DASHED, "--api-key", MULTI_A,
                                        MULTI_B, "--tp", "4"]},
              "workloads": {"w": {"params": {"api_key": PARAM, "num_groups": 4}}}}
    assert set(secret_values(config)) >= set(PLANTED)
    hidden = redact_config(config)
    assert hidden["engine"]["extra_args"] == ["--api-key ***", "--api-key", "***", "--api-key", "***", "***",
                                              "--tp", "4"]
    assert hidden["workloads"]["w"]["params"] == {"api_key": "***", "num_groups": 4}


def test_a_server_refusing_the_key_quotes_it_nowhere(tmp_path: Path) -> None:
    """The reference server refuses --api-key. Its parser runs at plan time (argparse quotes what it refuses):
    one line, exit 2, no run dir, no key. Under another interpreter (engine.python, possibly another checkout's
    server) it refuses at launch: its last words ('unrecognized arguments: --api-key ...') go to the bundle, the
    report and the terminal, and its log stays in the run dir; then compare reads that run."""
    planned = hb("+experiment=smoke", "model=reference-tiny", EXTRA, f"hydra.run.dir={tmp_path / 'planned'}")
    assert planned.returncode == 2 and "unrecognized arguments: --api-key ***" in planned.stderr, planned.stderr
    assert not (tmp_path / "planned").exists() and leaks(tmp_path, planned.stdout, planned.stderr) == []
    python = tmp_path / "python"  # the same interpreter under another name: the server's parser decides at launch
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    runs = tmp_path / "runs"
    proc = hb("+experiment=smoke", "model=reference-tiny", EXTRA, f"engine.python={python}",
              f"hydra.run.dir={runs / 'a'}")
    assert proc.returncode == 3, proc.stderr
    assert "unrecognized arguments" in (runs / "a" / "report.md").read_text()  # the last words are there...
    assert list((runs / "a" / "logs").iterdir())
    assert leaks(tmp_path, proc.stdout, proc.stderr) == []  # ...without the key
    assert (runs / "index.jsonl").is_file()
    compared = hb(str(runs / "a"), str(runs / "a"), "-o", str(tmp_path / "cmp"), module="hybridbench.compare")
    assert compared.returncode == 2 and leaks(tmp_path, compared.stdout, compared.stderr) == []


def test_a_secret_workload_parameter_and_a_sweep_write_it_nowhere(tmp_path: Path) -> None:
    param = hb("+experiment=smoke", "engine=sim", f"+workloads.gsp.params.api_key={PARAM}",
               f"hydra.run.dir={tmp_path / 'param'}")
    assert param.returncode == 2 and "api_key" in param.stderr  # no generator has such a parameter
    # Each job refuses the flags (the simulator starts no server), after Hydra wrote the sweep's multirun.yaml.
    sweep = hb("-m", "+experiment=smoke", "engine=sim", EXTRA, "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert sweep.returncode == 2 and sweep.stderr.count("error: engine.extra_args: engine sim") == 2, sweep.stderr
    assert (tmp_path / "sweep" / "multirun.yaml").is_file()
    # Hydra's launcher echoes a sweep's overrides to the terminal before any job runs: files only, there.
    assert leaks(tmp_path, param.stdout, param.stderr) == []

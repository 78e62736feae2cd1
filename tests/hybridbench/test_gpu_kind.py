"""engine.gpu is read once, where the config is composed (hybridbench.config.gpu_kind): lowercased and stripped, a
value that is no one-word kind refused with one line, a kind the harness does not list planned with a warning.
Before, ``engine.gpu=CPU`` slipped past every ``!= "cpu"`` rule, and ``H100`` planned another fingerprint than
``h100`` (and the simulator refused it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from machine_fakes import fake_sglang
from test_sglang_real_help_plans import venv_python

from hybridbench.config.comparable_keys import fixed_settings
from hybridbench.config.validate import validate_config
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.sglang_cmd import sglang_help_argv
from hybridbench.errors import ConfigError
from hybridbench.prepare import prepare_run
from hybridbench.preview.build import _arms
from hybridbench.preview.compose import compose_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("spelt", ["CPU", "Cpu"])
def test_cpu_in_any_case_is_cpu_for_the_gpu_only_rules(spelt: str) -> None:
    # validate.py's GPU-server rule: the CPU engines' shrink is refused on a GPU server, taken on a CPU one
    composed = compose_run(["+experiment=radix", "engine=sglang", f"engine.gpu={spelt}", "engine.tp=1",
                            "engine.workload_scale=4"])
    assert composed.cfg.engine.gpu == composed.resolved["engine"]["gpu"] == "cpu"
    validate_config(composed.cfg)  # "CPU" was read as a GPU: "engine.workload_scale: 4 is ... on engine.gpu=CPU"


@pytest.mark.sglang
def test_upper_and_lower_case_h100_plan_the_same_sglang_run(tmp_path: Path) -> None:
    python = venv_python("0.5.23")
    (tmp_path / "help.txt").write_text(installed_help(sglang_help_argv(str(python)), "sglang", str(python)))
    fake = fake_sglang(tmp_path, str(tmp_path / "help.txt"), "0.5.23")

    def planned(gpu: str) -> tuple[str, dict[str, list[str]], object]:
        composed = compose_run(["+experiment=radix", "engine=sglang", f"engine.python={fake}", f"engine.gpu={gpu}"])
        prepared = prepare_run(composed.cfg, tmp_path / "run", composed.resolved)
        argv = {arm: a["argv"] for arm, a in _arms(prepared).items()}
        return prepared.plan.fingerprint, argv, prepared.plan.config["engine"]["gpu"]

    upper, lower = planned(" H100"), planned("h100")
    assert upper == lower
    assert upper[2] == "h100"  # what plan.json and bundle.json record


def test_a_gpu_value_that_is_no_kind_is_refused_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench.cli", "plan", "--no-forecast", "+experiment=smoke",
                           "engine=reference", "engine.gpu='h100 x4'"],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: engine.gpu must be one word naming a GPU kind (a100, b200, b300, gb200, h100, h200, or another the "
        "server runs on) or cpu / none (no GPU), got 'h100 x4'"], proc.stderr
    with pytest.raises(ConfigError, match=r"^engine\.gpu must be one word .*got ''$"):
        compose_run(["+experiment=smoke", "engine=reference", "engine.gpu="])


def test_a_gpu_kind_the_harness_does_not_list_plans_with_a_warning() -> None:
    # SGLang and vLLM serve on L40S, H20, MI300X...: refusing them would lock their users out; the plan says what
    # it cannot do for them (and a typo of a listed kind shows up there)
    proc = subprocess.run([sys.executable, "-m", "hybridbench.cli", "plan", "--json", "--no-forecast",
                           "+experiment=smoke", "engine=reference", "engine.gpu=L40S"],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads(proc.stdout)["warnings"]
    assert [w for w in warnings if w.startswith("engine.gpu=l40s is a GPU kind the harness does not list")], warnings
    listed = subprocess.run([sys.executable, "-m", "hybridbench.cli", "plan", "--json", "--no-forecast",
                             "+experiment=smoke", "engine=reference", "engine.gpu=cpu"],
                            capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert not [w for w in json.loads(listed.stdout)["warnings"] if w.startswith("engine.gpu=")]


def test_a_run_records_the_one_spelling(tmp_path: Path) -> None:
    # python -m hybridbench composes through Hydra's own entry point, not compose_run: the simulator refused
    # "unknown GPU 'H100'", and plan.json must hold what the run was planned for
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "engine.gpu=H100",
                           f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=300, check=False,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["config"]["engine"]["gpu"] == "h100"


def test_a_saved_run_in_the_old_spelling_still_compares_with_a_new_one() -> None:
    # runs saved before engine.gpu was normalised may hold "H100": the same sizing as a later run's "h100"
    old, new = {"engine": {"name": "sglang", "gpu": "H100"}}, {"engine": {"name": "sglang", "gpu": "h100"}}
    assert fixed_settings(old) == fixed_settings(new)

"""The ``hybridbench`` console script: each subcommand is its ``python -m`` form; ``list`` reads conf/ and the code;
``doctor`` says, one line per check, whether this machine is ready."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from machine_fakes import cache_model, fake_nvidia_smi, fake_sglang

from hybridbench.cli import COMMANDS, main
from hybridbench.cli_list import arm_lines, engine_lines, experiment_lines
from hybridbench.engines.registry import ENGINES
from reference_impl.engine.arms import ARMS

ROOT = Path(__file__).resolve().parents[2]


def hybridbench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    script = shutil.which("hybridbench", path=str(Path(sys.executable).parent))
    assert script is not None, "pip install -e . installs the console script"
    return subprocess.run([script, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
                          env={**os.environ, **(env or {})})


def test_pyproject_declares_the_console_script() -> None:
    assert 'hybridbench = "hybridbench.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_usage_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown subcommand 'nosuch'" in err
    assert main([]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--forecast-requests", "x"])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_run_is_python_m_hybridbench(tmp_path: Path) -> None:
    proc = hybridbench("run", "+experiment=smoke", "engine=sim", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "bundle.json").read_text())["verdict"] == "pass"
    assert (tmp_path / "plan.json").is_file()
    bad = hybridbench("run", "+experiment=smoke", "engine=sim", "arms=[nosuch]", f"hydra.run.dir={tmp_path}/x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


@pytest.mark.parametrize("name", [n for n in COMMANDS if n != "run"])
def test_every_subcommand_reaches_its_own_parser(name: str) -> None:
    proc = hybridbench(name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_list_names_every_experiment_arm_and_engine_with_each_engines_flags() -> None:
    experiments = {p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")}
    listed = {line.split(":")[0].removeprefix("experiment ") for line in experiment_lines()}
    assert listed == experiments
    seglen = next(line for line in experiment_lines() if line.startswith("experiment seglen:"))
    # seglen's arms differ per engine family (conf/sizing/seglen/): both are listed, as are its sized loads
    assert "arms disabled,branching,seglen (cpu) / branching,seglen (gpu)" in seglen
    assert all(w in seglen for w in ("swebench", "gsp_prefix_heavy", "multi_group", "mixed_prefix", "sharegpt"))
    arms = {line.split(" ")[1]: line for line in arm_lines()}
    assert set(arms) == set(ARMS)
    assert "sglang: --mamba-radix-cache-strategy extra_buffer --mamba-track-interval 256 --radix-eviction-policy " \
           "seglen --seglen-eff-weight 0.85" in arms["seglen"]
    assert "vllm: cannot" in arms["seglen"] and "vllm: --no-enable-prefix-caching" in arms["disabled"]
    assert {line.split(":")[0].removeprefix("engine ") for line in engine_lines()} == set(ENGINES)
    proc = hybridbench("list", "arms")
    assert proc.returncode == 0 and proc.stdout.splitlines() == arm_lines()


def test_doctor_is_ready_only_when_every_check_is(tmp_path: Path) -> None:
    python = fake_sglang(tmp_path, "sglang_help_seglen.txt")
    hf = tmp_path / "hf"
    env = {"PATH": f"{fake_nvidia_smi(tmp_path, 1)}{os.pathsep}{os.environ['PATH']}", "HF_HOME": str(hf),
           "HF_HUB_OFFLINE": "1"}
    args = ("doctor", "+experiment=seglen", "engine=sglang", "model=qwen3.5-9b", "engine.tp=1",
            f"engine.python={python}")
    proc = hybridbench(*args, env=env)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stdout.splitlines()
    assert "ok   gpus: engine.tp=1: 1 GPUs visible" in lines
    assert "ok   gpu kind: engine.gpu=h100: 1 x NVIDIA H100 80GB HBM3" in lines
    assert any(line.startswith("ok   gpu memory: model=qwen3.5-9b: 16.7 GiB of weights a GPU (engine.tp=1)")
               for line in lines)
    assert f"ok   server: engine.python={python}: sglang 0.5.23" in lines
    assert "ok   arm seglen: this sglang build expresses it" in lines
    assert any(line.startswith("FAIL weights:") and "huggingface-cli download Qwen/Qwen3.5-9B" in line
               for line in lines)
    assert lines[-1] == "not ready"
    cache_model(hf, "Qwen/Qwen3.5-9B")
    ready = hybridbench(*args, env=env)
    assert ready.returncode == 0, ready.stdout
    assert ready.stdout.splitlines()[-1] == "ready"
    # A released build without the seglen policy: that arm is named, the others still pass.
    old = hybridbench(*args[:-1], f"engine.python={fake_sglang(tmp_path / 'new', 'sglang_help_new.txt')}",
                      "engine.tp=2", env=env)
    assert old.returncode == 2
    out = old.stdout.splitlines()
    assert any(line.startswith("FAIL arm seglen:") and "--radix-eviction-policy seglen" in line for line in out)
    assert any(line.startswith("ok   arm branching:") for line in out)
    assert any(line.startswith("FAIL gpus: engine.tp=2 needs 2 GPUs; 1 visible") for line in out)

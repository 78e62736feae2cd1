"""A run refuses at plan time (exit 2, before any trace) what this machine lacks: GPUs for engine.tp (a fake
``nvidia-smi`` on PATH printing its real ``-L`` format), and weights when downloads are off (a fake Hugging Face
cache laid out as huggingface_hub lays it out). The preview says the same as warnings; the doctor as lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from machine_fakes import cache_model, fake_nvidia_smi, fake_sglang

from hybridbench.config.schema import RunCfg
from hybridbench.doctor.machine import fetch_weights, find_weights, gpu_finding, weights_finding
from hybridbench.errors import EngineError

ROOT = Path(__file__).resolve().parents[2]
def run(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sglang",
                           f"engine.python={fake_sglang(tmp_path)}", f"hydra.run.dir={tmp_path / 'run'}", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
                          env={**os.environ, **env})


def test_too_few_gpus_is_refused_before_any_trace_and_leaves_nothing(tmp_path: Path) -> None:
    path = f"{fake_nvidia_smi(tmp_path, 2)}{os.pathsep}{os.environ['PATH']}"
    proc = run(tmp_path, "engine.tp=4", env={"PATH": path, "HF_HOME": str(tmp_path / "hf")})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("error: engine.tp=4 needs 4 GPUs; 2 visible: engine.tp=2 would fit (or a smaller "
                                   "model, e.g. model=qwen3.5-9b engine.tp=1)")
    assert not (tmp_path / "run").exists()  # no traces, no run dir, no index line


def test_cuda_visible_devices_restricts_the_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 4)))
    cfg = RunCfg()
    cfg.engine.tp = 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert gpu_finding(cfg).status == "refuse" and "CUDA_VISIBLE_DEVICES" in gpu_finding(cfg).message
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert gpu_finding(cfg).status == "ok"
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert gpu_finding(cfg).status == "unknown"  # no nvidia-smi: nothing to count, the run goes on as before


def test_absent_weights_with_downloads_off_are_refused_and_found_once_cached(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = RunCfg()
    cfg.model.hf_id = "Qwen/Qwen3.5-9B"
    f = weights_finding(cfg)
    assert f.status == "refuse" and "huggingface-cli download Qwen/Qwen3.5-9B" in f.message
    snap = cache_model(tmp_path / "hf", "Qwen/Qwen3.5-9B")
    assert find_weights("Qwen/Qwen3.5-9B") == snap and weights_finding(cfg).status == "ok"
    (snap / "model.safetensors").unlink()  # a config without weights is not a model
    assert weights_finding(cfg).status == "refuse"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert weights_finding(cfg).status == "ok"  # downloads on: the run fetches it before the server starts
    cfg.model.hf_id = str(snap)  # a local path is used as is
    assert weights_finding(cfg).status == "refuse"


def test_the_run_refuses_absent_weights_offline_in_one_line(tmp_path: Path) -> None:
    path = f"{fake_nvidia_smi(tmp_path, 1)}{os.pathsep}{os.environ['PATH']}"
    # model=qwen3.5-9b: the smoke default (Qwen3-Next-80B) does not fit one GPU, which is refused first
    proc = run(tmp_path, "engine.tp=1", "model=qwen3.5-9b", "model.hf_id=Org/Absent-1B",
               env={"PATH": path, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "model.hf_id=Org/Absent-1B: not in the Hugging Face cache" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_weights_are_fetched_by_the_servers_interpreter_before_start(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # The interpreter does what snapshot_download does to the cache; it is handed the repo id.
    python = tmp_path / "python"
    snap = tmp_path / "hf" / "hub" / "models--Org--Tiny" / "snapshots" / "r1"
    python.write_text(f'#!/bin/sh\n[ "$3" = "Org/Tiny" ] || exit 3\nmkdir -p {snap}\necho {{}} > {snap}/config.json\n'
                      f'echo x > {snap}/model.safetensors\n')
    python.chmod(0o755)
    cfg = RunCfg()
    cfg.engine.name, cfg.engine.python, cfg.model.hf_id = "sglang", str(python), "Org/Tiny"
    said: list[str] = []
    fetch_weights(cfg, said.append)
    assert find_weights("Org/Tiny") == snap and "startup timeout counts from the end" in said[0]
    said.clear()
    fetch_weights(cfg, said.append)
    assert said == []  # cached now: nothing to fetch
    cfg.model.hf_id = "Org/Other"
    with pytest.raises(EngineError, match="download failed"):
        fetch_weights(cfg, said.append)

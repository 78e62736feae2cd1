"""The GPUs a server would get, against the config: their kind against engine.gpu and their memory against the
model's weights over engine.tp, from a stand-in ``nvidia-smi`` printing the real ``-L`` and ``--query-gpu`` formats.
A run refuses a misfit at plan time (exit 2, one line, before any trace or server), the preview warns, the doctor
fails the check; with no nvidia-smi nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from machine_fakes import A100_40GB, H100, fake_nvidia_smi, fake_sglang

from hybridbench.config.schema import RunCfg
from hybridbench.doctor.machine import gpu_findings
from hybridbench.engines.gpus import server_gpus
from reference_impl.engine.hardware import gpu_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_cuda_restriction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def cfg_for(tp: int, gpu: str = "h100", model: str = "qwen3-next-80b-a3b", quantization: str = "") -> RunCfg:
    cfg = RunCfg()
    cfg.engine.name, cfg.engine.tp, cfg.engine.gpu = "sglang", tp, gpu
    cfg.model.name, cfg.model.quantization = model, quantization
    return cfg


def found(cfg: RunCfg) -> dict[str, tuple[str, str]]:
    return {f.check: (f.status, f.message) for f in gpu_findings(cfg)}


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"), ("NVIDIA H100 NVL", "h100"),
    ("NVIDIA A100-SXM4-40GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100"), ("NVIDIA H200", "h200"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA H20", None), ("NVIDIA GH200 480GB", None), ("NVIDIA L40S", None),  # H20 and GH200 are not H200s
])
def test_nvidia_smi_names_map_to_gpu_keys(name: str, key: str | None) -> None:
    assert gpu_key(name) == key


def test_server_gpus_reads_name_and_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 4, A100_40GB, 40960)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    gpus = server_gpus(2)
    assert gpus is not None and [(g.uuid[-1], g.name, g.memory_mib) for g in gpus] == [
        ("2", A100_40GB, 40960), ("3", A100_40GB, 40960)]


def test_qwen3_next_in_bf16_does_not_fit_four_a100s_of_40gb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 4, A100_40GB, 40960)))
    got = found(cfg_for(4))
    assert got["gpus"][0] == "ok"  # four are visible: the count alone let it through
    status, message = got["gpu memory"]
    assert status == "refuse"
    assert message.startswith("model=qwen3-next-80b-a3b: 148.4 GiB of weights / engine.tp=4 = 37.1 GiB a GPU, too "
                              "much for NVIDIA A100-SXM4-40GB: 40.0 GiB x engine.mem_fraction_static=0.85 = 34.0 GiB")
    assert message.endswith("engine.tp=8 would fit")
    assert got["gpu kind"] == ("refuse", "engine.gpu=h100, but the server would run on 4 x NVIDIA A100-SXM4-40GB "
                                         "(a100): set engine.gpu=a100, or run where the h100 GPUs are")
    assert found(cfg_for(4, gpu="a100"))["gpu kind"][0] == "ok"


def test_what_fits_an_h100_and_what_does_not(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 4)))
    ok = found(cfg_for(4))  # SGLang PR #11214's setup: Qwen3-Next-80B-A3B in bf16 on 4 H100s
    assert ok["gpu memory"][0] == "ok" and ok["gpu kind"] == ("ok", f"engine.gpu=h100: 4 x {H100}")
    two = found(cfg_for(2))  # 74 GiB of weights a GPU: no room for any cache at 0.85 of 79.6 GiB
    assert two["gpu memory"][0] == "refuse" and two["gpu memory"][1].endswith("engine.tp=4 would fit")
    assert found(cfg_for(2, quantization="fp8"))["gpu memory"][0] == "ok"  # fp8 on 2 H100s, as its reporter ran it
    assert found(cfg_for(1, model="qwen3.5-9b"))["gpu memory"][0] == "ok"  # the seglen experiment's one H100
    assert found(cfg_for(4, gpu="h200"))["gpu kind"][1].startswith("engine.gpu=h200, but the server would run on 4 x "
                                                                   f"{H100} (h100): set engine.gpu=h100")


def test_the_fit_leaves_room_for_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Qwen3.5-9B's 16.7 GiB of weights on one GPU of 20 GiB at 0.85: 17.0 GiB, so the weights alone fit, but they
    # leave the KV cache and states 0.3 GiB; the check wants a tenth of the budget left.
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 1, H100, 20 * 1024)))
    status, message = found(cfg_for(1, model="qwen3.5-9b"))["gpu memory"]
    assert status == "refuse" and "of which the weights (+5%) may take 90%" in message


def test_an_unknown_gpu_is_a_warning_and_its_memory_still_checked(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 1, "NVIDIA L40S", 46068)))
    got = found(cfg_for(1, model="qwen3.5-9b"))
    assert got["gpu kind"] == ("unknown", "engine.gpu=h100: nvidia-smi names NVIDIA L40S, which "
                                          "reference_impl.engine.hardware.NVIDIA_SMI_MODELS maps to no GPU key")
    assert got["gpu memory"][0] == "ok"


def test_what_cannot_be_sized_is_said_not_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path, 4)))
    assert found(cfg_for(1, model="tiny-llama"))["gpu memory"] == (
        "ok", "model=tiny-llama: not checked (no byte model in reference_impl.models)")
    status, message = found(cfg_for(4, quantization="awq"))["gpu memory"]
    assert status == "ok" and "not checked" in message


def test_without_nvidia_smi_or_its_query_only_the_count_is_checked(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert [(f.check, f.status) for f in gpu_findings(cfg_for(4))] == [("gpus", "unknown")]  # as before
    only_list = tmp_path / "old"
    only_list.mkdir()
    script = only_list / "nvidia-smi"  # answers -L and refuses the query: nothing to name or size
    script.write_text(f"#!/bin/sh\n[ \"$1\" = \"-L\" ] || exit 64\necho 'GPU 0: {A100_40GB} (UUID: GPU-1)'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(only_list))
    assert [(f.check, f.status) for f in gpu_findings(cfg_for(1))] == [("gpus", "ok")]


def hybridbench(tmp_path: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The red team's case: +experiment=radix (Qwen3-Next-80B-A3B in bf16, engine.tp=4, engine.gpu=h100) on a
    machine whose nvidia-smi lists four A100s of 40 GB."""
    path = f"{fake_nvidia_smi(tmp_path, 4, A100_40GB, 40960)}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run([sys.executable, "-m", module, *args, "+experiment=radix", "engine=sglang",
                           f"engine.python={fake_sglang(tmp_path)}", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
                          env={**os.environ, "PATH": path, "HF_HOME": str(tmp_path / "hf")})


def test_doctor_fails_the_gpus_that_cannot_hold_the_model(tmp_path: Path) -> None:
    proc = hybridbench(tmp_path, "hybridbench.doctor")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stdout.splitlines()
    assert "ok   gpus: engine.tp=4: 4 GPUs visible" in lines
    assert any(line.startswith("FAIL gpu memory: model=qwen3-next-80b-a3b: 148.4 GiB of weights / engine.tp=4")
               for line in lines)
    assert any(line.startswith("FAIL gpu kind: engine.gpu=h100, but the server would run on 4 x NVIDIA A100")
               for line in lines)
    assert lines[-1] == "not ready"


def test_the_run_refuses_in_one_line_before_any_trace_or_server(tmp_path: Path) -> None:
    proc = hybridbench(tmp_path, "hybridbench")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: model=qwen3-next-80b-a3b: 148.4 GiB of weights / engine.tp=4 = 37.1 GiB")
    assert not (tmp_path / "run").exists()  # no traces, no run dir, no server log


def test_the_plan_warns(tmp_path: Path) -> None:
    proc = hybridbench(tmp_path, "hybridbench.preview", "--no-forecast")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "warning: gpu memory: model=qwen3-next-80b-a3b: 148.4 GiB of weights / engine.tp=4" in out
    assert "warning: gpu kind: engine.gpu=h100, but the server would run on 4 x NVIDIA A100-SXM4-40GB" in out

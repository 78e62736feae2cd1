"""visible_gpus() against a fake nvidia-smi on PATH printing the real ``nvidia-smi -L`` format."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hybridbench.engines.process import visible_gpus
from hybridbench.errors import EngineError

FOUR_GPUS = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d3c8f6e-1b2a-4c3d-9e8f-0a1b2c3d4e5f)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-6e4d9f7a-2c3b-4d4e-8f9a-1b2c3d4e5f60)
GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-7f5e0a8b-3d4c-4e5f-9a0b-2c3d4e5f6071)
GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-8a6f1b9c-4e5d-4f6a-8b1c-3d4e5f607182)
"""

# An A100 partitioned with MIG: the indented instances are not GPUs of their own.
MIG = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2)
  MIG 1g.5gb      Device  0: (UUID: MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d)
  MIG 1g.5gb      Device  1: (UUID: MIG-2b3c4d5e-6f7a-5b8c-9d0e-1f2a3b4c5d6e)
  MIG 2g.10gb     Device  2: (UUID: MIG-3c4d5e6f-7a8b-5c9d-0e1f-2a3b4c5d6e7f)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-f02fe04c-c3a8-48d2-b3b8-8712d4349ab3)
"""

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n")


def fake_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stdout: str, exit_code: int = 0) -> None:
    """An ``nvidia-smi`` that is the only thing on PATH; it insists on ``-L`` so the call is checked too."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\n"  # absolute interpreter: PATH holds nothing else
                      f"if sys.argv[1:] != ['-L']:\n    sys.exit(64)\n"
                      f"sys.stdout.write({stdout!r})\nsys.exit({exit_code})\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.fixture(autouse=True)
def _no_cuda_restriction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_counts_one_per_gpu_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_nvidia_smi(monkeypatch, tmp_path, FOUR_GPUS)
    assert visible_gpus() == 4


def test_mig_instances_are_not_counted_as_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_nvidia_smi(monkeypatch, tmp_path, MIG)
    assert visible_gpus() == 2


def test_absent_nvidia_smi_means_nothing_to_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # empty directory
    assert visible_gpus() is None


def test_a_driver_failure_is_a_clear_error_not_zero_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_nvidia_smi(monkeypatch, tmp_path, NO_DRIVER, exit_code=9)
    with pytest.raises(EngineError, match=r"nvidia-smi -L failed \(exit 9\): NVIDIA-SMI has failed because"):
        visible_gpus()


def test_a_nonzero_exit_that_still_lists_gpus_counts_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = FOUR_GPUS.splitlines(keepends=True)[0] + "Unable to determine the device handle for GPU 0000:3B:00.0\n"
    fake_nvidia_smi(monkeypatch, tmp_path, out, exit_code=15)
    assert visible_gpus() == 1


@pytest.mark.parametrize(("value", "expected"), [
    ("0,1", 2),
    ("3", 1),
    ("", 0),
    ("-1", 0),
    (" 0 , 2 ", 2),
    ("0,1,", 2),
    ("0,7,1", 1),  # CUDA stops at the first index the machine lacks
    ("1,-1,2", 1),
    ("GPU-5d3c8f6e-1b2a-4c3d-9e8f-0a1b2c3d4e5f,GPU-6e4d9f7a", 2),
    ("MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d", 1),
    ("nonsense", 0),
])
def test_cuda_visible_devices_restricts_the_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  value: str, expected: int) -> None:
    fake_nvidia_smi(monkeypatch, tmp_path, FOUR_GPUS)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert visible_gpus() == expected


def test_cuda_visible_devices_without_nvidia_smi_is_still_unchecked(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert visible_gpus() is None

"""visible_gpus() and busy_gpus() against a fake nvidia-smi on PATH printing nvidia-smi's real output formats."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hybridbench.engines.gpus import busy_gpus, visible_gpus, wait_for_free_gpus
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


# `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits` and the compute-apps query,
# as printed.
UUIDS = ["GPU-5d3c8f6e-1b2a-4c3d-9e8f-0a1b2c3d4e5f", "GPU-6e4d9f7a-2c3b-4d4e-8f9a-1b2c3d4e5f60",
         "GPU-7f5e0a8b-3d4c-4e5f-9a0b-2c3d4e5f6071", "GPU-8a6f1b9c-4e5d-4f6a-8b1c-3d4e5f607182"]
QUERY_GPU = "".join(f"{i}, {u}, NVIDIA H100 80GB HBM3, 81559\n" for i, u in enumerate(UUIDS))
APPS_ON_GPU2 = f"{UUIDS[2]}, 4242, 40960\n"


def fake_queries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, apps: str, *, free_after: int = 0) -> None:
    """An nvidia-smi answering exactly the two queries busy_gpus makes (anything else: exit 64). With
    ``free_after`` > 0 the apps query reports the processes that many times, then none (memory released)."""
    counter = tmp_path / "calls"
    script = tmp_path / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\n"
        f"args = sys.argv[1:]\n"
        f"if args == ['--query-gpu=index,uuid,name,memory.total', '--format=csv,noheader,nounits']:\n"
        f"    sys.stdout.write({QUERY_GPU!r}); sys.exit(0)\n"
        f"if args == ['--query-compute-apps=gpu_uuid,pid,used_memory', '--format=csv,noheader,nounits']:\n"
        f"    c = pathlib.Path({str(counter)!r})\n"
        f"    n = int(c.read_text()) if c.exists() else 0\n"
        f"    c.write_text(str(n + 1))\n"
        f"    sys.stdout.write({apps!r} if {free_after} == 0 or n < {free_after} else ''); sys.exit(0)\n"
        f"sys.exit(64)\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize(("cuda", "tp", "expected"), [
    (None, 2, []),  # the server takes GPUs 0 and 1; the process sits on 2
    (None, 4, ["GPU 2: pid 4242 holds 40960 MiB"]),
    ("2,3", 1, ["GPU 0: pid 4242 holds 40960 MiB"]),  # CUDA's ordinal, as the server sees it
    (f"{UUIDS[3]},{UUIDS[2]}", 2, ["GPU 1: pid 4242 holds 40960 MiB"]),
    ("3,9,2", 2, []),  # CUDA stops at the missing index 9: the server only gets GPU 3
    ("MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d", 1, []),  # per-slice use is not reported: not checked
])
def test_busy_gpus_names_processes_on_the_gpus_the_server_would_get(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cuda: str | None, tp: int, expected: list[str]
) -> None:
    fake_queries(monkeypatch, tmp_path, APPS_ON_GPU2)
    if cuda is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda)
    assert busy_gpus(tp) == expected


def test_a_gpu_that_stays_busy_refuses_the_launch_one_that_frees_does_not(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    fake_queries(monkeypatch, tmp_path, APPS_ON_GPU2)
    with pytest.raises(EngineError, match=r"GPUs busy before launch \(GPU 2: pid 4242 holds 40960 MiB\)"):
        wait_for_free_gpus(4, timeout_s=0.0)
    freeing = tmp_path / "freeing"
    freeing.mkdir()
    fake_queries(monkeypatch, freeing, APPS_ON_GPU2, free_after=1)  # the previous arm's server, still exiting
    wait_for_free_gpus(4, timeout_s=10.0)
    assert (freeing / "calls").read_text() == "2"


def test_no_nvidia_smi_means_no_busy_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert busy_gpus(8) == []

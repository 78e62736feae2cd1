"""Stand-ins for what a GPU machine has, speaking the real interfaces: an SGLang interpreter (a recorded real
``--help`` and a version), ``nvidia-smi -L`` output, and a Hugging Face hub cache laid out as huggingface_hub
lays it out (https://huggingface.co/docs/huggingface_hub/guides/manage-cache)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
H100 = "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-5d3c8f6e-1b2a-4c3d-9e8f-0a1b2c3d4e5{i})\n"


def fake_sglang(tmp_path: Path, help_file: str = "sglang_help_new.txt", version: str = "0.5.23") -> Path:
    """An interpreter that is an SGLang build as far as the launcher can tell: the two calls it makes
    (``-m sglang.launch_server --help`` and the version query) answered; anything else fails. ``help_file``: a
    name under fixtures/, or a path."""
    python = tmp_path / "sglang-venv" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f'#!/bin/sh\nif [ "$2" = "sglang.launch_server" ] && [ "$3" = "--help" ]; then '
                      f'cat {FIXTURES / help_file}; exit 0; fi\n'
                      f'if [ "$1" = "-c" ]; then echo {version}; exit 0; fi\nexit 1\n')
    python.chmod(0o755)
    return python


def fake_nvidia_smi(tmp_path: Path, gpus: int) -> Path:
    """A folder holding an ``nvidia-smi`` that lists ``gpus`` H100s for ``-L`` (and refuses other calls)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    text = "".join(H100.format(i=i) for i in range(gpus))
    script.write_text(f"#!/bin/sh\n[ \"$1\" = \"-L\" ] || exit 64\nprintf '%s' '{text}'\n")
    script.chmod(0o755)
    return folder


def cache_model(hf_home: Path, hf_id: str) -> Path:
    """A snapshot of ``hf_id`` in the hub cache under ``hf_home``: a config and one (empty) weight file."""
    snap = hf_home / "hub" / f"models--{hf_id.replace('/', '--')}" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"\0")
    return snap

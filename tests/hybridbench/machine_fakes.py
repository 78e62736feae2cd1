"""Stand-ins for what a GPU machine has, speaking the real interfaces: an SGLang interpreter (a recorded real
``--help`` and a version), ``nvidia-smi -L`` and ``--query-gpu`` output, and a Hugging Face hub cache laid out as
huggingface_hub lays it out (https://huggingface.co/docs/huggingface_hub/guides/manage-cache)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559  # memory.total of an H100 SXM5 80GB, as nvidia-smi prints it
A100_40GB = "NVIDIA A100-SXM4-40GB"
UUID = "GPU-5d3c8f6e-1b2a-4c3d-9e8f-0a1b2c3d4e5{i}"
QUERY = "--query-gpu=index,uuid,name,memory.total"  # what hybridbench.engines.gpus.server_gpus asks


def fake_sglang(tmp_path: Path, help_file: str = "sglang_help_new.txt", version: str = "0.5.23") -> Path:
    """An interpreter that is an SGLang build as far as the launcher can tell: the two calls it makes
    (``-m sglang.launch_server [engine.extra_args] --help``, the extra arguments taken as given, and the version
    query) answered; anything else fails. ``help_file``: a name under fixtures/, or a path."""
    python = tmp_path / "sglang-venv" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f'#!/bin/sh\nfor last; do :; done\n'
                      f'if [ "$2" = "sglang.launch_server" ] && [ "$last" = "--help" ]; then '
                      f'cat {FIXTURES / help_file}; exit 0; fi\n'
                      f'if [ "$1" = "-c" ]; then echo {version}; exit 0; fi\nexit 1\n')
    python.chmod(0o755)
    return python


def fake_vllm(tmp_path: Path) -> Path:
    """An interpreter that is a vLLM 0.32.0 build as far as the plan can tell: its version and its recorded
    ``serve --help=all``."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\ncase "$*" in *--help=all*) cat "{FIXTURES / "vllm_help_0_32.txt"}";; '
                      '*) echo 0.32.0;; esac\n')
    python.chmod(0o755)
    return python


def fake_server(tmp_path: Path, help_file: str, version: str, calls: Path) -> Path:
    """An interpreter that is any GPU engine's build as far as the plan can tell: its help (SGLang's and vLLM's
    ``--help``, TokenSpeed's ``print_help()`` one-liner) prints ``help_file`` (a name under fixtures/), the version
    query answers ``version``. Every call is appended to ``calls``, so a test can tell whether the plan ran it."""
    python = tmp_path / "server-venv" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in\n'
                      f'  *importlib.metadata*) echo {version};;\n'
                      f'  *--help*|*print_help*) cat {FIXTURES / help_file};;\n'
                      '  *) exit 1;;\nesac\n')
    python.chmod(0o755)
    return python


def fake_nvidia_smi(tmp_path: Path, gpus: int, name: str = H100, memory_mib: int = H100_MIB) -> Path:
    """A folder holding an ``nvidia-smi`` that lists ``gpus`` GPUs named ``name`` for ``-L`` and for the query
    naming and sizing them (``memory_mib`` each), in nvidia-smi's formats; any other call is refused."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    listed = "".join(f"GPU {i}: {name} (UUID: {UUID.format(i=i)})\n" for i in range(gpus))
    rows = "".join(f"{i}, {UUID.format(i=i)}, {name}, {memory_mib}\n" for i in range(gpus))
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = \"-L\" ]; then printf '%s' '{listed}'; exit 0; fi\n"
                      f"if [ \"$1\" = \"{QUERY}\" ] && [ \"$2\" = \"--format=csv,noheader,nounits\" ]; then "
                      f"printf '%s' '{rows}'; exit 0; fi\nexit 64\n")
    script.chmod(0o755)
    return folder


def cache_model(hf_home: Path, hf_id: str) -> Path:
    """A snapshot of ``hf_id`` in the hub cache under ``hf_home``: a config and one (empty) weight file."""
    snap = hf_home / "hub" / f"models--{hf_id.replace('/', '--')}" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"\0")
    return snap

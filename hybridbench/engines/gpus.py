"""What GPUs a server launched from here would get, checked before launch: how many, which and with how much
memory, and whether another process already holds one (a leftover server from a crashed run makes SGLang fail on
memory minutes later).

Everything comes from ``nvidia-smi`` in its documented output formats; with no nvidia-smi (a CPU machine)
there is nothing to check and the functions say so with None / an empty list.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass

from hybridbench.errors import EngineError

__all__ = ["ServerGpu", "busy_gpus", "cuda_major", "server_gpus", "visible_gpus", "wait_for_free_gpus"]


# engine.gpu -> the CUDA capability major SGLang's is_sm90/is_sm100/is_sm120 probes answer for it, listed one by one:
# not every "b<digit>" is SM100 (B40 and RTX Blackwell are SM120, GB10 SM121). A GPU not named here is one the plan
# does not know, and its rules are left to the server.
_SM_MAJOR = {"a100": 8, "h100": 9, "h200": 9, "b200": 10, "b300": 10, "gb200": 10}


def cuda_major(gpu: str) -> int | None:
    """The CUDA capability major of the GPU ``engine.gpu`` names (None when the plan does not know it)."""
    return _SM_MAJOR.get(gpu)  # engine.gpu comes lowercased (config.gpu_kind)


@dataclass(frozen=True, slots=True)
class ServerGpu:
    """One GPU a server would get, as ``nvidia-smi --query-gpu`` reports it."""

    uuid: str
    name: str  # nvidia-smi's product name, e.g. "NVIDIA H100 80GB HBM3"
    memory_mib: int | None  # memory.total; None where nvidia-smi says [N/A]


def visible_gpus() -> int | None:
    """GPUs a server started from here can use, or None when nvidia-smi is absent or hangs (nothing to check).

    ``nvidia-smi -L`` lists every GPU in the machine (one ``GPU i: ...`` line each; MIG instances are indented
    lines under their GPU, not GPUs) and ignores ``CUDA_VISIBLE_DEVICES``, so when that is set its entries
    decide. A failing nvidia-smi (no driver) raises EngineError with its message rather than reporting 0 GPUs.
    """
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    physical = sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU "))
    if proc.returncode != 0 and physical == 0:
        message = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[0]
        raise EngineError(f"nvidia-smi -L failed (exit {proc.returncode}): {message}")
    restricted = os.environ.get("CUDA_VISIBLE_DEVICES")
    return physical if restricted is None else _cuda_visible_count(restricted, physical)


def _cuda_visible_count(value: str, physical: int) -> int:
    """Devices CUDA enumerates for a CUDA_VISIBLE_DEVICES value: like CUDA, stop at the first invalid entry
    (``-1``, an index the machine lacks, junk); ``GPU-``/``MIG-`` UUID entries count one each."""
    count = 0
    for entry in (e.strip() for e in value.split(",")):
        is_uuid = entry.startswith(("GPU-", "MIG-"))
        if not (is_uuid or (entry.isascii() and entry.isdigit() and int(entry) < physical)):
            break
        count += 1
    return count


def _query(*args: str) -> list[list[str]] | None:
    """Rows of an ``nvidia-smi --query-*=... --format=csv,noheader,nounits`` call; None if it cannot run."""
    try:
        proc = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]


def _mib(cell: str) -> int | None:
    return int(cell) if cell.isascii() and cell.isdigit() else None


def server_gpus(tp: int) -> list[ServerGpu] | None:
    """The first ``tp`` devices CUDA would hand a server, in CUDA's order (CUDA_VISIBLE_DEVICES entries are indices
    or GPU UUIDs); None when they cannot be known (no nvidia-smi, MIG instances)."""
    rows = _query("--query-gpu=index,uuid,name,memory.total")
    if rows is None:
        return None
    by_index = {row[0]: ServerGpu(row[1], row[2], _mib(row[3])) for row in rows if len(row) >= 4}
    by_uuid = {gpu.uuid: gpu for gpu in by_index.values()}
    restricted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if restricted is None:
        order = [by_index[i] for i in sorted(by_index, key=int)]
    else:
        order = []
        for entry in (e.strip() for e in restricted.split(",")):
            if entry.startswith("MIG-"):
                return None  # compute apps are reported per GPU; a MIG slice's own use is not told apart
            gpu = by_uuid.get(entry) or by_index.get(entry)
            if gpu is None:
                break  # CUDA stops at the first invalid entry
            order.append(gpu)
    return order[:tp]


def _holders(gpus: list[ServerGpu]) -> list[str]:
    apps = _query("--query-compute-apps=gpu_uuid,pid,used_memory") or []
    position = {gpu.uuid: i for i, gpu in enumerate(gpus)}
    return [f"GPU {position[row[0]]}: pid {row[1]} holds {row[2]} MiB"
            for row in apps if len(row) >= 3 and row[0] in position]


def busy_gpus(tp: int) -> list[str]:
    """One line per process holding memory on a GPU the server would use, e.g. ``GPU 0: pid 4242 holds
    40960 MiB``; empty when all are free or nothing can be checked."""
    gpus = server_gpus(tp)
    return _holders(gpus) if gpus else []


def wait_for_free_gpus(tp: int, timeout_s: float = 30.0) -> list[str]:
    """The names of the server's GPUs once no other process holds them ([] when they cannot be known).

    Raises EngineError naming the holders if they stay busy for ``timeout_s``: memory of a server just
    stopped (this run's previous arm) takes a moment to be released, a leftover one does not."""
    gpus = server_gpus(tp)
    if not gpus:
        return []
    deadline = time.monotonic() + timeout_s
    while busy := _holders(gpus):
        if time.monotonic() >= deadline:
            raise EngineError(f"GPUs busy before launch ({'; '.join(busy)}): stop those processes or choose "
                              f"other GPUs with CUDA_VISIBLE_DEVICES")
        time.sleep(1.0)
    return [gpu.name for gpu in gpus]

"""What a run needs from this machine, known before any trace is generated: enough GPUs for ``engine.tp``, GPUs of
the kind ``engine.gpu`` names with room for the model's weights, and the weights on disk when downloads are off.

A run refuses on these at plan time (exit 2); ``hybridbench plan`` prints them as warnings (the preview may run
on a laptop for an H100 job); ``hybridbench doctor`` prints each as one line.

GPUs are counted as a server launched from here would see them: ``nvidia-smi -L`` and ``CUDA_VISIBLE_DEVICES``
(``hybridbench.engines.gpus.visible_gpus``); the ``engine.tp`` GPUs a server would get are then named and sized by
``nvidia-smi --query-gpu=index,uuid,name,memory.total`` (``server_gpus``), their names mapped to GPU keys by
``reference_impl.engine.hardware.NVIDIA_SMI_MODELS`` and the weights counted by the simulator's byte model
(``reference_impl.engine.cost_model.weight_bytes``). Weights are found as Hugging Face's own libraries find them: a
local directory, or a snapshot in the hub cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``; layout ``models--ORG--NAME/snapshots/REV/``:
https://huggingface.co/docs/huggingface_hub/guides/manage-cache). Downloads are off under ``HF_HUB_OFFLINE`` or
``TRANSFORMERS_OFFLINE`` (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hybridbench.config.schema import RunCfg
from hybridbench.engines.gpus import ServerGpu, server_gpus, visible_gpus
from hybridbench.errors import EngineError
from hybridbench.plan.data import GPU_ENGINES
from reference_impl.engine.cost_model import QUANTIZATIONS, weight_bytes
from reference_impl.engine.hardware import gpu_key
from reference_impl.models import MODELS

__all__ = ["MIN_POOL_SHARE", "SERVES_WEIGHTS", "WEIGHT_SLACK", "Finding", "download_command", "downloads_off",
           "fetch_weights", "find_weights", "gpu_finding", "gpu_findings", "hub_cache", "is_hub_id",
           "machine_findings", "weights_finding"]

# Engines that load model.hf_id's weights themselves (the reference server runs its own tiny model; sim and
# replay load nothing).
SERVES_WEIGHTS = GPU_ENGINES
_WEIGHT_FILES = ("*.safetensors", "*.bin", "*.gguf", "*.pt")
_TRUE = {"1", "on", "yes", "true"}
# Do the weights fit, conservatively. A GPU's static budget is memory.total x engine.mem_fraction_static (SGLang's
# --mem-fraction-static, vLLM's and TokenSpeed's --gpu-memory-utilization): weights, then the KV and state pools in
# what is left. WEIGHT_SLACK: the byte model leaves out norms, conv kernels, gates and biases, and a rank holds more
# than 1/tp where K and V projections are copied past as many ranks as KV heads; its count is within 1% of the
# totals the model cards state (79.7B of Qwen3-Next-80B-A3B's 80B, 51.6B of Jamba-1.5-Mini's 52B), so 5% errs
# towards refusing. MIN_POOL_SHARE: what the weights must leave of the budget. SGLang sizes its pools from the
# memory still free after loading, so the CUDA context and NCCL buffers (a GiB or so a rank) come out of it too,
# and a pool of a few GiB holds a handful of this benchmark's 10K-token requests: such a run measures
# retractions, not caching.
WEIGHT_SLACK = 1.05
MIN_POOL_SHARE = 0.10
_GIB = 2**30


@dataclass(frozen=True, slots=True)
class Finding:
    """One machine check. ``refuse``: a run stops at plan time (exit 2), the preview warns. ``unknown``: this
    machine cannot tell (no nvidia-smi, a model name no cache layout covers): the run goes on as before, the
    preview warns, the doctor is not ready."""

    check: str  # what was checked: gpus, weights, server, arm NAME, disk, extra NAME
    status: Literal["ok", "refuse", "unknown"]
    message: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def hub_cache() -> Path:
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface") / "hub"


def downloads_off() -> bool:
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _has_weights(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(any(folder.glob(p)) for p in _WEIGHT_FILES)


def find_weights(hf_id: str) -> Path | None:
    """The directory holding ``hf_id``'s config and weights: the path itself, or its newest cached snapshot."""
    local = Path(hf_id).expanduser()
    if local.is_dir():
        return local if _has_weights(local) else None
    if hf_id.count("/") != 1:
        return None
    snapshots = hub_cache() / f"models--{hf_id.replace('/', '--')}" / "snapshots"
    try:
        found = sorted((p for p in snapshots.iterdir() if _has_weights(p)), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return found[-1] if found else None


def download_command(hf_id: str) -> str:
    return f"huggingface-cli download {hf_id}"


def is_hub_id(hf_id: str) -> bool:
    """``ORG/NAME``: a Hugging Face repository id (what the cache layout and a download can name)."""
    org, slash, name = hf_id.partition("/")
    return bool(slash and org and name and "/" not in name and not hf_id.startswith((".", "~")))


def weights_finding(cfg: RunCfg) -> Finding:
    hf_id = cfg.model.hf_id
    where = find_weights(hf_id)
    if where is not None:
        return Finding("weights", "ok", f"model.hf_id={hf_id}: weights in {where}")
    local = Path(hf_id).expanduser()
    if hf_id.startswith(("/", ".", "~")) or local.exists():
        return Finding("weights", "refuse", f"model.hf_id={hf_id}: no config.json and weight files in that directory")
    if not is_hub_id(hf_id):
        return Finding("weights", "unknown", f"model.hf_id={hf_id}: neither a directory nor a Hugging Face id "
                                             "(ORG/NAME); the server resolves it")
    if downloads_off():
        return Finding("weights", "refuse", f"model.hf_id={hf_id}: not in the Hugging Face cache ({hub_cache()}) and "
                                            f"downloads are off (HF_HUB_OFFLINE); fetch it: {download_command(hf_id)}")
    return Finding("weights", "ok", f"model.hf_id={hf_id}: not cached in {hub_cache()}; the run downloads it before "
                                    f"the server starts ({download_command(hf_id)})")


def gpu_finding(cfg: RunCfg) -> Finding:
    tp = cfg.engine.tp
    try:
        gpus = visible_gpus()
    except EngineError as exc:
        return Finding("gpus", "refuse", f"engine.tp={tp}: {exc}")
    if gpus is None:
        return Finding("gpus", "unknown", f"engine.tp={tp} needs {tp} GPUs; no nvidia-smi here to count them")
    if gpus < tp:
        fit = "no GPU server can start here" if gpus == 0 else f"engine.tp={gpus} would fit (or a smaller model, " \
                                                                "e.g. model=qwen3.5-9b engine.tp=1)"
        restricted = " (CUDA_VISIBLE_DEVICES)" if "CUDA_VISIBLE_DEVICES" in os.environ else ""
        return Finding("gpus", "refuse", f"engine.tp={tp} needs {tp} GPUs; {gpus} visible{restricted}: {fit}")
    return Finding("gpus", "ok", f"engine.tp={tp}: {gpus} GPUs visible")


def _named(gpus: list[ServerGpu]) -> str:
    return ", ".join(f"{n} x {name}" for name, n in Counter(g.name for g in gpus).items())


def _kind_finding(cfg: RunCfg, gpus: list[ServerGpu]) -> Finding:
    """The GPUs against engine.gpu: the forecast is made for it and a published figure is compared by it, so a run
    on other GPUs under that label would be set beside figures it cannot be compared with."""
    want = cfg.engine.gpu
    keys = {g.name: gpu_key(g.name) for g in gpus}
    if other := next((k for k in keys.values() if k is not None and k != want), None):
        return Finding("gpu kind", "refuse", f"engine.gpu={want}, but the server would run on {_named(gpus)} "
                                             f"({other}): set engine.gpu={other}, or run where the {want} GPUs are")
    if unknown := [name for name, k in keys.items() if k is None]:
        return Finding("gpu kind", "unknown", f"engine.gpu={want}: nvidia-smi names {', '.join(unknown)}, which "
                                              "reference_impl.engine.hardware.NVIDIA_SMI_MODELS maps to no GPU key")
    return Finding("gpu kind", "ok", f"engine.gpu={want}: {_named(gpus)}")


def _fits(weights: int, budget: float, tp: int) -> bool:
    return weights / tp * WEIGHT_SLACK <= budget * (1 - MIN_POOL_SHARE)


def _fitting_tp(weights: int, budget: float, tp: int) -> str:
    more = next((t for t in (2, 4, 8) if t > tp and _fits(weights, budget, t)), None)
    return f"engine.tp={more} would fit" if more else "no engine.tp up to 8 fits these GPUs"


def _memory_finding(cfg: RunCfg, gpus: list[ServerGpu]) -> Finding:
    """The model's weights, split over engine.tp, against the smallest GPU the server would get."""
    m, e = cfg.model, cfg.engine
    spec = MODELS.get(m.name)
    quantized = f" (model.quantization={m.quantization})" if m.quantization else ""
    if spec is None:
        return Finding("gpu memory", "ok", f"model={m.name}: not checked (no byte model in reference_impl.models)")
    if m.quantization and m.quantization not in QUANTIZATIONS:
        return Finding("gpu memory", "ok", f"model={m.name}{quantized}: not checked (the byte model knows "
                                           f"{', '.join(QUANTIZATIONS)} only)")
    if unsized := [g for g in gpus if g.memory_mib is None]:
        return Finding("gpu memory", "unknown", f"model={m.name}: nvidia-smi reports no memory.total for "
                                                f"{_named(unsized)}")
    mib, name = min((g.memory_mib or 0, g.name) for g in gpus)
    weights, memory = weight_bytes(spec, m.quantization), mib * 2**20
    budget = memory * e.mem_fraction_static
    per_gpu = weights / e.tp
    budget_text = (f"{memory / _GIB:.1f} GiB x engine.mem_fraction_static={e.mem_fraction_static} = "
                   f"{budget / _GIB:.1f} GiB for weights and cache")
    if not _fits(weights, budget, e.tp):
        return Finding("gpu memory", "refuse",
                       f"model={m.name}{quantized}: {weights / _GIB:.1f} GiB of weights / engine.tp={e.tp} = "
                       f"{per_gpu / _GIB:.1f} GiB a GPU, too much for {name}: {budget_text}, of which the "
                       f"weights (+{WEIGHT_SLACK - 1:.0%}) may take {1 - MIN_POOL_SHARE:.0%}; "
                       f"{_fitting_tp(weights, budget, e.tp)}")
    return Finding("gpu memory", "ok", f"model={m.name}{quantized}: {per_gpu / _GIB:.1f} GiB of weights a GPU "
                                       f"(engine.tp={e.tp}) on {name}: {budget_text}")


def gpu_findings(cfg: RunCfg) -> tuple[Finding, ...]:
    """The GPU count, then, where nvidia-smi names and sizes the GPUs a server would get, their memory against the
    model's weights and their kind against engine.gpu (memory first: a run refuses on the first refusal, and that
    is the one a server would crash on). No nvidia-smi: the count's ``unknown`` alone, as before."""
    count = gpu_finding(cfg)
    gpus = server_gpus(cfg.engine.tp) if count.status != "unknown" else None
    if not gpus:
        return (count,)
    return count, _memory_finding(cfg, gpus), _kind_finding(cfg, gpus)


def machine_findings(cfg: RunCfg) -> tuple[Finding, ...]:
    """The checks that apply to this run's engine: GPUs for a GPU server, weights for a server of model.hf_id."""
    out: list[Finding] = []
    if cfg.engine.name in SERVES_WEIGHTS:
        if cfg.engine.gpu != "cpu":
            out += gpu_findings(cfg)
        out.append(weights_finding(cfg))
    return tuple(out)


_DOWNLOAD = "import sys\nfrom huggingface_hub import snapshot_download\nprint(snapshot_download(sys.argv[1]))"


def fetch_weights(cfg: RunCfg, progress: Callable[[str], None]) -> None:
    """Download model.hf_id into the Hugging Face cache with the server's own interpreter when it is not there and
    downloads are on, before the first server starts: the server's startup timeout then measures start-up alone,
    not a download of tens of GB. EngineError (exit 3) when the download fails."""
    hf_id = cfg.model.hf_id
    if cfg.engine.name not in SERVES_WEIGHTS or not is_hub_id(hf_id) or downloads_off() or find_weights(hf_id):
        return
    python = cfg.engine.python or sys.executable
    progress(f"downloading {hf_id} before the server starts (its startup timeout counts from the end of this)")
    try:
        proc = subprocess.run([python, "-c", _DOWNLOAD, hf_id], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise EngineError(f"model.hf_id={hf_id}: cannot run {python} to download it ({exc})") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineError(f"model.hf_id={hf_id}: download failed ({last}); fetch it: {download_command(hf_id)}")

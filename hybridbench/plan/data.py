"""``data.*``: real data sets in place of the synthetic stand-ins, applied to the config before the plan is built.

One key per data set. ``data.sharegpt`` feeds every ``sharegpt`` workload that names no source of its own (a JSON
file goes to ``params.path``, anything else — a ``save_to_disk`` folder or a Hub name — to ``params.dataset``),
tokenized with ``data.tokenizer`` or, on an engine that loads the model's weights, the served model's own
tokenizer (``model.hf_id``), so token counts are what the server sees. ``data.swebench`` feeds every ``swebench``
workload the same way (trajectory files tokenized; a trace ``.jsonl`` replayed as it is). ``data.gsm8k`` and
``data.aime25`` are the accuracy probe's folders. A GPU run left on synthetic text says so (the returned notes go
to the plan's warnings and to the workload's note in the report); ``data.require_real=true`` refuses it (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybridbench.config.schema import SERVING_ENGINES, RunCfg, WorkloadCfg
from hybridbench.errors import ConfigError

__all__ = ["GPU_ENGINES", "add_note", "apply_data"]

GPU_ENGINES = SERVING_ENGINES  # engines that serve model.hf_id's weights and tokenizer


def _set(resolved: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = resolved
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def add_note(name: str, w: WorkloadCfg, text: str, resolved: dict[str, Any]) -> None:
    """Append ``text`` to workload ``name``'s report note (in ``w`` and the ``resolved`` copy the plan records), once:
    a config prepared twice in one process (a preview, then a run) says it once."""
    if text not in w.note:
        w.note = f"{w.note} {text}".strip()
    _set(resolved, ("workloads", name, "note"), w.note)


def apply_data(cfg: RunCfg, resolved: dict[str, Any]) -> tuple[str, ...]:
    """Fill each workload's source from ``data.*`` (in ``cfg`` and the ``resolved`` copy the plan records); returns
    one line per synthetic fallback on a GPU engine. ConfigError when ``data.require_real`` forbids one."""
    d, gpu = cfg.data, cfg.engine.name in GPU_ENGINES
    tokenizer = d.tokenizer or (cfg.model.hf_id if gpu else "")
    notes: list[str] = []
    for name, w in cfg.workloads.items():
        if w.kind == "swebench":
            notes += _swebench(name, w, cfg, tokenizer, resolved)
            continue
        if w.kind != "sharegpt":
            continue
        params = dict(w.params)
        if not params.get("path") and not params.get("dataset"):
            if d.sharegpt:
                key = "path" if d.sharegpt.endswith(".json") or Path(d.sharegpt).is_file() else "dataset"
                params[key] = d.sharegpt
                if key == "dataset":
                    params["split"] = d.sharegpt_split
            elif gpu:
                why = (f"workloads.{name}: synthetic ShareGPT stand-in (token ids drawn from published length "
                       "statistics, not real text); set data.sharegpt to a ShareGPT JSON file or dataset")
                if d.require_real:
                    raise ConfigError(f"data.require_real: {why}")
                notes.append(why)
                add_note(name, w, "Synthetic text: no data.sharegpt was given.", resolved)
        if (params.get("path") or params.get("dataset")) and tokenizer and not params.get("tokenizer"):
            params["tokenizer"] = tokenizer
        if params != w.params:
            w.params = params
            _set(resolved, ("workloads", name, "params"), dict(params))
    for dataset, folder in (("gsm8k", d.gsm8k), ("aime25", d.aime25)):
        if folder and dataset not in cfg.checks.accuracy_datasets:
            cfg.checks.accuracy_datasets = {**cfg.checks.accuracy_datasets, dataset: folder}
            _set(resolved, ("checks", "accuracy_datasets"), dict(cfg.checks.accuracy_datasets))
    if gpu and "accuracy" in cfg.checks.enabled and "gsm8k" not in cfg.checks.accuracy_datasets:
        why = "accuracy: the shipped 22-question gsm8k sample (too small to fail); set data.gsm8k to a gsm8k folder"
        if d.require_real:
            raise ConfigError(f"data.require_real: {why}")
        notes.append(why)
    return tuple(notes)


def _swebench(name: str, w: WorkloadCfg, cfg: RunCfg, tokenizer: str, resolved: dict[str, Any]) -> list[str]:
    """data.swebench into a swebench workload without its own path: trajectory files are tokenized (the served
    model's tokenizer on a GPU engine), a trace .jsonl is replayed as it is (its rows are token ids already)."""
    d, gpu = cfg.data, cfg.engine.name in GPU_ENGINES
    params = dict(w.params)
    notes: list[str] = []
    if not params.get("path"):
        if d.swebench:
            if not Path(d.swebench).expanduser().exists():
                raise ConfigError(f"data.swebench: {d.swebench}: no such file or directory")
            params["path"] = d.swebench
            if d.swebench.endswith(".jsonl"):  # rows of token ids: the generator's own sizes do not apply
                notes.append(f"workloads.{name}: data.swebench is a trace file, sent as it is: the workload's "
                             "num_sessions, max_turns and max_input do not apply (keep_sessions does)")
        elif gpu:
            why = (f"workloads.{name}: synthetic SWE-bench sessions (lengths calibrated to Marconi's traces, random "
                   "token ids); set data.swebench to SWE-agent .traj / OpenHands files or a trace .jsonl")
            if d.require_real:
                raise ConfigError(f"data.require_real: {why}")
            add_note(name, w, "Synthetic sessions: no data.swebench was given.", resolved)
            return [why]
    path = str(params.get("path") or "")
    if path and not path.endswith(".jsonl") and tokenizer and not params.get("tokenizer"):
        params["tokenizer"] = tokenizer
    if params != w.params:
        w.params = params
        _set(resolved, ("workloads", name, "params"), dict(params))
    return notes

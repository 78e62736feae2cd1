"""Published figures as runs (results/baselines/*.json): what a seed's pull request measured on its own hardware
(bench_serving keys per workload and arm, with the source, model, hardware and command), read into the store's
frames as runs on the branch ``published`` so any run, series or chart can be set against them.

A file is one published run; ``tests/hybridbench/test_baselines.py`` checks each against the ``published:``
entries of its experiment (conf/experiment/*.yaml), so the two transcriptions of a seed cannot disagree."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridbench.errors import ConfigError
from hybridbench.results.safe_io import read_json_bounded

__all__ = ["BRANCH", "MARKER", "PublishedRun", "find_published", "published_rows", "read_published"]

BRANCH = "published"
MARKER = ".json"
_TEXT = ("name", "experiment", "source", "model", "hardware", "command")


@dataclass(frozen=True, slots=True)
class PublishedRun:
    name: str
    experiment: str
    source: str
    model: str
    hardware: str
    command: str
    figures: Mapping[str, Mapping[str, Mapping[str, float]]]  # workload -> arm -> bench_serving key -> value

    def value(self, workload: str, arm: str, metric: str) -> float | None:
        return self.figures.get(workload, {}).get(arm, {}).get(metric)


def read_published(path: Path) -> PublishedRun:
    """One baselines file, validated: a bad one is a ConfigError naming the file and the key."""
    try:
        raw = read_json_bounded(path)  # a FIFO or a link out of the folder is refused, never waited on
    except ConfigError as exc:
        raise ConfigError(f"not a published run: {exc}") from None
    if not isinstance(raw, dict) or raw.get("label") != BRANCH:
        raise ConfigError(f"{path}: label: must be {BRANCH!r}")
    for key in _TEXT:
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ConfigError(f"{path}: {key}: a non-empty string is required")
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for workload, arms in (raw.get("figures") or {}).items():
        for arm, metrics in (arms or {}).items():
            for metric, v in (metrics or {}).items():
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise ConfigError(f"{path}: figures.{workload}.{arm}.{metric}: not a number: {v!r}")
                figures.setdefault(workload, {}).setdefault(arm, {})[metric] = float(v)
    if not figures:
        raise ConfigError(f"{path}: figures: no published figure")
    return PublishedRun(**{k: raw[k] for k in _TEXT}, figures=figures)


def find_published(root: Path) -> Iterator[Path]:
    """Baselines files: ``*.json`` in a ``baselines`` folder, the root itself or the one right under it."""
    folder = root if root.name == "baselines" else root / "baselines"
    if folder.is_dir():
        yield from sorted(folder.glob(f"*{MARKER}"))


def published_rows(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(runs rows, aggregates rows, skipped lines) for the store's frames; ``hardware`` stands in the GPU column."""
    runs: list[dict[str, Any]] = []
    aggs: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in find_published(root):
        try:
            pub = read_published(path)
        except ConfigError as exc:
            skipped.append(f"skipped {exc}")
            continue
        key = f"{BRANCH}/{pub.name}"
        runs.append({"run": key, "path": str(path), "experiment": pub.experiment, "verdict": BRANCH,
                     "engine": "sglang", "engine_version": "", "model": pub.model, "gpu": pub.hardware,
                     "branch": BRANCH, "pr": "", "git_sha": "", "arms": ",".join(sorted({a for w in pub.figures.values()
                                                                                        for a in w})),
                     "workloads": ",".join(pub.figures), "failed_checks": "", "fingerprint": "", "load": "",
                     "modelled": False, "schema_version": 0, "source": pub.source, "command": pub.command})
        aggs.extend({"run": key, "workload": w, "arm": a, "metric": m, "value": v}
                    for w, arms in pub.figures.items() for a, metrics in arms.items() for m, v in metrics.items())
    return runs, aggs, skipped

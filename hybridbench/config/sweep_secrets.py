"""Secrets in a sweep's multirun.yaml, hidden whatever becomes of its jobs.

Hydra's sweeper writes the sweep's config and overrides verbatim (``engine.extra_args=[--api-key,K]``) before any job
runs. Each job scrubs the file once it has composed its config; a sweep whose first job Hydra cannot compose
(``engine.tp=abc,1``) ends before any job runs, and the file kept the key in plain text. Hydra calls
:class:`ScrubMultirun` before the sweep (conf/config.yaml's ``hydra.callbacks``); ``python -m hybridbench`` calls
:func:`scrub_swept` when the sweep ends, however it ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from hybridbench.config.redact import secret_values
from hybridbench.config.redact_files import scrub_file

__all__ = ["ScrubMultirun", "scrub_swept"]

_swept: list[tuple[Path, frozenset[str]]] = []  # (multirun.yaml, the secrets of the sweep's config)


class ScrubMultirun(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        body = OmegaConf.to_container(config, resolve=False)
        assert isinstance(body, dict)
        body.pop("hydra", None)
        secrets = secret_values(body)  # as written: the file holds them so
        if secrets:  # the sweep dir as the sweeper reads it (Hydra caches ${now:...} per config)
            _swept.append((Path(str(config.hydra.sweep.dir)) / "multirun.yaml", secrets))


def scrub_swept() -> None:
    while _swept:
        path, secrets = _swept.pop()
        scrub_file(path, secrets)

"""Secrets in a sweep's multirun.yaml, hidden whatever becomes of its jobs.

Hydra's sweeper writes the sweep's config and overrides verbatim (``engine.extra_args=[--api-key,K]``) before any job
runs. Each job scrubs the file once it has composed its config; a sweep whose first job Hydra cannot compose
(``engine.tp=abc,1``) ends before any job runs, and the file kept the key in plain text. Hydra calls
:class:`ScrubMultirun` before the sweep (conf/config.yaml's ``hydra.callbacks``); ``python -m hybridbench`` calls
:func:`scrub_swept` when the sweep ends, however it ended.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
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
        # As written: the file holds them so. A swept value is in no composed config (Hydra leaves sweeps out of it),
        # only in the overrides the file records: each of its values, as the key would hold it.
        secrets = secret_values(body)
        # a callback's exception is only a warning to Hydra, and would drop the secrets found above with it
        with contextlib.suppress(Exception):
            secrets |= _swept_secrets([str(o) for o in config.hydra.overrides.task])
        if secrets:  # the sweep dir as the sweeper reads it (Hydra caches ${now:...} per config)
            _swept.append((Path(str(config.hydra.sweep.dir)) / "multirun.yaml", secrets))


def _swept_secrets(overrides: list[str]) -> frozenset[str]:
    out: set[str] = set()
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # what Hydra cannot parse ends the sweep before it writes the file
        return frozenset()
    for override in parsed:
        values: list[Any]
        try:
            values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
        except Exception:  # glob(...), interval(...): no values listed before a config loader is at hand
            values = [override.get_value_element_as_str()]
        for value in values:
            nested: Any = value
            for part in reversed(override.key_or_group.split(".")):
                nested = {part: nested}
            out |= secret_values(nested)
    return frozenset(out)


def scrub_swept() -> None:
    while _swept:
        path, secrets = _swept.pop()
        scrub_file(path, secrets)

"""Which configuration keys decide how a run is scored, as opposed to what it measured.

A scoring key (``checks.*`` but the probes' own settings, ``engine.kl_threshold``, ``engine.timing``) may change
in a re-scoring. ``checks.*`` or ``engine.kl_threshold`` set on a run's own command line loosens or narrows the
experiment's verdict as written, so the run's verdict is marked for it and it is never a ``compare latest:``
baseline (``marks_verdict``). A probe setting (the kl probe's samples, the accuracy probe's interpreter and
question sets) decided which samples exist: a re-scoring refuses it, and a run may set it freely (the nightly
points ``checks.accuracy_datasets`` at its local copy).
"""

from __future__ import annotations

__all__ = ["PROBE_SETTINGS", "RESCORABLE", "is_probe_setting", "marks_verdict"]

RESCORABLE = ("checks.", "engine.kl_threshold", "engine.timing")
PROBE_SETTINGS = ("checks.kl_samples", "checks.kl_variants", "checks.kl_max_new_tokens", "checks.kl_temperature",
                  "checks.accuracy_python", "checks.accuracy_datasets", "checks.accuracy_limit",
                  "checks.accuracy_max_tokens", "checks.accuracy_batch_size", "checks.accuracy_timeout_s",
                  "checks.accuracy_mode")


def is_probe_setting(key: str) -> bool:
    """``key`` or a key under it (``checks.accuracy_datasets.gsm8k``) is one the probes read while the run was live."""
    return key in PROBE_SETTINGS or key.startswith(tuple(f"{k}." for k in PROBE_SETTINGS))


def marks_verdict(key: str) -> bool:
    """``key`` (a dotted config path, without Hydra's ``+``/``++``/``~`` prefix), set on a run's own command line,
    changes its verdict from the experiment's as written: a threshold, the set of checks, the baseline arm, the kl
    gate. Not a checks group (``checks=strict``: a reviewed file in conf/checks, what the nightly selects), and
    not ``engine.timing`` (which clock is judged, named in every timing row; wall time decides less, never more)."""
    return (key.startswith(RESCORABLE[0]) and not is_probe_setting(key)) or key == "engine.kl_threshold"

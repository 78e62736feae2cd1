"""``workloads.<name>.keep_sessions``: a load cut to its first sessions says so where a reader looks.

The cut itself is the generator's (``python -m workloads.generate --keep-sessions``, workloads/sessions.py); this
puts the sentence under the workload's heading in the report (its ``note``, as ``data.*`` does for a synthetic
stand-in), so no figure of a cut load is read as the seed's full load.
"""

from __future__ import annotations

from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.plan.data import add_note

__all__ = ["note_kept_sessions"]


def note_kept_sessions(cfg: RunCfg, resolved: dict[str, Any]) -> None:
    """Append the cut to the note of each workload with ``keep_sessions`` (in ``cfg`` and the ``resolved`` copy the
    plan records)."""
    for name, w in cfg.workloads.items():
        if w.keep_sessions <= 0:
            continue
        cut = (f"Sessions after the first {w.keep_sessions} of this load are not sent (workloads.{name}.keep_sessions, "
               "to fit the experiment's wall-time budget; the plan says how many it has): where it has more, its "
               "figures are not the full load's.")
        add_note(name, w, cut, resolved)

"""``python -m hybridbench.results``: see ``hybridbench.results.cli``."""

from __future__ import annotations

from hybridbench.results.extra import require_results_extra
from workloads.closed_stdout import quiet_on_closed_stdout

if __name__ == "__main__":
    require_results_extra()
    from hybridbench.results.cli import main  # after the check: its libraries are an extra

    raise SystemExit(quiet_on_closed_stdout(main))

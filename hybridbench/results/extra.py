"""The results store's and dashboard's libraries (DuckDB, pandas, plotly, ruptures) are the ``results`` extra:
their command lines check for them first, so a missing one is one line and exit 2, not a traceback."""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["require_results_extra"]

MODULES = ("duckdb", "pandas", "pyarrow", "plotly", "ruptures", "scipy")


def require_results_extra() -> None:
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: {', '.join(missing)} not installed: pip install 'hybridbench[results]'", file=sys.stderr)
        raise SystemExit(2)

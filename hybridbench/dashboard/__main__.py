"""``python -m hybridbench.dashboard``: see ``hybridbench.dashboard.cli``. Its libraries (DuckDB, pandas, plotly,
ruptures) are the ``results`` extra, so a missing one is one line, not a traceback."""

from __future__ import annotations

import sys

try:
    from hybridbench.dashboard.cli import main
except ImportError as exc:
    print(f"error: {exc.name} is not installed: pip install 'hybridbench[results]'", file=sys.stderr)
    raise SystemExit(2) from None

if __name__ == "__main__":
    raise SystemExit(main())

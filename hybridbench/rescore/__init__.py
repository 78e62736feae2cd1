"""Re-score a saved run: metrics and checks again from its files alone, under other settings
(``python -m hybridbench.rescore RUN_DIR [checks.KEY=VALUE ...]``)."""

from hybridbench.rescore.run import rescore_run

__all__ = ["rescore_run"]

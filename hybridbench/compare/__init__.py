"""Compare two saved runs: a pull request's against main's (``python -m hybridbench.compare``).

The public API: ``load_run`` reads a run directory, ``compare_runs`` turns two into a ``Comparison`` of
``Delta`` verdicts under a ``CompareCfg``; ``hybridbench.report.compare`` renders one.
"""

from hybridbench.compare.deltas import CompareCfg, Delta
from hybridbench.compare.diff import Comparison, compare_runs, config_changes
from hybridbench.compare.runs import SavedRun, WorkloadDigest, load_run

__all__ = ["CompareCfg", "Comparison", "Delta", "SavedRun", "WorkloadDigest", "compare_runs", "config_changes",
           "load_run"]

"""``python -m hybridbench.rescore RUN_DIR [checks.KEY=VALUE ...] [engine.kl_threshold=X]``

Re-runs metrics and checks on a saved run from its files alone (no engine, no GPU) and rewrites its
bundle.json and report.md; e.g. ``checks.ttft_regression=0.05`` or ``checks.enabled=[survival,ttft]``.
With no override it reproduces the run's own verdicts. Exit codes as the harness's (docs/reference/exit-codes.md):
0 pass, 1 a check failed or could not decide, 2 usage error or unreadable run files (one line), 3 the run itself
ended early (its server died, or it was interrupted).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hybridbench.errors import ConfigError, OneLineParser
from hybridbench.report.markdown import render_report
from hybridbench.rescore.run import rescore_run
from workloads.closed_stdout import quiet_on_closed_stdout

__all__ = ["main"]



def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m hybridbench.rescore", description=(__doc__ or "").split("\n\n")[1])
    p.add_argument("run_dir", type=Path, help="a run directory (plan.json, records.jsonl, bundle.json)")
    p.add_argument("overrides", nargs="*", help="checks.KEY=VALUE or engine.kl_threshold=X")
    args = p.parse_args(argv)
    try:
        bundle = rescore_run(args.run_dir, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(render_report(bundle))
    print(f"rescored: {args.run_dir}", file=sys.stderr)
    verdict = bundle["verdict"]
    return 3 if verdict in ("error", "interrupted") else 1 if verdict in ("fail", "inconclusive") else 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_stdout(main))

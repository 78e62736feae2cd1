"""``hybridbench plan [--json] OVERRIDES...`` (``python -m hybridbench.preview``): preview a run without launching it.

The same Hydra overrides as ``python -m hybridbench``; the same plan-time validation (exit 2 for what the run
would refuse); what this machine lacks (GPUs, weights) is a warning here and a refusal in the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from hybridbench.errors import HybridbenchError, OneLineParser
from workloads.closed_stdout import quiet_on_closed_stdout

__all__ = ["main", "parser"]



def parser(prog: str = "python -m hybridbench.preview") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description="Preview a run without launching it: trials, each arm's server command "
                                       "line, pools, arrivals and a simulator forecast.")
    p.add_argument("--json", action="store_true", help="print one JSON object (arms, trials, forecast, warnings)")
    p.add_argument("--no-forecast", action="store_true", help="skip the simulator forecast")
    p.add_argument("--forecast-requests", type=int, default=400, metavar="N",
                   help="sample a workload of more than N requests where its wall time scales from a sample "
                        "(closed loops, Poisson arrivals): its hit rate and TTFT are then not forecast; trace "
                        "replays are simulated whole")
    p.add_argument("-m", "--multirun", action="store_true", help="refused: plan previews one run at a time")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for a run: +experiment=NAME engine=sglang ...")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m hybridbench.preview") -> int:
    args = parser(prog).parse_args(argv)
    if args.forecast_requests < 1:
        print(f"error: --forecast-requests must be >= 1, got {args.forecast_requests}", file=sys.stderr)
        return 2
    if args.multirun:
        print("error: plan previews one run; drop -m (plan each sweep point on its own)", file=sys.stderr)
        return 2
    from hybridbench.preview.build import build_preview  # noqa: PLC0415 - --help stays fast
    from hybridbench.preview.compose import compose_run  # noqa: PLC0415
    from hybridbench.preview.render import render_text  # noqa: PLC0415

    try:
        preview = build_preview(compose_run(list(args.overrides)), forecast=not args.no_forecast,
                                max_requests=args.forecast_requests)
    except HybridbenchError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(preview.to_json(), indent=1, default=str) if args.json else render_text(preview))
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_stdout(main))

"""``hybridbench doctor OVERRIDES...`` (``python -m hybridbench.doctor``): is this machine ready for that run?

One line per check (``ok``, ``FAIL``, or ``??`` where this machine cannot tell); exit 0 when every check is ok,
2 otherwise (and for a configuration the run itself would refuse).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hybridbench.errors import HybridbenchError, OneLineParser
from workloads.closed_stdout import quiet_on_closed_stdout

__all__ = ["main", "parser"]

_MARK = {"ok": "ok  ", "refuse": "FAIL", "unknown": "??  "}



def parser(prog: str = "python -m hybridbench.doctor") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description="Is this machine ready for the run these overrides describe? One line per "
                                       "check; exit 0 ready, 2 not.")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for a run: +experiment=NAME engine=sglang ...")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m hybridbench.doctor") -> int:
    args = parser(prog).parse_args(argv)
    from hybridbench.doctor.checks import doctor_findings  # noqa: PLC0415 - --help stays fast
    from hybridbench.preview.compose import compose_run  # noqa: PLC0415

    try:
        findings = doctor_findings(compose_run(list(args.overrides)))
    except HybridbenchError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    for f in findings:
        print(f"{_MARK[f.status]} {f.check}: {' '.join(f.message.split())}")
    ready = all(f.ok for f in findings)
    print("ready" if ready else "not ready")
    return 0 if ready else 2


if __name__ == "__main__":
    sys.exit(quiet_on_closed_stdout(main))

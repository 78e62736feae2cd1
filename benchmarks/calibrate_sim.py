"""Fit the simulator's cost factors to the seed's H100 radix-cache run, or check the committed fit.

The seed run and how its trace is built are in ``reference_impl/engine/calibration.py``.

One set of factors serves both arms; the arms differ only in what the cache saves.

    python benchmarks/calibrate_sim.py            # simulate both arms with CALIBRATED, print errors
    python benchmarks/calibrate_sim.py --fit      # coordinate search from CALIBRATED, print the best
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from whole_command import count  # a sibling: run as a script

from hybridbench.errors import OneLineParser
from reference_impl.engine.calibration import SEED_RADIX_TARGETS as TARGETS
from reference_impl.engine.calibration import TOLERANCE, run_seed_arm, seed_metrics, seed_radix_rows
from reference_impl.engine.cost_model import CALIBRATED, CostFactors
from workloads.trace import TraceRow


def errors(rows: list[TraceRow], factors: CostFactors) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    out: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    for arm, target in TARGETS.items():
        got = seed_metrics(run_seed_arm(rows, arm, factors))
        out[arm] = (got, tuple(g / t - 1 for g, t in zip(got, target, strict=True)))
    return out


def worst(errs: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]) -> float:
    return max(abs(e) for _, rel in errs.values() for e in rel)


def report(factors: CostFactors, errs: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]) -> None:
    print(f"factors: {factors}")
    print("| arm | req/s (seed) | mean TTFT ms (seed) | median ITL ms (seed) |")
    print("|---|---|---|---|")
    for arm, (got, rel) in errs.items():
        t = TARGETS[arm]
        cells = [f"{g:.2f} ({tv:.2f}, {r:+.1%})" for g, tv, r in zip(got, t, rel, strict=True)]
        print(f"| {arm} | " + " | ".join(cells) + " |")
    print(f"worst relative error: {worst(errs):.1%} (tolerance {TOLERANCE:.0%})")


def fit(rows: list[TraceRow], start: CostFactors, rounds: int) -> CostFactors:
    best, best_err = start, worst(errors(rows, start))
    for _ in range(rounds):
        improved = False
        for name in ("prefill_mfu", "decode_overhead_s", "frontend_s", "prefill_overhead_s", "decode_bw_efficiency"):
            for mult in (0.7, 0.85, 1.15, 1.4):
                value = getattr(best, name) * mult if getattr(best, name) else 0.02 * mult
                cand = dataclasses.replace(best, **{name: value})
                err = worst(errors(rows, cand))
                if err < best_err:
                    best, best_err, improved = cand, err, True
                    print(f"  {name} -> {value:.5g}: worst {err:.1%}", flush=True)
        if not improved:
            break
    return best


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--rounds", type=count(1), default=4)
    args = ap.parse_args(argv)
    rows = seed_radix_rows()
    factors = fit(rows, CALIBRATED, args.rounds) if args.fit else CALIBRATED
    errs = errors(rows, factors)
    report(factors, errs)
    return 0 if worst(errs) <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())

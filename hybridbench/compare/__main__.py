"""``python -m hybridbench.compare BASELINE_RUN CANDIDATE_RUN`` — main's run against a pull request's.

Writes compare.md and compare.json (default: CANDIDATE_RUN/compare/) and prints the table. Exit codes
as the harness's (docs/reference/exit-codes.md): 0 no regression, 1 a regression or nothing decided (all skipped),
2 usage error or runs that cannot be compared (one line naming why).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from hybridbench.compare import CompareCfg, compare_runs, load_run
from hybridbench.config.redact import redact, scrub, scrub_obj, secret_values
from hybridbench.config.validate import RULES
from hybridbench.errors import ConfigError, OneLineParser
from hybridbench.report.compare import comparison_json, render_comparison
from hybridbench.report.md_text import md_forms
from hybridbench.results import read_run
from hybridbench.results.marks import refuse_incomplete, verdict_marks
from hybridbench.results.text import visible
from workloads.atomic_file import output_problem, write_json_and_text_atomic
from workloads.closed_stdout import quiet_on_closed_stdout

__all__ = ["main"]

# The run's own rule (checks.bootstrap_samples): fewer resamples make the interval a handful of draws.
MIN_BOOTSTRAP, MAX_BOOTSTRAP = int(RULES["checks.bootstrap_samples"].lo), int(RULES["checks.bootstrap_samples"].hi)
CONFIDENCE = RULES["checks.confidence"]  # the run's own bound: a wider interval here could never fail



def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1)")
    return value


def _confidence(text: str) -> float:
    """--confidence held to the run's own rule (checks.confidence), named as that rule reads."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not CONFIDENCE.holds(value):
        raise argparse.ArgumentTypeError(f"must be {CONFIDENCE.text()}, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    d = CompareCfg()
    p = OneLineParser(prog="python -m hybridbench.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("baseline", type=Path, help="run directory of the baseline (e.g. main's nightly run), or "
                   "latest:RESULTS_ROOT for the newest passing main run of the candidate's experiment and load there")
    p.add_argument("candidate", type=Path, help="run directory of the candidate (e.g. the pull request's run)")
    p.add_argument("-o", "--output", help="the folder compare.md/compare.json go to, created with its parents when "
                   "missing (default CANDIDATE/compare)")
    p.add_argument("--ttft-regression", type=_fraction, default=d.ttft_regression,
                   help=f"fail when the whole CI of the mean TTFT change is above this (default {d.ttft_regression})")
    p.add_argument("--throughput-regression", type=_fraction, default=d.throughput_regression,
                   help=f"fail when the whole CI of the throughput change is below minus this "
                        f"(default {d.throughput_regression})")
    p.add_argument("--max-hit-rate-drop", type=_fraction, default=d.max_hit_rate_drop,
                   help=f"fail when the whole CI of the token hit rate change is below minus this "
                        f"(absolute, default {d.max_hit_rate_drop})")
    p.add_argument("--confidence", type=_confidence, default=d.confidence)
    p.add_argument("--bootstrap-samples", type=int, default=d.bootstrap_samples)
    p.add_argument("--seed", type=int, default=d.seed)
    return p


def _write_both(out: Path, data: object, text: str) -> None:
    """compare.json and compare.md, both or neither: an output directory that cannot take them (read-only, a
    directory where a file goes) is one line, exit 2, never a traceback beside a compare.json without its compare.md."""
    try:
        write_json_and_text_atomic(out / "compare.json", data, out / "compare.md", text)
    except IsADirectoryError as exc:
        raise ConfigError(f"{exc.filename}: is a directory; cannot write the comparison there") from None
    except OSError as exc:
        raise ConfigError(f"{out}: cannot write the comparison ({exc.strerror or exc})") from None


def _output_problem(out: str) -> str | None:
    """The -o folder must be creatable, and compare.json/compare.md in it writable files."""
    if problem := output_problem(out, folder=True):
        return problem
    return next((f"cannot write the comparison: {p}" for name in ("compare.json", "compare.md")
                 if Path(out).is_dir() and (p := output_problem(Path(out) / name))), None)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not MIN_BOOTSTRAP <= args.bootstrap_samples <= MAX_BOOTSTRAP:
        print(f"error: --bootstrap-samples must be in [{MIN_BOOTSTRAP}, {MAX_BOOTSTRAP}]", file=sys.stderr)
        return 2
    if args.output is not None:  # checked before the runs are read: a refusal never comes after the work
        if problem := _output_problem(args.output):
            print(f"error: -o: {visible(problem)}", file=sys.stderr)
            return 2
        args.output = Path(args.output)
    cfg = CompareCfg(args.ttft_regression, args.throughput_regression, args.max_hit_rate_drop, args.confidence,
                     args.bootstrap_samples, args.seed)
    try:
        if str(args.baseline).startswith("latest:"):
            from hybridbench.results.store import latest_passing_main  # noqa: PLC0415 - the results extra

            root = str(args.baseline)[len("latest:"):]
            if not root.strip():  # Path("") is the current directory: never search where the user did not point
                raise ConfigError("baseline: latest: names no results root; give latest:RESULTS_ROOT")
            args.baseline = latest_passing_main(Path(root), read_run(args.candidate))
            print(f"baseline: {visible(args.baseline)}", file=sys.stderr)
        base, cand = load_run(args.baseline), load_run(args.candidate)
        for role, side in (("baseline", base), ("candidate", cand)):
            refuse_incomplete(side.run, role)
        cmp = compare_runs(base, cand, cfg)
        out = args.output or args.candidate / "compare"
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{out}: cannot create the output directory ({exc.strerror or exc})") from None
        # Runs older than their redaction may carry a secret in a detail: the one redaction applies here too.
        # The run directories and the command ride along, so a dashboard can draw both runs and show how to redo it.
        given = sys.argv[1:] if argv is None else argv
        command = " ".join(["python", "-m", "hybridbench.compare", *(shlex.quote(a) for a in redact(list(given)))])
        # Where each side's verdict comes from (a re-scored run, checks off): shown beside the comparison.
        # A run without bundle.json (compared from its records alone) has no verdict to mark.
        marks = {f"{side}_marks": list(verdict_marks(r.run)) if r.run.bundle is not None else []
                 for side, r in (("base", base), ("candidate", cand))}
        # Each side's bundle run id: a directory later overwritten by another run is not drawn as the one compared.
        ids = {f"{side}_run_id": r.run.bundle.run_id if r.run.bundle is not None else ""
               for side, r in (("base", base), ("candidate", cand))}
        # Each run's own verdict: a PR summary must not read "pass" over a pull request whose own checks failed.
        own = {f"{side}_verdict": r.run.bundle.verdict if r.run.bundle is not None else ""
               for side, r in (("base", base), ("candidate", cand))}
        data = {**comparison_json(cmp), "base_dir": str(args.baseline.resolve()),
                "candidate_dir": str(args.candidate.resolve()), "command": command, **marks, **ids, **own}
        # The secrets are the runs' own (their configs): compare.json's field names are not config keys (its
        # config_changes rows have a "key" field, which redact_config would mask as if it were an API key).
        secrets = secret_values(base.run.plan.config) | secret_values(cand.run.plan.config)
        # compare.md shows run text escaped as Markdown: a secret is masked in the form it is written there too.
        text = scrub(render_comparison(cmp), md_forms(secrets))
        _write_both(out, scrub_obj(data, secrets), text)
    except ConfigError as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return exc.exit_code
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a record or bundle of the wrong shape
        print(f"error: malformed run files ({type(exc).__name__}: {visible(str(exc)[:200])})", file=sys.stderr)
        return 2
    print(text)
    for role, key in (("baseline", "base_marks"), ("candidate", "candidate_marks")):
        if marks[key]:
            print(f"note: the {role}'s verdict is marked: {visible('; '.join(marks[key]))}", file=sys.stderr)
    print(f"comparison: {out}", file=sys.stderr)
    return 0 if cmp.verdict == "pass" else 1  # fail, or inconclusive: never a pass


if __name__ == "__main__":
    sys.exit(quiet_on_closed_stdout(main))

"""How often the suite's verdicts are wrong on this machine: N A/A runs and N runs with a planted slowdown.

An A/A run (``+experiment=noise``) compares the baseline arm with a copy of itself: it should pass, and the
share that does not (fail or inconclusive) is the false-fail rate. A planted run
(``+experiment=noise noise.planted_slowdown=0.25``) makes the copy's reference server add 25% to every prefill
it computes: its ttft check should fail, and the share that does not (pass or inconclusive) is the false-pass
rate (the strict share that *passed* is reported beside it). Runs alternate A/A, planted, A/A, ... so drift on
the machine hits both kinds alike; run i uses ``seed=i`` (another workload draw and arrival order each time, since
the same seed on a modelled clock would only repeat one run N times).

Each run's verdict is read from its bundle.json (``verdict`` and the ttft check rows), cross-checked with its exit
code (0 pass, 1 fail or inconclusive); a run that exited 2 or 3, or left no bundle, is an error and counts in
neither rate. The machine (CPU model, cores, load average before and after), the commit and the exact commands go
in the output.

    python benchmarks/verdict_power.py --runs 20 [--planted 0.25] [--out DIR] [--json FILE] [--repo CHECKOUT]
                                       [-- OVERRIDE ...]
    python benchmarks/verdict_power.py --recount DIR     # the tally of runs already in DIR (its ledger.jsonl)
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from whole_command import checkout, count, folder, positive  # a sibling: run as a script

from hybridbench.errors import OneLineParser
from workloads.atomic_file import output_problem

ROOT = Path(__file__).resolve().parents[1]
Kind = Literal["aa", "planted"]
Outcome = Literal["pass", "fail", "inconclusive", "error"]


@dataclass(frozen=True, slots=True)
class RunResult:
    kind: Kind
    index: int
    exit_code: int | None
    outcome: Outcome  # aa: the run's verdict; planted: its ttft rows' (fail if any ttft row failed)
    detail: str  # why: the ttft rows, or the error
    seconds: float = 0.0


def classify(kind: Kind, bundle: dict[str, Any] | None, exit_code: int | None) -> tuple[Outcome, str]:
    """One run's outcome from its bundle.json and exit code.

    A/A: ``pass`` only when the run's verdict is pass (every check passed, exit 0). Planted: ``fail`` when a ttft
    row failed (the planted slowdown was caught), ``pass`` when every ttft row passed, else ``inconclusive``. A run
    with no bundle, an exit code other than 0/1, or a verdict its exit code contradicts is an ``error``."""
    if bundle is None:
        return "error", f"no bundle.json (exit {exit_code})"
    verdict = str(bundle.get("verdict", ""))
    if exit_code not in (0, 1):
        return "error", f"exit {exit_code} ({verdict or 'no verdict'})"
    if (exit_code == 0) != (verdict == "pass"):
        return "error", f"exit {exit_code} contradicts verdict {verdict!r}"
    ttft = [c for c in bundle.get("checks", []) if isinstance(c, dict) and c.get("check") == "ttft"]
    shown = "; ".join(f"ttft {c.get('workload')} {c.get('arm')} {c.get('status')} {c.get('detail', '')}"
                      for c in ttft) or "no ttft row"
    if kind == "aa":
        if verdict == "pass":
            return "pass", shown
        return ("fail" if verdict == "fail" else "inconclusive"), \
            f"verdict {verdict}: " + "; ".join(f"{c.get('check')} {c.get('workload')} {c.get('arm')} {c.get('status')}"
                                               for c in bundle.get("checks", [])
                                               if isinstance(c, dict) and c.get("status") != "pass")
    statuses = {c.get("status") for c in ttft}
    if "fail" in statuses:
        return "fail", shown
    if ttft and statuses == {"pass"}:
        return "pass", shown
    return "inconclusive", shown


@dataclass(frozen=True, slots=True)
class Tally:
    kind: Kind
    runs: int  # counted: errors excluded
    passed: int
    failed: int
    inconclusive: int
    errors: int

    @property
    def wrong(self) -> int:
        """A/A: not passing (false fails); planted: not failing (false passes, inconclusive included)."""
        return self.runs - (self.passed if self.kind == "aa" else self.failed)

    @property
    def rate(self) -> float:
        return self.wrong / self.runs if self.runs else float("nan")


def tally(kind: Kind, results: Sequence[RunResult]) -> Tally:
    mine = [r for r in results if r.kind == kind]
    count = {o: sum(1 for r in mine if r.outcome == o) for o in ("pass", "fail", "inconclusive", "error")}
    return Tally(kind, len(mine) - count["error"], count["pass"], count["fail"], count["inconclusive"],
                 count["error"])


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):  # no /proc on macOS: platform.processor() below
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu_model": model or platform.processor() or "unknown", "cores": os.cpu_count(),
            "cores_usable": affinity, "load_average": [round(v, 2) for v in os.getloadavg()],
            "python": platform.python_version(), "platform": platform.platform()}


def commit(repo: Path = ROOT) -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
        return out.stdout.strip()

    sha = git("rev-parse", "HEAD")
    return f"{sha}{' (dirty)' if git('status', '--porcelain', '--untracked-files=no') else ''}"


def command(kind: Kind, index: int, planted: float, run_dir: Path, extra: Sequence[str]) -> list[str]:
    argv = [sys.executable, "-m", "hybridbench", "+experiment=noise", f"seed={index}"]
    if kind == "planted":
        argv.append(f"noise.planted_slowdown={planted}")
    return [*argv, *extra, f"hydra.run.dir={run_dir}"]


def _read_bundle(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "bundle.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_one(kind: Kind, index: int, planted: float, out: Path, *, extra: Sequence[str], repo: Path = ROOT) -> RunResult:
    run_dir = out / f"{kind}-{index:03d}"
    argv = command(kind, index, planted, run_dir, extra)
    started = time.monotonic()
    # The checkout measured is ``repo``'s, server included (PYTHONPATH first), whatever the interpreter has installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(repo), os.environ.get("PYTHONPATH"))))}
    with (out / f"{kind}-{index:03d}.log").open("w") as log:
        code = subprocess.run(argv, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    outcome, detail = classify(kind, _read_bundle(run_dir), code)
    return RunResult(kind, index, code, outcome, detail, round(time.monotonic() - started, 1))


def recount(out: Path) -> list[RunResult]:
    """The runs of an earlier invocation, re-classified from their saved bundles and the ledger's exit codes."""
    results = []
    for line in (out / "ledger.jsonl").read_text().splitlines():
        row = json.loads(line)
        kind: Kind = row["kind"]
        outcome, detail = classify(kind, _read_bundle(out / f"{kind}-{row['index']:03d}"), row["exit_code"])
        results.append(RunResult(kind, row["index"], row["exit_code"], outcome, detail, row.get("seconds", 0.0)))
    return results


def render(results: Sequence[RunResult], meta: dict[str, Any]) -> str:
    aa, pl = tally("aa", results), tally("planted", results)
    lines = [f"commit `{meta.get('commit', '')}` · {meta.get('machine', {}).get('cpu_model', '')} · "
             f"{meta.get('machine', {}).get('cores_usable', '')} usable core(s) · load average before "
             f"{meta.get('load_before', '')}, after {meta.get('load_after', '')}", "",
             "| runs | counted | pass | fail | inconclusive | error | wrong | rate |",
             "|---|---|---|---|---|---|---|---|"]
    for t, label in ((aa, "A/A (false-fail: not pass)"), (pl, f"planted +{meta.get('planted', 0.25):.0%} "
                                                               "(false-pass: ttft not fail)")):
        rate = "n/a" if t.runs == 0 else f"{t.rate:.1%} ({t.wrong}/{t.runs})"
        lines.append(f"| {label} | {t.runs} | {t.passed} | {t.failed} | {t.inconclusive} | {t.errors} | "
                     f"{t.wrong} | {rate} |")
    strict = pl.passed / pl.runs if pl.runs else float("nan")
    lines += ["", f"planted runs whose ttft *passed* (strict false pass): {pl.passed}/{pl.runs}"
              + ("" if pl.runs == 0 else f" = {strict:.1%}")]
    secs = [r.seconds for r in results if r.seconds]
    if secs:
        lines.append(f"time per run: mean {sum(secs) / len(secs):.0f} s, max {max(secs):.0f} s, "
                     f"total {sum(secs) / 60:.1f} min")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=count(1), default=20, help="runs of each kind (A/A and planted)")
    parser.add_argument("--planted", type=positive, default=0.25, help="noise.planted_slowdown of the planted runs")
    parser.add_argument("--out", type=Path, help="where the runs go (default results/runs/verdict-power-<time>)")
    parser.add_argument("--json", type=Path, help="also write the tally and every run's outcome here")
    parser.add_argument("--repo", type=checkout, default=ROOT, help="the checkout to measure (default: this one)")
    parser.add_argument("--recount", type=folder, help="tally the runs saved in this --out directory; run nothing")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (after --)")
    args = parser.parse_args(argv)
    if args.recount is not None:
        if not (args.recount / "ledger.jsonl").is_file():
            parser.error(f"argument --recount: {args.recount}/ledger.jsonl: no such file")
        meta_path = args.recount / "meta.json"
        saved = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        print(render(recount(args.recount), saved))
        return 0
    out = args.out or ROOT / "results" / "runs" / f"verdict-power-{time.strftime('%Y%m%d-%H%M%S')}"
    for flag, path, is_folder in (("--out", out, True), ("--json", args.json, False)):  # before hours of runs
        if path is not None and (problem := output_problem(path, folder=is_folder)):
            parser.error(f"argument {flag}: {problem}")
    out.mkdir(parents=True, exist_ok=True)
    repo = args.repo.resolve()
    meta: dict[str, Any] = {"commit": commit(repo), "machine": machine(), "planted": args.planted, "runs": args.runs,
                            "overrides": list(args.overrides), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                        time.gmtime()),
                            "commands": [" ".join(command(k, 0, args.planted, Path("DIR"), args.overrides)[1:])
                                         for k in ("aa", "planted")]}
    meta["load_before"] = meta["machine"]["load_average"]
    results: list[RunResult] = []
    with (out / "ledger.jsonl").open("a") as ledger:
        for i in range(args.runs):
            kinds: tuple[Kind, ...] = ("aa", "planted")
            for kind in kinds:
                r = run_one(kind, i, args.planted, out, extra=args.overrides, repo=repo)
                results.append(r)
                ledger.write(json.dumps(asdict(r)) + "\n")
                ledger.flush()
                print(f"{kind} {i}: {r.outcome} (exit {r.exit_code}, {r.seconds:.0f} s) {r.detail[:160]}",
                      file=sys.stderr, flush=True)
    meta["load_after"] = [round(v, 2) for v in os.getloadavg()]
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    text = render(results, meta)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps({**meta, "aa": asdict(tally("aa", results)),
                                         "planted_tally": asdict(tally("planted", results)),
                                         "results": [asdict(r) for r in results]}, indent=2))
    print(f"runs: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

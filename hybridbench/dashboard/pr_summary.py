"""``python -m hybridbench.dashboard.pr_summary COMPARE_JSON --png-url URL --site-url URL [--append FILE]``: the
Markdown a pull-request job puts in its summary (``$GITHUB_STEP_SUMMARY``) or a PR comment: the verdict line
first (the worst of the comparison's and the pull request's own run's), what it rests on, the verdicts not passed,
then the PR summary PNG and a link to the whole site. The standard library alone runs it (the publish job installs
nothing).

GitHub shows an image in a job summary or comment only from an https URL: it strips ``data:`` URIs and cannot
reach a file on the runner. ci/publish_png.sh commits the PNG to an assets branch and prints such a URL; without
one (a private repository, a push refused) the summary says where the PNG is instead of showing a broken image.
Exit 2 with one line for bad input.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridbench.errors import ConfigError, OneLineParser
from hybridbench.report.compare_schema import COMPARE_SCHEMA_VERSION, current_verdict, unbacked_pass, worst_verdict
from hybridbench.report.md_text import md_code, md_text
from workloads.closed_stdout import quiet_on_closed_stdout

__all__ = ["RunsNow", "main", "runs_now", "summary_markdown"]


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"{path}: not JSON") from None
    # A run's bundle.json has a verdict too: read as a comparison it printed "PASS ... 0 verdict(s)" for nothing.
    if not isinstance(data, dict) or not isinstance(data.get("verdict"), str) or not isinstance(
            data.get("deltas"), list) or not all(isinstance(data.get(k), str) for k in ("base", "candidate")):
        raise ConfigError(f"{path}: not a compare.json (needs a verdict, a list of deltas, base and candidate)")
    if data.get("schema_version") != COMPARE_SCHEMA_VERSION:
        raise ConfigError(f"{path}: compare.json schema_version {data.get('schema_version')!r}, this reader takes "
                          f"{COMPARE_SCHEMA_VERSION}")
    if unbacked_pass(data["verdict"], (str(d.get("status")) for d in data["deltas"] if isinstance(d, dict))):
        raise ConfigError(f"{path}: verdict pass with no passing verdict row; compare never writes that")
    return data


def _https(flag: str, url: str) -> str:
    if url and not url.startswith("https://"):
        raise ConfigError(f"{flag}: {url[:40]!r} is not an https URL (GitHub shows no data: or file URL)")
    return url


_cell, _code = md_text, md_code


@dataclass(frozen=True, slots=True)
class RunsNow:
    """The compared directories as they are now: those that hold another run than compare read, and the own
    verdict (with its re-scoring's overrides) of each run still there — re-scored since, its verdict is not the
    one compare.json recorded, and the dashboard shows the run as it is now."""

    replaced: tuple[str, ...] = ()
    verdicts: Mapping[str, str] = field(default_factory=dict)  # side (base | candidate) -> the run's verdict now
    rescored: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # side -> its re-scoring's overrides


def _bundle(place: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((place / "bundle.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def runs_now(path: Path, cmp: Mapping[str, Any]) -> RunsNow:
    """Each compared run directory found here (compare.json records both bundles' run ids): the directory
    recorded, and for the candidate the one compare.json sits in by default (RUN/compare/compare.json: an artifact
    downloaded elsewhere keeps that layout)."""
    replaced: list[str] = []
    verdicts: dict[str, str] = {}
    rescored: dict[str, tuple[str, ...]] = {}
    for side, role in (("base", "baseline"), ("candidate", "candidate")):
        pinned, recorded = cmp.get(f"{side}_run_id"), cmp.get(f"{side}_dir")
        if not isinstance(pinned, str) or not pinned or not isinstance(recorded, str) or not recorded:
            continue
        places = [Path(recorded)]
        if side == "candidate" and path.parent.name == "compare" and path.parent.parent.name == Path(recorded).name:
            places.insert(0, path.parent.parent)
        for place in places:
            bundle = _bundle(place)
            if bundle is None:
                continue
            now = bundle.get("run_id")
            if isinstance(now, str) and now != pinned:
                replaced.append(f"{role} {place} now holds another run ({now[:12] or 'unfinished'}; compared "
                                f"{pinned[:12]})")
            elif now == pinned and isinstance(verdict := bundle.get("verdict"), str) and verdict:
                verdicts[side] = verdict
                again = bundle.get("rescored")
                if isinstance(again, dict):
                    overrides = again.get("overrides")
                    rescored[side] = tuple(str(o) for o in overrides) if isinstance(overrides, list) else ()
            break
    return RunsNow(tuple(replaced), verdicts, rescored)


def summary_markdown(cmp: Mapping[str, Any], *, png_url: str, site_url: str, png_name: str,
                     now: RunsNow | None = None) -> str:
    """The verdict line first: the worst of the comparison's verdict, its rows (a hand-edited verdict does not
    outrank them), the candidate's own run as it is now (a pull request whose own checks failed is not a pass;
    one re-scored since the comparison is judged by its new verdict, as the dashboard shows it) and runs since
    replaced (a pass over them is inconclusive); then why, each on its own line."""
    now = now or RunsNow()
    replaced = now.replaced
    deltas = [d for d in cmp.get("deltas", []) if isinstance(d, Mapping)]
    counts = Counter(str(d.get("status")) for d in deltas)
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    compared = str(cmp["verdict"])
    recorded = {side: str(cmp.get(f"{side}_verdict") or "") for side in ("base", "candidate")}
    own = {side: current_verdict(now.verdicts[side], recorded[side], now.rescored.get(side, ()))
           if side in now.verdicts else recorded[side] for side in recorded}
    verdict = worst_verdict(compared, *(s for s in counts if s in ("fail", "inconclusive")), own["candidate"],
                     *(["inconclusive"] if replaced else []))
    lines = [f"**hybridbench verdict: {_cell(verdict).upper()}** · candidate {_code(cmp.get('candidate'))} against "
             f"baseline {_code(cmp.get('base'))} · {len(deltas)} verdict(s): {_cell(tally) or 'none'}", ""]
    notes = []
    if verdict != compared:
        notes.append(f"The comparison alone said {_cell(compared).upper()}.")
    for side, role in (("candidate", "The pull request's own run"), ("base", "The baseline's own run")):
        if own[side] and own[side] != "pass":
            notes.append(f"{role}: **{_cell(own[side]).upper()}** (its checks; its report.md says which).")
        if side in now.verdicts and own[side] != recorded[side]:
            how = ("re-scored since the comparison" + (f": {' '.join(now.rescored[side])}" if now.rescored[side]
                                                       else "")) if side in now.rescored else "changed since"
            notes.append(f"{role}'s verdict is now {_cell(own[side]).upper()} ({_cell(how)}); compare recorded "
                         f"{_cell(recorded[side] or 'none').upper()}.")
        marks = cmp.get(f"{side}_marks")
        if isinstance(marks, list) and marks:
            notes.append(f"{role}'s verdict is marked: " + "; ".join(_cell(m) for m in marks) + ".")
    notes += [f"Since replaced: {_cell(r)}: this comparison is not of what is there now." for r in replaced]
    not_compared = cmp.get("not_compared")
    if isinstance(not_compared, list) and not_compared:
        notes.append("**Not compared**: " + "; ".join(_cell(n) for n in not_compared) + ".")
    if cmp.get("modelled"):
        notes.append(f"**Modelled** (engine {_code(cmp.get('engine'))}): times come from a cost model, not a GPU.")
    if notes:
        lines += [f"- {n}" for n in notes] + [""]
    unpassed = [d for d in deltas if d.get("status") in ("fail", "inconclusive")]
    if unpassed:
        lines += ["| workload | arm | metric | change (CI) | verdict |", "|---|---|---|---|---|"]
        lines += [f"| {_cell(d.get('workload'))} | {_cell(d.get('arm'))} | {_cell(d.get('metric'))} | "
                  f"{_cell(d.get('detail', ''))} | {_cell(d.get('status'))} |" for d in unpassed]
        lines.append("")
    site = f"[the dashboard]({site_url})" if site_url else "the dashboard artifact"
    if png_url:
        image = f"![hybridbench PR summary: {_cell(verdict)}]({png_url})"
        lines.append(f"[{image}]({site_url})" if site_url else image)
    else:
        lines.append(f"The PR summary PNG ({_code(png_name)}) has no public URL: it is in {site}.")
    lines += ["", f"PR page with both runs' TTFT CDFs per arm, run pages, trends: {site} (open `index.html`)."]
    if cmp.get("command"):
        lines += ["", _code(cmp["command"])]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineParser(prog="python -m hybridbench.dashboard.pr_summary",
                                description=__doc__.split("\n")[0])
    p.add_argument("compare", type=Path, help="a compare.json (python -m hybridbench.compare writes it)")
    p.add_argument("--png-url", default="", help="https URL of the summary PNG (ci/publish_png.sh prints one)")
    p.add_argument("--site-url", default="", help="where the whole site is (the site artifact's URL)")
    p.add_argument("--png-name", default="summary-pr.png", help="the PNG's name in the site, named when no URL")
    p.add_argument("--append", type=Path, help="append to this file (the job's $GITHUB_STEP_SUMMARY) "
                                               "instead of printing")
    args = p.parse_args(argv)
    try:
        cmp = _read(args.compare)
        text = summary_markdown(cmp, png_url=_https("--png-url", args.png_url),
                                site_url=_https("--site-url", args.site_url), png_name=args.png_name,
                                now=runs_now(args.compare, cmp))
        if args.append is None:
            sys.stdout.write(text)
        else:
            with args.append.open("a", encoding="utf-8") as fh:
                fh.write(text)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename or args.append}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(quiet_on_closed_stdout(main))

"""``python -m hybridbench.dashboard.pr_summary COMPARE_JSON --png-url URL --site-url URL [--append FILE]``: the
Markdown a pull-request job puts in its summary (``$GITHUB_STEP_SUMMARY``) or a PR comment: the verdict line
first, the failed verdicts, then the PR summary PNG and a link to the whole site.

GitHub shows an image in a job summary or comment only from an https URL: it strips ``data:`` URIs and cannot
reach a file on the runner. ci/publish_png.sh commits the PNG to an assets branch and prints such a URL; without
one (a private repository, a push refused) the summary says where the PNG is instead of showing a broken image.
Exit 2 with one line for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybridbench.errors import ConfigError
from hybridbench.report.compare_schema import COMPARE_SCHEMA_VERSION
from workloads.closed_stdout import quiet_on_closed_stdout

__all__ = ["main", "summary_markdown"]


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
    if data["verdict"] == "pass" and not any(isinstance(d, dict) and d.get("status") == "pass" for d in data["deltas"]):
        raise ConfigError(f"{path}: verdict pass with no passing verdict row; compare never writes that")
    return data


def _https(flag: str, url: str) -> str:
    if url and not url.startswith("https://"):
        raise ConfigError(f"{flag}: {url[:40]!r} is not an https URL (GitHub shows no data: or file URL)")
    return url


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary_markdown(cmp: Mapping[str, Any], *, png_url: str, site_url: str, png_name: str) -> str:
    deltas = [d for d in cmp.get("deltas", []) if isinstance(d, Mapping)]
    counts = Counter(str(d.get("status")) for d in deltas)
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    lines = [f"**hybridbench verdict: {_cell(cmp['verdict']).upper()}** · candidate `{_cell(cmp.get('candidate'))}` "
             f"against baseline `{_cell(cmp.get('base'))}` · {len(deltas)} verdict(s): {tally or 'none'}", ""]
    failed = [d for d in deltas if d.get("status") == "fail"]
    if failed:
        lines += ["| workload | arm | metric | change (CI) |", "|---|---|---|---|"]
        lines += [f"| {_cell(d.get('workload'))} | {_cell(d.get('arm'))} | {_cell(d.get('metric'))} | "
                  f"{_cell(d.get('detail', ''))} |" for d in failed]
        lines.append("")
    site = f"[the dashboard]({site_url})" if site_url else "the dashboard artifact"
    if png_url:
        image = f"![hybridbench PR summary: {_cell(cmp['verdict'])}]({png_url})"
        lines.append(f"[{image}]({site_url})" if site_url else image)
    else:
        lines.append(f"The PR summary PNG (`{png_name}`) has no public URL: it is in {site}.")
    lines += ["", f"PR page with both runs' TTFT CDFs per arm, run pages, trends: {site} (open `index.html`)."]
    if cmp.get("command"):
        lines += ["", f"`{_cell(cmp['command'])}`"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hybridbench.dashboard.pr_summary",
                                description=__doc__.split("\n")[0])
    p.add_argument("compare", type=Path, help="a compare.json (python -m hybridbench.compare writes it)")
    p.add_argument("--png-url", default="", help="https URL of the summary PNG (ci/publish_png.sh prints one)")
    p.add_argument("--site-url", default="", help="where the whole site is (the site artifact's URL)")
    p.add_argument("--png-name", default="summary-pr.png", help="the PNG's name in the site, named when no URL")
    p.add_argument("--append", type=Path, help="append to this file (the job's $GITHUB_STEP_SUMMARY) "
                                               "instead of printing")
    args = p.parse_args(argv)
    try:
        text = summary_markdown(_read(args.compare), png_url=_https("--png-url", args.png_url),
                                site_url=_https("--site-url", args.site_url), png_name=args.png_name)
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

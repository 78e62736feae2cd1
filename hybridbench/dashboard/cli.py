"""``python -m hybridbench.dashboard RESULTS_DIR -o SITE_DIR [--png]``: a static site that works offline from
file:// (no CDN, no server, data in each page): runs, trends, pull-request comparisons.

``--png`` also renders each comparison's summary to ``summary-<name>.png`` (for a PR comment) with a local
Chromium (``--chromium``, default /usr/bin/chromium). Exit 2 with one line for bad input.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from hybridbench.dashboard.site import build_site
from hybridbench.errors import ConfigError

__all__ = ["main", "screenshot"]


def screenshot(chromium: Path, page: Path, png: Path, *, width: int = 1100, height: int = 700) -> None:
    """One PNG of a local page, by headless Chromium with no network of its own (nothing to fetch anyway)."""
    cmd = [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", "--disable-sync", "--hide-scrollbars",
           f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0 or not png.is_file():
        raise ConfigError(f"--png: {chromium} could not render {page.name}: "
                          f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hybridbench.dashboard", description=__doc__.split("\n")[0])
    p.add_argument("root", type=Path, help="a results root: run directories (and their compare/ output) below it")
    p.add_argument("-o", "--out", type=Path, required=True, help="the site's directory")
    p.add_argument("--png", action="store_true", help="also render each comparison summary to a PNG")
    p.add_argument("--chromium", type=Path, default=Path("/usr/bin/chromium"))
    args = p.parse_args(argv)
    try:
        if args.png and not args.chromium.is_file():
            raise ConfigError(f"--chromium: {args.chromium} does not exist (apt-get install chromium)")
        site = build_site(args.root, args.out)
        for line in site.skipped:
            print(line, file=sys.stderr)
        if args.png:
            for page in site.compare_pages:
                name = page.removeprefix("compare-").removesuffix(".html")
                screenshot(args.chromium, args.out / f"summary-{name}.html", args.out / f"summary-{name}.png")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{args.out / 'index.html'}: {len(site.pages)} page(s)")
    return 0

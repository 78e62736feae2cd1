"""``python -m hybridbench.dashboard RESULTS_DIR -o SITE_DIR [--png]``: a static site that works offline from
file:// (no CDN, no server, data in each page): runs, trends, pull-request comparisons.

``--png`` also renders each comparison's summary to ``summary-<name>.png`` (for a PR comment) with a local
Chromium (``--chromium``, default /usr/bin/chromium). Exit 2 with one line for bad input.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hybridbench.dashboard.site import build_site
from hybridbench.errors import ConfigError, OneLineParser
from hybridbench.results.text import visible
from workloads.atomic_file import output_problem

__all__ = ["main", "screenshot"]


PNG_TIMEOUT_S = 45  # one summary page renders in ~2 s; a page that hangs Chromium must not hang the CI job

# The network off: every request goes to a proxy at a closed port (loopback included), DNS resolves nothing, and
# Chromium's own background fetches are off. The page's Content-Security-Policy already forbids any request.
NO_NETWORK = ("--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
              "--host-resolver-rules=MAP * ~NOTFOUND", "--disable-background-networking",
              "--disable-component-update", "--disable-domain-reliability", "--no-pings", "--disable-sync",
              "--disable-extensions", "--no-first-run", "--disable-default-apps", "--metrics-recording-only")


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Every process of the browser's session gone, the browser itself reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=10)


def _exit_on_signals() -> dict[signal.Signals, Any]:
    """SIGTERM and SIGHUP raise SystemExit (128 + signal) for now; returns the handlers to put back. Only the main
    thread may set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGHUP)}


def screenshot(chromium: Path, page: Path, png: Path, *, width: int = 1100, height: int = 700,
               timeout_s: float = PNG_TIMEOUT_S) -> None:
    """One PNG of a local page, by headless Chromium with the network off and a bound on time; a failure is
    one line (ConfigError), never a traceback."""
    # Chromium's renderer, GPU and zygote processes outlive a killed browser process and keep writing into the
    # profile: the whole process group is killed, and only then is the profile removed.
    with tempfile.TemporaryDirectory(prefix="hybridbench-chromium-", ignore_cleanup_errors=True) as profile:
        cmd = [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", *NO_NETWORK, "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--timeout={int(timeout_s * 1000 * 0.6)}",
               f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri()]
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise ConfigError(f"--png: cannot run {chromium} ({exc.strerror or exc})") from None
        # The browser is outside our process group, so a CI job's cancel (SIGTERM to our group) would not reach
        # it: while it runs, such a signal ends this process through the `finally` that kills the browser's group.
        previous = _exit_on_signals()
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"--png: {chromium} did not render {page.name} within {timeout_s:.0f} s") from None
        finally:
            _kill_group(proc)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if proc.returncode != 0 or not png.is_file():
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"--png: {chromium} could not render {page.name}: {visible(last[:200])}")


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineParser(prog="python -m hybridbench.dashboard", description=__doc__.split("\n")[0])
    p.add_argument("root", type=Path, help="a results root: run directories (and their compare/ output) below it")
    p.add_argument("-o", "--out", required=True, help="the site's directory (created with its parents when missing)")
    p.add_argument("--png", action="store_true", help="also render each comparison summary to a PNG")
    p.add_argument("--chromium", type=Path, default=Path("/usr/bin/chromium"))
    args = p.parse_args(argv)
    try:
        if problem := output_problem(args.out, folder=True):
            raise ConfigError(f"-o: {problem}")
        args.out = Path(args.out)
        if args.png and not args.chromium.is_file():
            raise ConfigError(f"--chromium: {args.chromium} does not exist (apt-get install chromium)")
        site = build_site(args.root, args.out)
        for line in site.skipped:
            print(visible(line), file=sys.stderr)
        if args.png:
            for page in site.compare_pages:
                name = page.removeprefix("compare-").removesuffix(".html")
                screenshot(args.chromium, args.out / f"summary-{name}.html", args.out / f"summary-{name}.png")
    except ConfigError as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {visible(exc.filename or '')}: {visible(exc.strerror or exc)}", file=sys.stderr)
        return 2
    print(f"{args.out / 'index.html'}: {len(site.pages)} page(s)")
    return 0

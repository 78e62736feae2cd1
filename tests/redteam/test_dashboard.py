"""The dashboard over hostile run directories, its pages opened in Chromium: no planted script runs, no request
leaves the page, every page carries its Content-Security-Policy, nothing crashes the build, page names never
collide, and an old run's secrets stay out of every page; ``--png`` renders with the network off, within a bound."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile import SCRIPT, XSS, clean, cli, make_run, save, set_metric
from playwright.sync_api import Browser, sync_playwright

from hybridbench.dashboard.cli import screenshot
from hybridbench.errors import ConfigError

pytestmark = pytest.mark.redteam

CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")
SECRET = "hf_oldrunsecret0123456789"
DIR_XSS = "<img src=x onerror=window.__pwned=3>"  # a directory name holds no "/"


def _rename_workload(run: Path, new: str) -> None:
    """The workload renamed everywhere, its trial ids (``000-gsp-disabled-r0``) included: a record must be of a
    trial of the plan to be read."""
    for name in ("plan.json", "bundle.json", "records.jsonl"):
        path = run / name
        text = path.read_text().replace('"gsp"', json.dumps(new))
        path.write_text(re.sub(r'"(\d{3})-gsp-', lambda m: f"{json.dumps(m.group(1) + '-' + new)[:-1]}-", text))


def _hostile_bundle(b: dict[str, object]) -> None:
    prov = b["provenance"]
    prov["engine"]["version"] = XSS  # type: ignore[index]
    prov["git_sha"] = SCRIPT  # type: ignore[index]
    b["checks"][0]["detail"] = f"{XSS} key {SECRET}"  # type: ignore[index]
    b["verdict"] = 'pass" onmouseover="window.__pwned=4'


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("redteam") / f"results{DIR_XSS}"
    make_run(root, DIR_XSS, night=1, bundle=_hostile_bundle,
             plan=lambda p: p["config"].update(model={**p["config"]["model"], "name": SCRIPT},
                                               engine={**p["config"]["engine"], "hf_token": SECRET}))
    _rename_workload(root / DIR_XSS, XSS)
    make_run(root, "nightly/a", night=2, bundle=lambda b: b.update(verdict="fail"))
    make_run(root, "nightly_a", night=3)
    make_run(root, "bad-created", night=4, bundle=lambda b: b.update(created=XSS))
    make_run(root, "nan", night=5, bundle=set_metric(float("nan")))
    for name, data in (("list", [1, 2]), ("deltas", {"verdict": "pass", "deltas": "oops"}),
                       ("xss", {"verdict": XSS, "base": SCRIPT, "candidate": XSS, "deltas": [{"workload": XSS}],
                                "pairs": [], "base_dir": "/etc", "candidate_marks": [SCRIPT]})):
        (root / "cmp" / name / "compare").mkdir(parents=True)
        save(root / "cmp" / name / "compare" / "compare.json", data)
    out = root.parent / "site"
    proc = cli("hybridbench.dashboard", root, "-o", out)
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    return root, out, proc.stderr


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.is_file(), "Chromium is missing: bash tests/dashboard/install_chromium.sh"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def test_no_planted_script_runs_and_no_request_leaves_any_page(hostile_site: tuple[Path, Path, str],
                                                               browser: Browser) -> None:
    _, out, _ = hostile_site
    # The pages that hold planted text (each page loads 3.5 MB of plotly.js: the rest add time, not cover)
    pages = [out / "index.html", out / "trends.html", *out.glob("run-_img*.html"), *out.glob("*-cmp_xss*.html")]
    assert len(pages) == 5
    network: list[str] = []
    dialogs: list[str] = []

    def guard(route, request):  # type: ignore[no-untyped-def]
        if request.url.startswith("file://"):
            route.continue_()
        else:
            network.append(request.url)
            route.abort()

    for path in pages:
        page = browser.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.route("**/*", guard)
        page.goto(path.resolve().as_uri())
        page.wait_for_load_state("load")
        page.mouse.move(200, 200)
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.__pwned === undefined"), path.name
        assert network == [] and dialogs == [], (path.name, network, dialogs)
        if path.name.startswith("run-"):
            page.wait_for_selector(".main-svg", timeout=20_000)  # the hashed chart scripts did run
        page.close()


def test_every_string_is_escaped_and_every_page_has_its_policy(hostile_site: tuple[Path, Path, str]) -> None:
    _, out, _ = hostile_site
    for path in out.glob("*.html"):
        text = path.read_text()
        for planted in (XSS, SCRIPT, DIR_XSS, "onmouseover=\"window"):
            assert planted not in text, (path.name, planted)
        policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', text)
        assert policy, path.name
        csp = policy.group(1).replace("&#39;", "'")
        assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
        for body in re.findall(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", text, re.S):
            digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in csp, path.name
    run_page = next(out.glob("run-_img*.html")).read_text()
    assert "&lt;img src=x onerror=" in run_page and "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in run_page


def test_damaged_comparisons_and_bad_times_are_skipped_lines(hostile_site: tuple[Path, Path, str]) -> None:
    _root, out, err = hostile_site
    skipped = [ln for ln in err.splitlines() if ln.startswith("skipped")]
    assert any("cmp/list/compare/compare.json: not a compare.json (a JSON list" in ln for ln in skipped)
    assert any("cmp/deltas/compare/compare.json: not a compare.json (deltas must be" in ln for ln in skipped)
    assert any("bad-created" in ln and "is not an ISO 8601 time" in ln for ln in skipped)
    index = (out / "index.html").read_text()
    assert "bad-created" in index  # listed under Skipped, escaped
    xss = next(out.glob("compare-cmp_xss*.html")).read_text()
    assert "run directories not found" in xss  # base_dir=/etc is outside the root: never read


def test_colliding_run_names_get_their_own_pages(hostile_site: tuple[Path, Path, str]) -> None:
    _, out, _ = hostile_site
    plain = (out / "run-nightly_a.html").read_text()
    nested = [p for p in out.glob("run-nightly_a.*.html")]
    assert len(nested) == 1
    assert 'class="v-pass"' in plain.split('<p class="verdict-line">')[1][:200]
    assert 'class="v-fail"' in nested[0].read_text().split('<p class="verdict-line">')[1][:200]
    index = (out / "index.html").read_text()
    assert f'href="{nested[0].name}"' in index and 'href="run-nightly_a.html"' in index


def test_an_old_runs_secret_is_in_no_page(hostile_site: tuple[Path, Path, str]) -> None:
    _, out, _ = hostile_site
    for path in out.glob("*.html"):
        assert SECRET not in path.read_text(), path.name


def test_a_night_without_data_shows_as_such_on_trends(hostile_site: tuple[Path, Path, str]) -> None:
    _, out, _ = hostile_site
    assert ">no data</span>" in (out / "trends.html").read_text()


def test_an_empty_store_is_a_whole_site_saying_so(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    proc = cli("hybridbench.dashboard", tmp_path / "runs", "-o", tmp_path / "site")
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in (tmp_path / "site").iterdir()} == {"index.html", "trends.html", "plotly.min.js"}
    assert "no readable runs yet" in (tmp_path / "site" / "index.html").read_text()


def test_a_server_log_that_is_a_fifo_or_a_link_out_is_a_log_missing_never_a_hang(tmp_path: Path) -> None:
    """The usage chart read each arm's log with read_bytes: a FIFO there hung the build forever (the bundle and
    records were refused already). Now it, like a link out of the run, is a log missing."""
    import os

    run = make_run(tmp_path / "runs", "night")
    logs = run / "logs"
    logs.mkdir()
    os.mkfifo(logs / "server-disabled.log")
    (tmp_path / "elsewhere.log").write_text("[2026-11-01 03:00:00] Prefill batch, #new-seq: 1, token usage: 0.50\n")
    (logs / "server-branching.log").symlink_to(tmp_path / "elsewhere.log")
    proc = cli("hybridbench.dashboard", tmp_path / "runs", "-o", tmp_path / "site", timeout=60)
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    page = next((tmp_path / "site").glob("run-*.html")).read_text()
    assert "no server log" in page


def test_inconclusive_has_its_own_colour(hostile_site: tuple[Path, Path, str], browser: Browser,
                                        tmp_path: Path) -> None:
    from hybridbench.dashboard.html import Page, verdict_badge

    page_file = tmp_path / "badges.html"
    page_file.write_text(Page("badges", charts=False).add(*(verdict_badge(v) for v in (
        "pass", "fail", "inconclusive", "interrupted", "skip", "error"))).render())
    page = browser.new_page()
    page.goto(page_file.as_uri())
    colour = {v: page.evaluate(f"() => getComputedStyle(document.querySelector('.v-{v}')).color")
              for v in ("pass", "fail", "inconclusive", "interrupted", "skip", "error")}
    assert colour["inconclusive"] not in {c for v, c in colour.items() if v != "inconclusive"}


class _Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_png_renders_with_the_network_off(tmp_path: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = tmp_path / "leaky.html"  # no policy: the flags alone must keep the request in
        page.write_text(f'<html><body>hi<img src="http://127.0.0.1:{server.server_port}/leak">'
                        f'<img src="http://example.invalid/x"></body></html>')
        screenshot(CHROMIUM, page, tmp_path / "leaky.png", timeout_s=60)
        assert (tmp_path / "leaky.png").read_bytes()[:4] == b"\x89PNG"
        assert _Counter.hits == 0
    finally:
        server.shutdown()


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and text in cmdline:
            found.append(cmdline[:200])
    return found


def test_png_of_a_page_that_never_finishes_is_one_line_within_its_bound(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "hang.html"
    page.write_text("<html><body><script>for(;;){}</script></body></html>")
    profiles = tmp_path / "profiles"  # where the browser's profile is made: this test's own
    profiles.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(profiles))
    with pytest.raises(ConfigError, match=r"^--png: .* (did not render hang.html within 8 s|could not render)"):
        screenshot(CHROMIUM, page, tmp_path / "hang.png", timeout_s=8)
    # Nothing of the browser left: no process (renderers and zygotes included) and no profile.
    assert not _processes_mentioning(str(profiles)), _processes_mentioning(str(profiles))
    assert not list(profiles.iterdir())


def _clinging_browser(tmp_path: Path) -> Path:
    """A stand-in browser that hangs, with a helper process that keeps writing into its profile."""
    browser = tmp_path / "browser"
    browser.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in --user-data-dir=*) profile="${a#*=}";; esac; done\n'
                       'mkdir -p "$profile/Default"\n'
                       '( while :; do : > "$profile/Default/f$(date +%N)"; sleep 0.01; done ) &\n'
                       "sleep 600\n")
    browser.chmod(0o755)
    return browser


def test_a_cancelled_png_job_leaves_no_browser_behind(tmp_path: Path) -> None:
    """CI cancels a job by SIGTERM to the process group; the browser runs in a session of its own, so the
    dashboard must end it itself: exit 143, no browser process and no profile left."""
    browser, profiles = _clinging_browser(tmp_path), tmp_path / "profiles"
    profiles.mkdir()
    page = tmp_path / "page.html"
    page.write_text("<html></html>")
    code = ("import sys, tempfile; from pathlib import Path; tempfile.tempdir = sys.argv[1]; "
            "from hybridbench.dashboard.cli import screenshot; "
            "screenshot(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), timeout_s=120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(profiles), str(browser), str(page),
                             str(tmp_path / "page.png")], stderr=subprocess.PIPE, text=True)
    profile = str(profiles / "hybridbench-chromium-")  # the browser's argv, not the python's
    deadline = time.monotonic() + 30
    while not _processes_mentioning(profile) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_mentioning(profile), "the stand-in browser never started"
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert not _processes_mentioning(profile), _processes_mentioning(profile)
    assert not list(profiles.iterdir())


def test_png_kills_every_process_of_a_hung_browser_before_removing_its_profile(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A browser whose helper process outlives it and keeps writing into the profile (as Chromium's renderers
    do for a moment after their browser is killed): killing only the browser left the helper running and made
    removing the profile fail with "Directory not empty", a traceback instead of one line."""
    browser = _clinging_browser(tmp_path)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(profiles))
    page = tmp_path / "page.html"
    page.write_text("<html></html>")
    with pytest.raises(ConfigError, match=r"^--png: .* did not render page.html within 2 s$"):
        screenshot(browser, page, tmp_path / "page.png", timeout_s=2)
    assert not _processes_mentioning(str(profiles)), _processes_mentioning(str(profiles))
    assert not list(profiles.iterdir())


def test_a_secret_with_html_special_characters_is_masked_as_the_page_writes_it(tmp_path: Path) -> None:
    # Every page is scrubbed after rendering, where the secret is HTML-escaped: "hf_a&b'c" was written as
    # "hf_a&amp;b&#39;c" and matched no mask.
    secret = "hf_abc&def'0123456789"

    def plan(p: dict[str, object]) -> None:
        p["config"]["engine"]["hf_token"] = secret  # type: ignore[index]

    def bundle(b: dict[str, object]) -> None:
        b["checks"][0]["detail"] = f"leaked {secret}"  # type: ignore[index]

    make_run(tmp_path / "runs", "night", night=1, plan=plan, bundle=bundle)
    proc = cli("hybridbench.dashboard", tmp_path / "runs", "-o", tmp_path / "site")
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    page = next((tmp_path / "site").glob("run-*.html")).read_text()
    assert "leaked " in page and "0123456789" not in page

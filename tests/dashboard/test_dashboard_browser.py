"""The static dashboard in a real browser (Debian's Chromium driven by Playwright; no browser download): every
page loads from file:// with no console error and no network request, and the charts hold the expected series."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MAIN_RUNS, ROOT, harness
from playwright.sync_api import Browser, Page, sync_playwright

from hybridbench.records.server_log import parse_sglang_log_line
from hybridbench.results import read_records

CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")


@pytest.fixture(scope="module")
def site(results_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cmp = subprocess.run([sys.executable, "-m", "hybridbench.compare", str(results_root / "main-5"),
                          str(results_root / "pr-7")], capture_output=True, text=True, timeout=300, check=False,
                         cwd=ROOT)
    assert cmp.returncode == 0, cmp.stderr
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "hybridbench.dashboard", str(results_root), "-o", str(out), "--png",
                           "--chromium", str(CHROMIUM)], capture_output=True, text=True, timeout=600, check=False,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.is_file(), "Chromium is missing: bash tests/dashboard/install_chromium.sh"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def open_page(browser: Browser, path: Path) -> tuple[Page, list[str], list[str]]:
    """The page loaded from file://, with every console error and every non-file request it tried (blocked)."""
    page = browser.new_page()
    errors: list[str] = []
    network: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def guard(route, request):  # type: ignore[no-untyped-def]
        if request.url.startswith("file://"):
            route.continue_()
        else:
            network.append(request.url)
            route.abort()

    page.route("**/*", guard)
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, errors, network


def plots(page: Page) -> list[dict[str, object]]:
    """Each chart's title and series (name, point count), read from the live plotly objects."""
    return page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(d => ({
        title: (d.layout.title && (d.layout.title.text || d.layout.title)) || '',
        series: d.data.map(t => [t.name, (t.x || []).length])}))""")


def test_every_page_loads_offline_without_errors(site: Path, browser: Browser) -> None:
    pages = sorted(site.glob("*.html"))
    assert {"index.html", "trends.html"} <= {p.name for p in pages}
    assert len([p for p in pages if p.name.startswith("run-")]) == len(MAIN_RUNS) + 2  # + pr-7, old-schema
    for path in pages:
        page, errors, network = open_page(browser, path)
        assert errors == [], (path.name, errors)
        assert network == [], (path.name, network)
        if not path.name.startswith(("index", "summary")):
            page.wait_for_selector(".main-svg", timeout=20_000)  # plotly drew every chart
            assert plots(page), path.name
        page.close()


def test_index_lists_every_run_with_its_verdict_and_links(site: Path, browser: Browser) -> None:
    page, _, _ = open_page(browser, site / "index.html")
    rows = page.locator("table").first.locator("tbody tr")
    assert rows.count() == len(MAIN_RUNS) + 2
    text = page.inner_text("body")
    assert "pr-7" in text and "unfinished" in text and "corrupt" in text  # skipped ones are listed too
    page.click("text=main-1")
    assert page.url.endswith("run-main-1.html")


def test_run_page_charts_hold_one_series_per_arm_with_every_request(site: Path, browser: Browser,
                                                                  results_root: Path) -> None:
    page, _, _ = open_page(browser, site / "run-main-1.html")
    page.wait_for_selector(".main-svg")
    charts = {c["title"]: c["series"] for c in plots(page)}
    records = list(read_records(results_root / "main-1" / "records.jsonl"))
    ttft = charts["gsp: TTFT"]
    assert [name for name, _ in ttft] == ["disabled", "branching"]
    for name, points in ttft:
        assert points == sum(1 for r in records if r.arm == name and r.ttft_ms is not None)
    assert "$ python -m hybridbench +experiment=smoke engine=sim repeats=2" in page.inner_text("body")


def test_old_schema_run_renders(site: Path, browser: Browser) -> None:
    page, errors, _ = open_page(browser, site / "run-old-schema.html")
    page.wait_for_selector(".main-svg")
    assert errors == [] and plots(page)
    assert "resolved config: plan.json" in page.inner_text("body")  # it kept no command: where to look instead


def _keep_screenshot(page: Page, name: str, at: str = "") -> None:
    """HYBRIDBENCH_SCREENSHOTS=DIR keeps what the test saw (the docs' pictures are taken this way), from the
    top of the page or from the element ``at`` selects."""
    out = os.environ.get("HYBRIDBENCH_SCREENSHOTS")
    if out:
        page.set_viewport_size({"width": 1100, "height": 900})
        page.wait_for_timeout(500)  # responsive charts redraw to the new width
        if at:
            page.evaluate("sel => { document.querySelector(sel).scrollIntoView(); window.scrollBy(0, -40); }", at)
        page.screenshot(path=str(Path(out) / name), full_page=False)


def test_compare_page_puts_the_verdict_first_and_draws_both_runs(site: Path, browser: Browser) -> None:
    page, _, _ = open_page(browser, site / "compare-pr-7.html")
    page.wait_for_selector(".main-svg")
    _keep_screenshot(page, "dashboard-compare.png")
    first = page.locator(".verdict-line").first.inner_text()
    assert first.startswith("verdict pass")
    charts = plots(page)
    assert len(charts) == 2  # one per (workload, arm): both runs on each
    assert all([n.split(" · ")[0] for n, _ in c["series"]] == ["baseline", "candidate"] for c in charts)
    assert "python -m hybridbench.compare" in page.inner_text("body")
    png = site / "summary-pr-7.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_trends_page_marks_the_regression(site: Path, browser: Browser) -> None:
    page, _, _ = open_page(browser, site / "trends.html")
    page.wait_for_selector(".main-svg")
    _keep_screenshot(page, "dashboard-trends.png")
    table = page.locator("table").first.inner_text()
    assert "regression" in table
    nightly = [c for c in plots(page) if "gsp · mean_ttft_ms" in str(c["title"]) and
               all(n == len(MAIN_RUNS) for _, n in c["series"])]  # type: ignore[union-attr]
    assert nightly and [n for n, _ in nightly[0]["series"]] == ["branching", "disabled"]  # type: ignore[index]
    assert json.dumps(plots(page))  # serialisable: plain data, no functions


@pytest.fixture(scope="module")
def reference_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A site over one run of the reference engine (a real server process that logs SGLang's batch lines)."""
    root = tmp_path_factory.mktemp("ref-results")
    harness(root / "ref", "model=reference-tiny", engine="reference")
    out = tmp_path_factory.mktemp("ref-site")
    proc = subprocess.run([sys.executable, "-m", "hybridbench.dashboard", str(root), "-o", str(out)],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return root / "ref", out


def _usage_lines_in_log(run: Path, arm: str, field: str) -> int:
    """Counted straight from the saved log: the arm's trial's batch lines (its bundle's range) logging ``field``."""
    bundle = json.loads((run / "bundle.json").read_text())
    server = next(t["server"] for t in bundle["trials"] if t["arm"] == arm)
    first, end = server["log_lines"]
    lines = (run / server["log_file"]).read_text().split("\n")[first:end]
    return sum(1 for line in lines if f"{field}:" in line and (s := parse_sglang_log_line(line)) and s.timestamp)


def test_run_page_draws_server_usage_over_time_from_the_log(reference_site: tuple[Path, Path],
                                                            browser: Browser) -> None:
    run, site = reference_site
    page, errors, network = open_page(browser, site / "run-ref.html")
    page.wait_for_selector(".main-svg")
    _keep_screenshot(page, "dashboard-run.png", at="p.usage-source")
    assert errors == [] and network == []
    charts = {c["title"]: c["series"] for c in plots(page)}
    for field, title in (("token usage", "gsp: server token usage over time (first repeat)"),
                         ("mamba usage", "gsp: server mamba usage over time (first repeat)")):
        assert [name for name, _ in charts[title]] == ["disabled", "branching"]
        for arm, points in charts[title]:
            assert points == _usage_lines_in_log(run, arm, field) > 0, (title, arm)
    text = page.inner_text("body")
    assert "server usage from disabled: logs/server-disabled.log lines" in text
    assert "$ python -m hybridbench +experiment=smoke engine=reference repeats=2 model=reference-tiny" in text


def test_a_run_without_server_logs_says_so(site: Path, browser: Browser) -> None:
    for name in ("run-main-1.html", "run-old-schema.html"):
        page, errors, _ = open_page(browser, site / name)
        page.wait_for_selector(".main-svg")
        assert errors == []
        assert "server usage over time: no server log" in page.inner_text("body")
        assert not [c for c in plots(page) if "usage over time" in str(c["title"])]

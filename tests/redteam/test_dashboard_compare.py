"""The dashboard's pull-request comparisons against what a reviewer could misread: a comparison whose runs were
since replaced, what the index, the page and its PNG summary say of it."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from hostile import clean, cli, load, make_run, save, second_repeat, subprocess_cli

pytestmark = pytest.mark.redteam


def _compared(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "runs"
    base = second_repeat(make_run(root, "main", night=1))
    cand = second_repeat(make_run(root, "pr", night=2), stretch=1.02)
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    assert proc.returncode == 0 and load(cand / "compare" / "compare.json")["verdict"] == "pass", proc.stderr
    return root, base, cand


def _site(root: Path, out: Path) -> Path:
    proc = cli("hybridbench.dashboard", root, "-o", out)
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    return out


def _comparison_rows(index: str) -> list[str]:
    table = index.split("Pull-request comparisons", 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr><td><a href=\"compare-.*?</tr>", table)


def _verdict_line(page: str) -> str:
    return page.split('<p class="verdict-line">', 1)[1].split("</p>", 1)[0]


@pytest.mark.parametrize("replaced", ["main", "pr"])
def test_a_pass_over_a_directory_since_overwritten_is_inconclusive_on_the_index_and_the_summary(
        tmp_path: Path, replaced: str) -> None:
    # A newer nightly into runs/main, or the pull request re-run into runs/pr (compare/ left beside it): the index
    # and the summary PNG kept compare's green "pass" of runs no longer there; only the page's muted note said so.
    root, _, _ = _compared(tmp_path)
    fresh = _site(root, tmp_path / "fresh")
    (row,) = _comparison_rows((fresh / "index.html").read_text())
    assert '<span class="v-pass">pass</span>' in row.split("</td>")[1]
    bundle = load(root / replaced / "bundle.json")
    old = bundle["run_id"]
    bundle["run_id"] = uuid.uuid4().hex  # another run's bundle.json: what the harness writes into a reused directory
    save(root / replaced / "bundle.json", bundle)
    out = _site(root, tmp_path / "site")
    (row,) = _comparison_rows((out / "index.html").read_text())
    verdict = row.split("</td>")[1]
    assert "v-pass" not in verdict and '<span class="v-inconclusive">inconclusive</span>' in verdict, row
    role = "baseline" if replaced == "main" else "candidate"
    assert f"{role} {replaced} now holds another run ({bundle['run_id'][:12]}; compared {old[:12]})" in verdict
    for page in ("compare-pr.html", "summary-pr.html"):
        line = _verdict_line((out / page).read_text())
        assert line.startswith('verdict <span class="v-inconclusive">inconclusive</span>'), (page, line)
        assert "compare said pass of runs since replaced" in line


def test_a_fail_over_a_replaced_directory_stays_a_fail(tmp_path: Path) -> None:
    root, _, cand = _compared(tmp_path)
    cmp = load(cand / "compare" / "compare.json")
    cmp["verdict"] = "fail"
    save(cand / "compare" / "compare.json", cmp)
    bundle = load(root / "main" / "bundle.json")
    bundle["run_id"] = uuid.uuid4().hex
    save(root / "main" / "bundle.json", bundle)
    out = _site(root, tmp_path / "site")
    (row,) = _comparison_rows((out / "index.html").read_text())
    assert '<span class="v-fail">fail</span>' in row and "baseline main now holds another run" in row


def test_the_index_headings_are_headings_not_escaped_text(tmp_path: Path) -> None:
    # page.add() escapes a plain str: "<h2>Pull-request comparisons</h2>" showed as literal text.
    root, _, _ = _compared(tmp_path)
    (root / "broken").mkdir()
    (root / "broken" / "plan.json").write_text("{")
    index = (_site(root, tmp_path / "site") / "index.html").read_text()
    assert "&lt;h2&gt;" not in index
    assert "<h2>Pull-request comparisons</h2>" in index and "<h2>Skipped</h2>" in index


def _rescore_to_fail(run: Path) -> None:
    proc = cli("hybridbench.rescore", run, "checks.min_token_hit_rate=0.99")
    clean(proc)
    assert proc.returncode in (0, 1) and load(run / "bundle.json")["verdict"] == "fail", proc.stderr


@pytest.mark.parametrize("when", ["before compare", "after compare"])
def test_a_candidate_whose_own_run_failed_is_not_shown_passing(tmp_path: Path, when: str) -> None:
    # compare judges the two builds' figures, not the pull request's own checks: its pass stood green on the index
    # and the PNG beside a candidate run that failed (before compare: compare.json now records it; re-scored after:
    # the run as it is now).
    root = tmp_path / "runs"
    base = second_repeat(make_run(root, "main", night=1))
    cand = second_repeat(make_run(root, "pr", night=2), stretch=1.02)
    if when == "before compare":
        _rescore_to_fail(cand)
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    cmp = load(cand / "compare" / "compare.json")
    assert proc.returncode == 0 and cmp["verdict"] == "pass", proc.stderr
    assert (cmp["base_verdict"], cmp["candidate_verdict"]) == ("pass", "fail" if when == "before compare" else "pass")
    if when == "after compare":
        _rescore_to_fail(cand)
    out = _site(root, tmp_path / "site")
    (row,) = _comparison_rows((out / "index.html").read_text())
    assert row.split("</td>")[1].startswith('<td><span class="v-fail">fail</span><span class="mark">[compare said '
                                            "pass]</span><span class=\"mark\">[the candidate&#39;s own run: fail]")
    line = _verdict_line((out / "summary-pr.html").read_text())
    assert line.startswith('verdict <span class="v-fail">fail</span>'), line
    assert "candidate pr · sim reference_impl · its own run <span class=\"v-fail\">fail</span>" \
           '<span class="mark">[re-scored, limits changed: checks.min_token_hit_rate=0.99]</span>' in line


def test_what_only_one_run_has_is_said_on_the_index_and_the_summary_escaped(tmp_path: Path) -> None:
    root, _, cand = _compared(tmp_path)
    cmp = load(cand / "compare" / "compare.json")
    cmp["not_compared"] = ["arm 'seglen' only in the candidate run", "<img src=x onerror=window.__pwned=1>"]
    save(cand / "compare" / "compare.json", cmp)
    out = _site(root, tmp_path / "site")
    summary = (out / "summary-pr.html").read_text()
    assert ("<p class=\"not-compared\"><b>Not compared</b>: arm &#39;seglen&#39; only in the candidate run; "
            "&lt;img src=x onerror=window.__pwned=1&gt;</p>") in summary
    assert '<p class="scope">engine sim · model ' in summary
    (row,) = _comparison_rows((out / "index.html").read_text())
    assert "[not compared: arm &#39;seglen&#39; only in the candidate run]" in row
    for page in out.glob("*.html"):
        assert "<img src=x" not in page.read_text(), page.name


def test_a_pass_beside_a_failed_row_is_not_shown_passing(tmp_path: Path) -> None:
    # compare never writes it; a hand-edited or damaged compare.json did show a green pass over a failed row.
    root, _, cand = _compared(tmp_path)
    cmp = load(cand / "compare" / "compare.json")
    cmp["deltas"][0]["status"] = "fail"
    save(cand / "compare" / "compare.json", cmp)
    out = _site(root, tmp_path / "site")
    line = _verdict_line((out / "summary-pr.html").read_text())
    assert line.startswith('verdict <span class="v-fail">fail</span><span class="mark">[compare said pass]</span>'
                           '<span class="mark">[a verdict row says fail]</span>'), line


def test_a_verdict_compare_never_writes_is_not_shown_as_the_candidates_pass(tmp_path: Path) -> None:
    root, _, cand = _compared(tmp_path)
    cmp = load(cand / "compare" / "compare.json")
    cmp["verdict"] = "unknown"
    save(cand / "compare" / "compare.json", cmp)
    line = _verdict_line((_site(root, tmp_path / "site") / "summary-pr.html").read_text())
    assert line.startswith('verdict <span class="v-unknown">unknown</span> · '), line


@pytest.mark.parametrize(("rescore", "now"), [("checks.min_token_hit_rate=0.99", "fail"), ("", "pass")])
def test_a_candidate_re_scored_since_the_comparison_reads_alike_on_the_dashboard_and_the_pr_summary(
        tmp_path: Path, rescore: str, now: str) -> None:
    # python -m hybridbench.rescore on the pull request's run after compare: the dashboard showed its new verdict
    # (FAIL), the PR summary the one compare.json recorded (PASS): two views of one run, one of them a pass.
    root, _, cand = _compared(tmp_path)
    if now == "pass":  # the other way: compare saw a failed candidate, a re-scoring with its own settings passes it
        cmp = load(cand / "compare" / "compare.json")
        save(cand / "compare" / "compare.json", {**cmp, "candidate_verdict": "fail"})
    proc = cli("hybridbench.rescore", cand, *([rescore] if rescore else []))
    clean(proc)
    assert load(cand / "bundle.json")["verdict"] == now, proc.stdout[-800:]
    line = _verdict_line((_site(root, tmp_path / "site") / "compare-pr.html").read_text())
    assert line.startswith(f'verdict <span class="v-{now}">{now}</span>'), line
    summary = subprocess_cli("hybridbench.dashboard.pr_summary", cand / "compare" / "compare.json")
    assert summary.returncode == 0, summary.stderr
    first, *rest = summary.stdout.splitlines()
    assert first.startswith(f"**hybridbench verdict: {now.upper()}**"), first
    why = f"re-scored since the comparison: {rescore}" if rescore else "re-scored since the comparison"
    was = "PASS" if now == "fail" else "FAIL"
    assert f"- The pull request's own run's verdict is now {now.upper()} ({why}); compare recorded {was}." in rest


def test_a_re_scoring_with_overrides_cannot_lift_a_failed_candidate_to_a_pass(tmp_path: Path) -> None:
    # compare saw the pull request's own run fail; `rescore RUN checks.min_token_hit_rate=0` (a limit widened until
    # it passes) made its bundle say pass, and both views then said PASS: a narrowed re-score is no new evidence.
    root, _, cand = _compared(tmp_path)
    cmp = load(cand / "compare" / "compare.json")
    save(cand / "compare" / "compare.json", {**cmp, "candidate_verdict": "fail"})
    clean(cli("hybridbench.rescore", cand, "checks.min_token_hit_rate=0"))
    assert load(cand / "bundle.json")["verdict"] == "pass"
    line = _verdict_line((_site(root, tmp_path / "site") / "compare-pr.html").read_text())
    assert line.startswith('verdict <span class="v-fail">fail</span>'), line
    summary = subprocess_cli("hybridbench.dashboard.pr_summary", cand / "compare" / "compare.json")
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.startswith("**hybridbench verdict: FAIL**"), summary.stdout[:300]


@pytest.mark.parametrize("rows", ["skipped", "none"])
def test_a_pass_no_verdict_row_backs_is_no_pass_on_the_dashboard_as_in_the_pr_summary(
        tmp_path: Path, rows: str) -> None:
    # compare never writes it; a hand-edited or damaged compare.json can. The PR summary refused the file (exit 2),
    # while the index, the page and the summary PNG showed a green pass over nothing judged.
    root, _, cand = _compared(tmp_path)
    cmp = load(cand / "compare" / "compare.json")
    cmp["deltas"] = [{**d, "status": "skip"} for d in cmp["deltas"]] if rows == "skipped" else []
    save(cand / "compare" / "compare.json", cmp)
    summary = subprocess_cli("hybridbench.dashboard.pr_summary", cand / "compare" / "compare.json")
    assert summary.returncode == 2 and "verdict pass with no passing verdict row" in summary.stderr, summary.stderr
    out = _site(root, tmp_path / "site")
    (row,) = _comparison_rows((out / "index.html").read_text())
    assert "v-pass" not in row.split("</td>")[1] and "compare said pass with no passing verdict row" in row, row
    for page in ("compare-pr.html", "summary-pr.html"):
        line = _verdict_line((out / page).read_text())
        assert line.startswith('verdict <span class="v-inconclusive">inconclusive</span>'), (page, line)

"""The pull-request job summary: ``python -m hybridbench.dashboard.pr_summary`` (verdict line first, failed
verdicts, the PNG from an https URL or, without one, where to find it) and ci/publish_png.sh, which commits the
PNG to an assets branch and prints that URL (run here against a local bare repository). The same command over a
real comparison, as the workflow runs it, is in tests/ci/test_workflows.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from hybridbench.dashboard.pr_summary import summary_markdown

ROOT = Path(__file__).resolve().parents[2]
PUBLISH = ROOT / "ci" / "publish_png.sh"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def _cmp(*statuses: str) -> dict[str, object]:
    return {"verdict": "fail" if "fail" in statuses else "pass", "schema_version": 1, "base": "main · sglang 0.5.23",
            "candidate": "pr · sglang 0.5.24", "command": "python -m hybridbench.compare runs/main runs/pr",
            "deltas": [{"workload": "gsp", "arm": f"arm{i}", "metric": "ttft", "status": s,
                        "detail": f"+{i}% (CI a | b)"} for i, s in enumerate(statuses)]}


def _md(cmp: dict[str, object], **kw: object) -> str:
    return summary_markdown(cmp, png_url="https://x.test/a.png", site_url="https://x.test/site",
                            png_name="summary-pr.png", **kw)  # type: ignore[arg-type]


def test_the_verdict_line_comes_first_and_names_every_verdict_not_passed() -> None:
    text = _md(_cmp("pass", "fail", "skip", "fail", "inconclusive"))
    lines = text.splitlines()
    assert lines[0] == ("**hybridbench verdict: FAIL** · candidate `pr · sglang 0.5.24` against baseline "
                        "`main · sglang 0.5.23` · 5 verdict(s): 2 fail, 1 inconclusive, 1 pass, 1 skip")
    # Inconclusive rows were left out: "INCONCLUSIVE · 1 inconclusive" never said which (workload, arm, metric).
    failed = [line for line in lines if line.startswith("| gsp")]
    assert failed == [f"| gsp | arm{i} | ttft | +{i}% (CI a \\| b) | {s} |"
                      for i, s in ((1, "fail"), (3, "fail"), (4, "inconclusive"))]
    assert "[![hybridbench PR summary: fail](https://x.test/a.png)](https://x.test/site)" in lines


@pytest.mark.parametrize(("own", "verdict"), [("fail", "FAIL"), ("inconclusive", "INCONCLUSIVE")])
def test_a_pull_request_whose_own_run_did_not_pass_is_not_summarised_as_a_pass(own: str, verdict: str) -> None:
    # compare judges the two builds' figures only: a pull request whose own checks failed (its cache_hits, its
    # accuracy) passed against main, and the summary's first line read "PASS" while the job failed.
    lines = _md({**_cmp("pass"), "candidate_verdict": own, "base_verdict": "pass"}).splitlines()
    assert lines[0].startswith(f"**hybridbench verdict: {verdict}**"), lines[0]
    assert "- The comparison alone said PASS." in lines
    assert f"- The pull request's own run: **{verdict}** (its checks; its report.md says which)." in lines
    assert "[![hybridbench PR summary: " + own + "](https://x.test/a.png)](https://x.test/site)" in lines


def test_what_was_not_compared_a_modelled_clock_and_a_failed_baseline_are_said() -> None:
    cmp = {**_cmp("pass"), "not_compared": ["arm 'seglen' only in the candidate run"], "modelled": True,
           "engine": "sim", "base_verdict": "fail", "candidate_verdict": "pass",
           "base_marks": ["re-scored, limits changed: checks.ttft_regression=0.9"]}
    lines = _md(cmp).splitlines()
    assert lines[0].startswith("**hybridbench verdict: PASS**")  # the comparison's; what it rests on follows
    assert "- **Not compared**: arm 'seglen' only in the candidate run." in lines
    assert "- **Modelled** (engine `sim`): times come from a cost model, not a GPU." in lines
    assert "- The baseline's own run: **FAIL** (its checks; its report.md says which)." in lines
    assert ("- The baseline's own run's verdict is marked: re-scored, limits changed: checks.ttft_regression=0.9."
            in lines)


def test_a_pass_beside_a_failed_row_is_not_summarised_as_a_pass() -> None:
    # compare never writes it, but a hand-edited or damaged compare.json did lead with PASS over a failed row.
    assert _md({**_cmp("pass", "fail"), "verdict": "pass"}).startswith("**hybridbench verdict: FAIL**")


def test_a_verdict_compare_never_writes_is_not_read_as_the_candidates_pass() -> None:
    text = _md({**_cmp("pass"), "verdict": "unknown", "candidate_verdict": "pass"})
    assert text.startswith("**hybridbench verdict: UNKNOWN**"), text.splitlines()[0]


def test_names_and_details_cannot_inject_markdown() -> None:
    # A run's label carries the build's version string (a pull request's own code reports it) and its directory
    # name; a workload, arm or detail comes from a config: none may close its code span or add an image, a link,
    # HTML or emphasis to the PR's page. Rendered as CommonMark (GitHub's base) with GFM tables.
    evil = "x` ![PASS](https://evil.test/p.png) **PASS** <img src=x> [ok](https://evil.test) `y"
    cmp = {**_cmp("pass", "fail"), "candidate": evil, "base": "``", "command": f"python -m c {evil}",
           "not_compared": [evil], "candidate_marks": [evil]}
    cmp["deltas"][1].update(workload=evil, arm="a|b", detail=evil)  # type: ignore[index]
    html = MarkdownIt("commonmark").enable("table").render(_md(cmp))
    assert "evil.test" in html  # the text is there, as text
    assert "<img" not in html.replace('<img src="https://x.test/a.png"', "")
    assert 'href="https://evil' not in html and "<strong>PASS</strong>" not in html
    assert "<td>a|b</td>" in html  # the cell kept whole
    assert html.count("<code>") == 4  # candidate, baseline, command, index.html: none closed early
    assert "<code>x` ![PASS](https://evil.test/p.png) **PASS** &lt;img src=x&gt; [ok](https://evil.test) `y</code>" \
           in html


def test_a_candidate_directory_since_re_run_makes_its_pass_inconclusive(tmp_path: Path) -> None:
    # The pull request re-run into runs/pr with the old compare/ beside it: its pass is of a run no longer there.
    run = tmp_path / "pr"
    (run / "compare").mkdir(parents=True)
    (run / "bundle.json").write_text(json.dumps({"run_id": "b" * 32}))
    cmp = {**_cmp("pass"), "candidate_dir": "/elsewhere/on/the/runner/pr", "candidate_run_id": "a" * 32}
    (run / "compare" / "compare.json").write_text(json.dumps(cmp))
    proc = subprocess.run([sys.executable, "-m", "hybridbench.dashboard.pr_summary",
                           str(run / "compare" / "compare.json")], capture_output=True, text=True, check=False,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("**hybridbench verdict: INCONCLUSIVE**"), lines[0]
    assert (f"- Since replaced: candidate {run} now holds another run (bbbbbbbbbbbb; compared aaaaaaaaaaaa): this "
            "comparison is not of what is there now.") in lines
    (run / "bundle.json").write_text(json.dumps({"run_id": "a" * 32}))  # the run compared: nothing to say
    again = subprocess.run([sys.executable, "-m", "hybridbench.dashboard.pr_summary",
                            str(run / "compare" / "compare.json")], capture_output=True, text=True, check=False,
                           cwd=ROOT)
    assert again.stdout.startswith("**hybridbench verdict: PASS**") and "Since replaced" not in again.stdout


def test_a_usage_error_is_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench.dashboard.pr_summary", "--bogus"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr


def test_without_a_url_the_summary_says_where_the_png_is() -> None:
    text = summary_markdown(_cmp("pass"), png_url="", site_url="", png_name="summary-pr.png")
    assert text.startswith("**hybridbench verdict: PASS**")
    assert "![" not in text and "`summary-pr.png`" in text and "the dashboard artifact" in text


@pytest.mark.parametrize(("args", "needle"), [
    (["--png-url", "data:image/png;base64,AAAA"], "--png-url: 'data:image/png;base64,AAAA' is not an https URL"),
    (["--site-url", "file:///tmp/site"], "--site-url"),
])
def test_urls_github_would_not_show_are_refused(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "compare.json").write_text(json.dumps(_cmp("pass")))
    proc = subprocess.run([sys.executable, "-m", "hybridbench.dashboard.pr_summary", str(tmp_path / "compare.json"),
                           *args], capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("data", "needle"), [
    ({"deltas": []}, "not a compare.json"),
    # A run's bundle.json: it has a verdict, and was summarised as "PASS ... 0 verdict(s): none".
    ({"verdict": "pass", "trials": [], "checks": []}, "not a compare.json"),
    ({**_cmp("pass"), "schema_version": 99}, "compare.json schema_version 99, this reader takes 1"),
    ({**_cmp("pass"), "deltas": []}, "verdict pass with no passing verdict row"),
    ({**_cmp("skip"), "verdict": "pass"}, "verdict pass with no passing verdict row"),
])
def test_a_file_that_is_not_a_comparison_is_one_line_exit_2(tmp_path: Path, data: dict[str, object],
                                                               needle: str) -> None:
    (tmp_path / "compare.json").write_text(json.dumps(data))
    out = tmp_path / "summary.md"
    proc = subprocess.run([sys.executable, "-m", "hybridbench.dashboard.pr_summary", str(tmp_path / "compare.json"),
                           "--append", str(out)], capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_real_looking_comparison_is_summarised(tmp_path: Path) -> None:
    (tmp_path / "compare.json").write_text(json.dumps(_cmp("pass", "skip")))
    proc = subprocess.run([sys.executable, "-m", "hybridbench.dashboard.pr_summary", str(tmp_path / "compare.json")],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("**hybridbench verdict: PASS**")


def test_it_runs_with_the_standard_library_alone(tmp_path: Path) -> None:
    # ci/pr.yml's publish job runs it with the runner's python3 and nothing installed: it imported compare (numpy,
    # through its statistics), and the job summary said "compare.json missing or unreadable" instead of a verdict.
    (tmp_path / "compare.json").write_text(json.dumps(_cmp("pass", "fail")))
    proc = subprocess.run([sys.executable, "-S", "-m", "hybridbench.dashboard.pr_summary",  # -S: no site-packages
                           str(tmp_path / "compare.json")], capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("**hybridbench verdict: FAIL**")


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=cwd).stdout


def test_publish_png_commits_to_the_assets_branch_and_prints_a_pinned_url(tmp_path: Path) -> None:
    remote = tmp_path / "repo.git"
    _git("init", "-q", "--bare", str(remote))
    png = tmp_path / "summary-pr.png"
    png.write_bytes(PNG)
    urls = []
    for run in ("1", "2"):  # the second run builds on the first's commit
        proc = subprocess.run(["bash", str(PUBLISH), str(png), f"pr-7/{run}.png", str(remote),
                               "https://raw.githubusercontent.com/o/r"], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        urls.append(proc.stdout.strip())
    head = _git("rev-parse", "refs/heads/hybridbench-assets", cwd=remote).strip()
    assert urls[1] == f"https://raw.githubusercontent.com/o/r/{head}/pr-7/2.png"
    first = urls[0].split("/")[-3]
    assert _git("rev-parse", f"{head}~1", cwd=remote).strip() == first
    shown = subprocess.run(["git", "show", f"{head}:pr-7/1.png"], capture_output=True, check=True, cwd=remote).stdout
    assert shown == PNG


def test_publish_png_refuses_a_missing_file(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(PUBLISH), str(tmp_path / "nope.png"), "x.png", str(tmp_path), "https://x"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr

"""`python -m hybridbench.compare`: a pull request's run against main's, from the saved files alone.

Synthetic runs (written in the harness's own file formats) pin the verdict rules; two real runs of the
smoke experiment show the command end to end, one of them catching a real cache fault on the reference
server.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from hybridbench.compare.__main__ import main
from hybridbench.metrics.stats import welch_relative_change
from hybridbench.plan.types import Trial
from hybridbench.records.schema import Record

ROOT = Path(__file__).resolve().parents[2]


def write_run(path: Path, *, repeats: int = 3, ttft_ms: float = 100.0, duration_s: float = 10.0, cached: int = 50,
              trace: str = "same", engine: str = "sim", lose: int = 0, ran: int | None = None,
              died: str = "", argv: list[str] | None = None, load: dict[str, int] | None = None,
              sizing: dict[str, int] | None = None, rate: float = 0.0, model: dict[str, str] | None = None,
              skip: int = 0) -> Path:
    """A run of one workload `w` and arms lru, seglen: 20 requests per trial, request i's TTFT ttft_ms + i. Its
    times are synthetic, so its engine is the simulator's by default (a reference run timed on the wall clock
    compares its timings only on one recorded CPU).
    ``lose``: seglen's first requests fail; ``skip``: the next ones are later turns of a failed session, not sent."""
    (path / "traces").mkdir(parents=True)
    (path / "traces" / "w.jsonl").write_text(f"{trace}\n" * 20)  # one line per planned request
    order = [(arm, r) for r in range(repeats) for arm in ("lru", "seglen")]  # the harness's interleaving
    trials = [Trial(i, arm, "w", r, 0) for i, (arm, r) in enumerate(order)]
    plan = {"name": "x", "engine": engine, "fingerprint": "run", "arms": ["lru", "seglen"],
            "trials": [asdict(t) for t in trials],
            "workloads": [{"name": "w", "trace_path": str(path / "traces" / "w.jsonl"),
                           "argv": argv or ["gsp", "-o", str(path / "traces" / "w.jsonl")]}],
            "config": {"model": {"name": "m", **(model or {})}, "load": load or {"max_concurrency": 5},
                       "workloads": {"w": {"kind": "gsp", "request_rate": rate}},
                       "engine": {"name": engine, "python": str(path), "tp": 4, **(sizing or {})}}}
    (path / "plan.json").write_text(json.dumps(plan))
    lines = []
    for t in trials[: len(trials) if ran is None else ran]:
        span = duration_s * (1 + 0.02 * t.repeat)  # repeats differ a little, as real ones do
        for i in range(20):
            sent = i * span / 20
            lost = t.arm == "seglen" and i < lose
            first = sent + (ttft_ms * (1 + 0.01 * t.repeat) + i) / 1e3
            if t.arm == "seglen" and lose <= i < lose + skip:
                rec = Record("run", t.trial_id, t.arm, "w", t.repeat, i, i, 0, sent, None, None, None, 0, 0, None,
                             "skipped", error="not sent: turn 0 of session 0 failed (error)")
                lines.append(json.dumps(rec.to_json()))
                continue
            rec = Record("run", t.trial_id, t.arm, "w", t.repeat, i, i, 0, sent, sent,
                         None if lost else first, None if lost else sent + span / 20,
                         200, 0 if lost else 4, None if lost else cached, "error" if lost else "ok",
                         error="boom" if lost else "")
            lines.append(json.dumps(rec.to_json()))
    (path / "records.jsonl").write_text("".join(line + "\n" for line in lines))
    if died:
        dead = trials[(ran or 1) - 1]
        bundle = {"trials": [{"trial_id": dead.trial_id, "arm": dead.arm, "workload": "w", "repeat": dead.repeat,
                              "summary": {}, "server": {"infrastructure_error": died}}]}
        (path / "bundle.json").write_text(json.dumps(bundle))
    return path


def verdicts(out: Path) -> dict[tuple[str, str], dict[str, object]]:
    data = json.loads((out / "compare" / "compare.json").read_text())
    return {(d["arm"], d["metric"]): d for d in data["deltas"]}


def test_identical_runs_pass_with_zero_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    assert main([str(a), str(b)]) == 0
    v = verdicts(b)
    assert {d["status"] for d in v.values()} == {"pass"} and len(v) == 8
    assert v[("seglen", "ttft")]["change"] == 0 and v[("seglen", "throughput")]["change"] == 0
    assert (b / "compare" / "compare.md").read_text() in capsys.readouterr().out


@pytest.mark.parametrize(("kwargs", "metric", "status"), [
    ({"ttft_ms": 160.0}, "ttft", "fail"),  # +50% on every request
    ({"ttft_ms": 104.0}, "ttft", "pass"),  # +3.6%: under the 10% threshold
    ({"duration_s": 14.0}, "throughput", "fail"),  # -29% request throughput
    ({"duration_s": 10.5}, "throughput", "pass"),
    ({"cached": 20}, "token_hit_rate", "fail"),  # 0.25 -> 0.10
    ({"lose": 1}, "survival", "fail"),  # one request of sixty
])
def test_each_regression_fails_its_verdict_alone(tmp_path: Path, kwargs: dict[str, float], metric: str,
                                                 status: str) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", **kwargs)  # type: ignore[arg-type]
    assert main([str(a), str(b)]) == (1 if status == "fail" else 0)
    v = verdicts(b)
    assert v[("seglen", metric)]["status"] == status
    assert v[("lru", metric)]["status"] == ("pass" if metric in {"survival"} else status)
    others = {k: d["status"] for k, d in v.items() if k[1] != metric}
    # Losing requests takes their TTFT and hits out of the pairing; nothing else may fail.
    assert set(others.values()) == {"pass"}, others


def test_a_candidate_reporting_hits_longer_than_its_prompts_fails_the_hit_rate(tmp_path: Path) -> None:
    # 500 cached of a 200-token prompt (a build double-counting its hits) read as +2.25 and passed; the run's own
    # cache_hits check fails such a record (10d2b6c), the comparison now does too.
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", cached=500)
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("seglen", "token_hit_rate")]["status"] == "fail"
    assert "60 candidate request(s) report an impossible hit" in str(v[("seglen", "token_hit_rate")]["detail"])


def test_one_repeat_a_side_is_inconclusive_never_skipped_into_a_pass(tmp_path: Path) -> None:
    """Two runs of one repeat share no drift estimate: +27% on every request is shown (a request-paired
    interval, tight around it though each side alone spans 100..130 ms) but decides nothing — and a candidate
    with every TTFT tripled, which compared as `pass` (exit 0) when these rows were skipped, is inconclusive."""
    a = write_run(tmp_path / "a", repeats=1)
    b = write_run(tmp_path / "b", repeats=1, duration_s=20.0, ttft_ms=130.0)
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("seglen", "throughput")]["status"] == "inconclusive" and v[("seglen", "ttft")]["status"] == "inconclusive"
    assert "advisory +27." in str(v[("seglen", "ttft")]["detail"])
    assert v[("seglen", "ttft")]["candidate"] == pytest.approx(139.5)
    assert v[("seglen", "ttft")]["limit"] == pytest.approx(0.10)
    c = write_run(tmp_path / "c", repeats=1, ttft_ms=300.0)
    assert main([str(a), str(c)]) == 1
    assert json.loads((c / "compare" / "compare.json").read_text())["verdict"] == "inconclusive"
    assert "**INCONCLUSIVE**" in (c / "compare" / "compare.md").read_text()


def test_the_hit_rate_row_follows_the_repeats_rule_of_the_ttft_row(tmp_path: Path) -> None:
    """On a server under concurrency, scheduling order changes what is cached, so one run's hit rate drifts from the
    next as its TTFT does. A bootstrap over one repeat's request pairs cannot see that drift: it passed identical
    runs and decided a drop on one repeat a side, beside a TTFT row that said inconclusive."""
    a, b = write_run(tmp_path / "a", repeats=1), write_run(tmp_path / "b", repeats=1)
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "token_hit_rate")]
    assert row["status"] == "inconclusive", row
    assert "1 baseline and 1 candidate repeat(s)" in str(row["detail"]) and "advisory +0.000" in str(row["detail"])
    c = write_run(tmp_path / "c", repeats=1, cached=20)  # 0.25 -> 0.10, shown but not decided on one repeat
    assert main([str(a), str(c)]) == 1
    row = verdicts(c)[("seglen", "token_hit_rate")]
    assert row["status"] == "inconclusive" and "advisory -0.150" in str(row["detail"]), row
    # Two repeats a side: the candidate's 0.35 and 0.20 against the baseline's 0.25 twice. The request pairs saw a
    # +0.025 gain (CI above -0.02: a pass); the repeats' spread reaches far below the limit.
    d, e = write_run(tmp_path / "d", repeats=2), write_run(tmp_path / "e", repeats=2)
    lines = [json.loads(x) for x in (e / "records.jsonl").read_text().splitlines()]
    for r in lines:
        r["cached_tokens"] = 70 if r["repeat"] == 0 else 40
    (e / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main([str(d), str(e)]) == 1
    row = verdicts(e)[("seglen", "token_hit_rate")]
    assert row["status"] == "inconclusive" and row["change"] == pytest.approx(0.025), row
    assert row["low"] < -0.02 < row["high"], row  # type: ignore[operator]
    # Repeats that agree (the write_run default) decide: a drop clear of the spread fails, no change passes.
    f = write_run(tmp_path / "f", repeats=2, cached=20)
    assert main([str(d), str(f)]) == 1 and verdicts(f)[("seglen", "token_hit_rate")]["status"] == "fail"
    assert main([str(d), str(write_run(tmp_path / "g", repeats=2))]) == 0


def test_a_straddling_interval_is_inconclusive_with_its_mde_and_repeats(tmp_path: Path) -> None:
    """Two repeats a side whose spread reaches past +10% and below it: not a pass (the old rule), not a fail."""
    a = write_run(tmp_path / "a", repeats=2)
    b = write_run(tmp_path / "b", repeats=2, ttft_ms=109.0)
    # widen the candidate's spread: its second repeat much slower than its first
    lines = [json.loads(x) for x in (b / "records.jsonl").read_text().splitlines()]
    for r in lines:
        if r["repeat"] == 1 and r["first_token_s"] is not None:
            r["first_token_s"] += 0.03
    (b / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "ttft")]
    assert row["status"] == "inconclusive"
    assert row["low"] < 0.10 < row["high"]  # type: ignore[operator]
    assert row["mde"] is not None and row["repeats_needed"] is not None and row["repeats_needed"] > 2  # type: ignore[operator]


def test_a_candidate_losing_more_than_the_baseline_fails_even_when_both_lose(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a", lose=1), write_run(tmp_path / "b", lose=20)  # b completes no seglen request
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("seglen", "survival")]["status"] == "fail" and "60 loss(es)" in str(v[("seglen", "survival")]["detail"])
    # Back the other way, fewer losses than the baseline is no survival regression; but the baseline completed no
    # seglen request, so seglen's timing and hits were compared with nothing: inconclusive (exit 1), never a pass.
    back = tmp_path / "back"
    assert main([str(b), str(a), "-o", str(back)]) == 1
    rows = {(d["arm"], d["metric"]): d for d in json.loads((back / "compare.json").read_text())["deltas"]}
    assert rows[("seglen", "survival")]["status"] == "skip" and rows[("seglen", "ttft")]["status"] == "inconclusive"
    assert rows[("lru", "survival")]["status"] == "pass"


def test_turns_not_sent_after_a_failure_are_not_counted_as_more_losses(tmp_path: Path) -> None:
    """One failure a trial on both sides; the candidate's ended a session early (5 later turns not sent), the
    baseline's was a session's last turn: as many requests failed, so survival is no regression."""
    a, b = write_run(tmp_path / "a", lose=1), write_run(tmp_path / "b", lose=1, skip=5)
    main([str(a), str(b)])
    assert verdicts(b)[("seglen", "survival")]["status"] != "fail"


def test_a_candidate_cut_short_fails_survival_naming_the_crash(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a")
    b = write_run(tmp_path / "b", ran=4, died="server exited with code -9: Not enough space for mamba cache")
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("lru", "survival")]["status"] == "fail"  # its third repeat never ran
    assert "mamba cache" in str(v[("seglen", "survival")]["detail"])
    both = write_run(tmp_path / "c", ran=4, died="server exited with code -9")
    assert main([str(both), str(b), "-o", str(tmp_path / "out")]) == 0  # lost alike on both sides: not a regression
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert {d["status"] for d in data["deltas"] if d["metric"] == "survival"} == {"skip"}


def test_a_trial_that_never_ran_loses_all_its_requests_not_one(tmp_path: Path) -> None:
    # The candidate's last seglen trial never ran (20 requests never sent); the baseline's seglen failed 3 requests a
    # trial (9). Counted as one loss, the candidate "lost fewer" and the comparison passed, exit 0.
    a, b = write_run(tmp_path / "a", lose=3), write_run(tmp_path / "b", ran=5)
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("seglen", "survival")]["status"] == "fail" and "20 loss(es) in the candidate against 9" in str(
        v[("seglen", "survival")]["detail"])


def test_two_runs_that_lost_everything_decide_nothing_and_do_not_pass(tmp_path: Path) -> None:
    # Every row skips (survival: lost alike; nothing completed to time or pair): no evidence, so no pass (exit 1).
    a, b = write_run(tmp_path / "a", lose=20), write_run(tmp_path / "b", lose=20)
    for run in (a, b):  # lru's requests lost too
        text = (run / "records.jsonl").read_text().replace('"status": "ok"', '"status": "error"')
        (run / "records.jsonl").write_text(text)
    assert main([str(a), str(b)]) == 1
    data = json.loads((b / "compare" / "compare.json").read_text())
    statuses = {(d["metric"], d["status"]) for d in data["deltas"]}
    assert {s for m, s in statuses if m == "survival"} == {"skip"} and data["verdict"] == "inconclusive"
    assert {s for m, s in statuses if m != "survival"} == {"inconclusive"}  # compared nothing, said so


def test_a_candidate_missing_records_fails_survival_though_nothing_failed(tmp_path: Path) -> None:
    """12 of 20 requests of the candidate's last trial recorded, none failed: missing records are lost ones."""
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    lines = (b / "records.jsonl").read_text().splitlines()
    (b / "records.jsonl").write_text("".join(line + "\n" for line in lines[:-8]))
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("seglen", "survival")]["status"] == "fail"
    assert "12 of 20 planned requests recorded" in str(v[("seglen", "survival")]["detail"])


@pytest.mark.parametrize("case", ["same-path", "copied", "duplicated"])
def test_the_same_run_twice_or_one_holding_two_runs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               case: str) -> None:
    import shutil

    a = write_run(tmp_path / "a")
    (a / "bundle.json").write_text(json.dumps({"created": "2026-11-24T10:00:00+00:00", "trials": []}))
    b = a
    if case == "copied":
        b = Path(shutil.copytree(a, tmp_path / "b"))
    elif case == "duplicated":  # a reused run dir: a second run appended to the same records.jsonl
        b = write_run(tmp_path / "b")
        (b / "records.jsonl").write_text((b / "records.jsonl").read_text() * 2)
    assert main([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert ("duplicated" in err) if case == "duplicated" else ("not comparable" in err and "run" in err)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"trace": "other"}, "workload 'w' sent different requests"),
    ({"argv": ["gsp", "--num-groups", "9"]}, "workload 'w' sent different requests"),
    ({"engine": "reference"}, "engine 'sim' (baseline) vs 'reference'"),
    ({"load": {"max_concurrency": 16}}, "load.max_concurrency is 5 in the baseline and 16 in the candidate"),
    ({"sizing": {"tp": 8}}, "engine.tp is 4 in the baseline and 8 in the candidate"),
    ({"rate": 10.0}, "workloads.w.request_rate is 0.0 in the baseline and 10.0 in the candidate"),  # its own load
    # How the pools are sized, not what a build does: a smaller replay budget or bf16 states would read as a change.
    # a key the baseline's config lacks is at its schema default (a run saved before the key existed ran with it)
    ({"sizing": {"capacity_bytes": 1e9}}, "engine.capacity_bytes is 0.0 in the baseline and 1000000000.0"),
    ({"model": {"mamba_ssm_dtype": "bfloat16"}}, "model.mamba_ssm_dtype is '' in the baseline and 'bfloat16'"),
    ({"model": {"quantization": "fp8"}}, "model.quantization is '' in the baseline and 'fp8' in the candidate"),
])
def test_runs_that_cannot_be_compared_exit_2_naming_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        kwargs: dict[str, str], needle: str) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", **kwargs)  # type: ignore[arg-type]
    assert main([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not (b / "compare").exists()  # nothing half-written


@pytest.mark.parametrize(("case", "needle"), [
    ("missing", "not a run directory"),
    ("not-json", "plan.json: not JSON"),
    ("not-a-plan", "plan.json: not a hybridbench plan"),
    ("bad-record", "records.jsonl:2: not a record"),
    ("null-field", "records.jsonl:1: not a record (field 'prompt_tokens' is None, not int)"),
    ("newer-plan", "plan schema version 2 is newer than this hybridbench reads"),
    ("bad-flag", "--ttft-regression: 2 is not in [0, 1)"),
    ("few-resamples", "--bootstrap-samples must be in [100, 1000000]"),
    ("nan-confidence", "--confidence: must be in [0.5, 0.99], got nan"),
    ("wide-confidence", "--confidence: must be in [0.5, 0.99], got 0.999999"),  # an interval nothing could fail
    ("above-one-confidence", "--confidence: must be in [0.5, 0.99], got 1.5"),  # once named [0, 1)
    ("word-confidence", "--confidence: must be in [0.5, 0.99], got high"),
    ("empty-latest", "baseline: latest: names no results root; give latest:RESULTS_ROOT"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                          needle: str) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    args = [str(a), str(b)]
    if case == "missing":
        args[1] = str(tmp_path / "nope")
    elif case == "not-json":
        (b / "plan.json").write_text("{")
    elif case == "not-a-plan":
        (b / "plan.json").write_text('{"trials": []}')
    elif case == "null-field":
        first = json.loads((b / "records.jsonl").read_text().splitlines()[0])
        (b / "records.jsonl").write_text(json.dumps({**first, "prompt_tokens": None}) + "\n")
    elif case == "newer-plan":
        (b / "plan.json").write_text(json.dumps({**json.loads((b / "plan.json").read_text()), "schema_version": 2}))
    elif case == "bad-record":
        (b / "records.jsonl").write_text((b / "records.jsonl").read_text().splitlines()[0] + "\n[1, 2]\n")
    elif case == "few-resamples":
        args.append("--bootstrap-samples=0")
    elif case == "nan-confidence":
        args.append("--confidence=nan")
    elif case == "wide-confidence":
        args.append("--confidence=0.999999")
    elif case == "above-one-confidence":
        args.append("--confidence=1.5")
    elif case == "word-confidence":
        args.append("--confidence=high")
    elif case == "empty-latest":
        args[0] = "latest:"
    else:
        args.append("--ttft-regression=2")
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own exit, as `python -m` would see it
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not (b / "compare").exists()


@pytest.mark.parametrize("taken", ["compare.md", "compare.json"])
def test_an_output_dir_that_cannot_take_the_files_is_one_line_and_leaves_neither(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], taken: str) -> None:
    # compare.json was written, then compare.md raised IsADirectoryError: a traceback beside a half-written output.
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    (tmp_path / "out" / taken).mkdir(parents=True)
    assert main([str(a), str(b), "-o", str(tmp_path / "out")]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "cannot write the comparison" in err[0], err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [taken]  # nothing else, no temporary file


def test_welch_interval_covers_the_true_ratio_at_its_confidence() -> None:
    """Three repeats a side, as a nightly run has: a z-interval (or the wrong degrees of freedom) would
    cover far less than 95% of the time; Welch's t covers about as often as it claims."""
    rng = random.Random(7)
    trials, covered = 2000, 0
    for _ in range(trials):
        base = [rng.gauss(100.0, 5.0) for _ in range(3)]
        cand = [rng.gauss(100.0, 8.0) for _ in range(3)]
        ch = welch_relative_change(base, cand, confidence=0.95)
        covered += ch.low <= 0.0 <= ch.high
    assert 0.93 <= covered / trials <= 0.985


def hb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def test_two_real_runs_a_cache_fault_fails_the_comparison(tmp_path: Path) -> None:
    """Main's reference server against one with shared prefixes never hitting under concurrency: the
    branching arm's hit rate collapses and the comparison says so; the cache-off arm has nothing to lose."""
    base, cand = tmp_path / "main", tmp_path / "pr"
    # Two repeats a side (the hit-rate row, as TTFT's, decides nothing on one: scheduling under concurrency moves what
    # is cached), judged on what this fault changes (hits).
    one = ["repeats=2", "checks.enabled=[survival,cache_hits]"]
    proc = hb("hybridbench", "+experiment=smoke", "model=reference-tiny", f"hydra.run.dir={base}", *one)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = hb("hybridbench", "+experiment=smoke", "model=reference-tiny", f"hydra.run.dir={cand}", *one,
              "engine.extra_args=[--inject-bug,no_shared_prefix_hits]")
    # Its own cache_hits floor (0.1) may or may not catch the fault; the comparison with main must.
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    proc = hb("hybridbench.compare", str(base), str(cand))
    assert proc.returncode == 1, proc.stderr
    v = verdicts(cand)
    assert v[("branching", "token_hit_rate")]["status"] == "fail"
    assert float(v[("branching", "token_hit_rate")]["change"]) < -0.2  # type: ignore[arg-type]
    assert v[("disabled", "token_hit_rate")]["status"] == "pass"
    changes = json.loads((cand / "compare" / "compare.json").read_text())["config_changes"]
    injected = ["--inject-bug", "no_shared_prefix_hits"]
    assert {"key": "engine.extra_args", "baseline": [], "candidate": injected} in changes
    assert "| branching | token_hit_rate |" in proc.stdout and "verdict: **fail**" in proc.stdout


def test_two_identical_sim_runs_compare_clean(tmp_path: Path) -> None:
    for side in ("a", "b"):
        assert hb("hybridbench", "+experiment=smoke", "engine=sim", "repeats=2",
                  f"hydra.run.dir={tmp_path / side}").returncode == 0
    proc = hb("hybridbench.compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["modelled"] and data["verdict"] == "pass" and data["config_changes"] == []
    assert {d["change"] for d in data["deltas"] if d["metric"] in {"ttft", "throughput"}} == {0.0}


def test_runs_copied_without_their_traces_still_compare_by_generator_arguments(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    (b / "traces" / "w.jsonl").unlink()
    assert main([str(a), str(b)]) == 0


@pytest.mark.parametrize(("others", "verdict"), [
    (["skip", "skip", "skip"], "inconclusive"),  # survival alone decided: nothing says TTFT or hits held
    (["skip", "pass", "skip"], "pass"),
    (["skip", "fail", "skip"], "fail"),
    (["inconclusive", "pass", "pass"], "inconclusive"),
])
def test_survival_alone_never_passes_a_comparison(others: list[str], verdict: str) -> None:
    # One repeat a side with no hit counts (or a baseline that lost every request) skips every TTFT, throughput and
    # hit-rate row; survival passing then passed the comparison, though no row said the candidate did not regress.
    from hybridbench.compare import Comparison, Delta

    rows = [Delta("survival", "w", "lru", "pass", 0.0, 0.0, None, None, None, "", "")] + [
        Delta(metric, "w", "lru", status, None, None, None, None, None, "", "")  # type: ignore[arg-type]
        for metric, status in zip(("ttft", "throughput", "token_hit_rate"), others, strict=True)]
    cmp = Comparison("a", "b", "sim", "m", True, (("w", "lru"),), (), (), tuple(rows))
    assert cmp.verdict == verdict


def test_runs_without_hit_counts_compare_inconclusive_on_one_repeat_a_side(tmp_path: Path) -> None:
    # No cached_tokens on either side read as a hit rate of 0 -> 0: a token_hit_rate "pass", which made survival and
    # that row the whole verdict of a comparison that measured nothing.
    a = write_run(tmp_path / "a", repeats=1, cached=None)  # type: ignore[arg-type]
    b = write_run(tmp_path / "b", repeats=1, cached=None)  # type: ignore[arg-type]
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("seglen", "token_hit_rate")]["status"] == "skip"
    detail = str(v[("seglen", "token_hit_rate")]["detail"])
    assert "the baseline and the candidate reported no cached-token count" in detail
    assert json.loads((b / "compare" / "compare.json").read_text())["verdict"] == "inconclusive"


def finished(path: Path, gpus: list[str], created: str = "2026-11-24T10:00:00+00:00",
             machine: dict[str, object] | None = None) -> Path:
    """Give a ``write_run`` run the bundle.json a finished GPU run writes: every trial whole, its GPUs as
    nvidia-smi named them (``machine``: the host CPU a newer bundle records)."""
    plan = json.loads((path / "plan.json").read_text())
    bundle = {"created": created, "verdict": "pass", "arms": plan["arms"], "baseline_arm": "lru",
              "trials": [{"trial_id": Trial(**t).trial_id, "arm": t["arm"], "workload": "w", "repeat": t["repeat"],
                          "state": "ran", "planned_requests": 20, "summary": {}, "server": {}}
                         for t in plan["trials"]],
              "checks": [{"check": "survival", "workload": "w", "arm": a, "status": "pass", "observed": 0,
                          "expected": "", "detail": ""} for a in plan["arms"]],
              "provenance": {"engine": {"name": "sglang", "version": "0.5.23", "extra": {"gpus": gpus}},
                             **({"machine": machine} if machine is not None else {})}}
    (path / "bundle.json").write_text(json.dumps(bundle))
    return path


A100, H100 = ["NVIDIA A100-SXM4-80GB"] * 4, ["NVIDIA H100 80GB HBM3"] * 4


def test_runs_on_other_gpus_are_not_comparable_and_latest_never_picks_one(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # engine.gpu is a label (h100 by default): main on A100s against a PR on H100s compared, and faster hardware
    # hid a slower build (pass, exit 0).
    a100 = finished(write_run(tmp_path / "root" / "main-a100", engine="sglang", ttft_ms=150.0, duration_s=20.0), A100)
    pr = finished(write_run(tmp_path / "pr", engine="sglang", ttft_ms=145.0, duration_s=19.5), H100,
                  created="2026-11-25T10:00:00+00:00")
    assert main([str(a100), str(pr)]) == 2
    assert "baseline ran on 4x NVIDIA A100-SXM4-80GB and the candidate on 4x NVIDIA H100" in capsys.readouterr().err
    assert main([f"latest:{tmp_path / 'root'}", str(pr)]) == 2
    assert "on its GPUs (4x NVIDIA H100 80GB HBM3)" in capsys.readouterr().err
    h100 = finished(write_run(tmp_path / "root" / "main-h100", engine="sglang", ttft_ms=145.0, duration_s=19.5),
                    H100, created="2026-11-23T10:00:00+00:00")  # older than the A100 run: picked for its GPUs
    assert main([f"latest:{tmp_path / 'root'}", str(pr)]) == 0
    assert f"baseline: {h100}" in capsys.readouterr().err


def test_runs_serving_other_checkpoints_under_one_model_name_are_not_comparable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path / "a", model={"hf_id": "Qwen/Qwen3-Next-80B-A3B-Instruct"})
    b = write_run(tmp_path / "b", model={"hf_id": "Qwen/Qwen3.5-9B"})
    assert main([str(a), str(b)]) == 2
    assert "model.hf_id is 'Qwen/Qwen3-Next-80B-A3B-Instruct' in the baseline" in capsys.readouterr().err


def _drop(run: Path, trial_prefix: str, from_index: int, *, fail: bool = False) -> None:
    """Records of the trial ``trial_prefix`` from ``from_index`` on: dropped (never sent), or ``fail``ed."""
    out = []
    for line in (run / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["trial_id"].startswith(trial_prefix) and r["request_index"] >= from_index:
            if not fail:
                continue
            r.update(status="error", error="HTTP 500: CUDA error: illegal memory access", first_token_s=None,
                     end_s=None, output_tokens=0, cached_tokens=None)
        out.append(json.dumps(r))
    (run / "records.jsonl").write_text("".join(x + "\n" for x in out))


def test_a_killed_baselines_unsent_requests_never_excuse_the_candidates_failures(tmp_path: Path) -> None:
    # main killed 5 requests into its last trial (no bundle.json); the PR finished but 15 requests failed with a
    # 500. As bare totals (15 lost each) survival skipped and the comparison passed, exit 0.
    base = write_run(tmp_path / "main")
    _drop(base, "005", 5)
    cand = finished(write_run(tmp_path / "pr"), H100)
    _drop(cand, "001", 5, fail=True)
    assert main([str(base), str(cand)]) == 1
    row = verdicts(cand)[("seglen", "survival")]
    assert row["status"] == "inconclusive" and "not the same ones" in str(row["detail"])
    # The same 15 requests failing on both sides, both finished: main lost them too, no regression shown.
    again = finished(write_run(tmp_path / "main2"), H100)
    _drop(again, "001", 5, fail=True)
    main([str(again), str(cand), "-o", str(tmp_path / "same")])  # (its TTFT, on 5 paired requests, undecided)
    same = json.loads((tmp_path / "same" / "compare.json").read_text())
    assert {d["status"] for d in same["deltas"] if d["metric"] == "survival" and d["arm"] == "seglen"} == {"skip"}


def test_a_killed_candidate_copied_without_traces_is_held_to_the_baselines_request_count(tmp_path: Path) -> None:
    # Without bundle.json and traces/, a trial's count fell back to the requests it recorded: 5 of 20 looked whole
    # and survival passed.
    base = finished(write_run(tmp_path / "main"), H100)
    cand = write_run(tmp_path / "pr")
    _drop(cand, "005", 5)
    shutil.rmtree(cand / "traces")
    assert main([str(base), str(cand)]) == 1
    row = verdicts(cand)[("seglen", "survival")]
    assert row["status"] == "fail" and "5 of 20 planned requests recorded" in str(row["detail"])

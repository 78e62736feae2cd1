"""``python -m hybridbench.results`` over hostile and damaged stores: every damaged run is its one skipped line,
the rest of the store works, an empty store is a normal state, and a run is counted once however it is reached."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hostile import FIXTURE, clean, cli, load, make_run, save, set_metric

pytestmark = pytest.mark.redteam

SECRET = "sk-live-0123456789abcdef"


def results(*args: object, timeout: float = 60) -> tuple[int, str, str]:
    proc = cli("hybridbench.results", *args, timeout=timeout)
    clean(proc)
    return proc.returncode, proc.stdout, proc.stderr


def listed(stdout: str) -> list[str]:
    return sorted(line.split()[-1] for line in stdout.splitlines() if line.strip())


@pytest.mark.parametrize("command", [["ls"], ["history"], ["export", "-o", "OUT"], ["index"]])
def test_an_empty_store_and_an_all_damaged_one_are_normal_states(tmp_path: Path, command: list[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    damaged = tmp_path / "damaged"
    (damaged / "corrupt").mkdir(parents=True)
    (damaged / "corrupt" / "plan.json").write_text("{not json")
    (damaged / "unfinished").mkdir()
    (damaged / "unfinished" / "plan.json").write_bytes((FIXTURE / "plan.json").read_bytes())
    for root, skipped in ((empty, 0), (damaged, 2)):
        args = [a.replace("OUT", str(tmp_path / f"out-{root.name}")) for a in command]
        rc, _, err = results(args[0], root, *args[1:])
        assert rc == 0, err
        assert f"no readable runs yet ({skipped} skipped)" in err
        assert sum(line.startswith("skipped ") for line in err.splitlines()) == skipped


def test_one_bad_created_skips_that_run_only_and_a_naive_one_reads_as_utc(tmp_path: Path) -> None:
    make_run(tmp_path, "good", night=1)
    make_run(tmp_path, "naive", night=2, bundle=lambda b: b.update(created="2026-11-05T03:00:00"))
    make_run(tmp_path, "bad", night=3, bundle=lambda b: b.update(created="not a date"))
    for command in ("ls", "history", "index"):
        rc, out, err = results(command, tmp_path)
        assert rc == 0, (command, err)
        assert [ln for ln in err.splitlines() if ln.startswith("skipped")] == [
            f"skipped {tmp_path / 'bad'}: {tmp_path / 'bad' / 'bundle.json'}: created 'not a date' is not an ISO "
            "8601 time"]
    rc, out, _ = results("ls", tmp_path)
    assert listed(out) == ["good", "naive"]
    assert out.splitlines()[0].startswith("2026-11-05 03:00")  # the naive one, read as UTC, is the newest


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _outside(path: Path) -> None:
    secret = path.parent.parent.parent / "elsewhere.json"
    secret.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(secret)


def _deep(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def _deep_in_bundle(path: Path) -> None:
    b = load(path)
    b["aggregates"]["gsp"]["disabled"]["nest"] = 0
    save(path, b)
    path.write_text(path.read_text().replace('"nest": 0', '"nest": ' + "[" * 5000 + "]" * 5000))


@pytest.mark.parametrize(("file", "damage", "says"), [
    ("bundle.json", _fifo, "not a regular file"),
    ("records.jsonl", _fifo, "not a regular file"),
    ("plan.json", _fifo, "not a regular file"),
    ("bundle.json", _dev_zero, "a link leading out of"),
    ("records.jsonl", _dev_zero, "a link leading out of"),
    ("bundle.json", _outside, "a link leading out of"),
    ("bundle.json", _deep, "nested deeper than"),
    ("bundle.json", _deep_in_bundle, "nested deeper than"),
])
def test_an_unbounded_or_escaping_file_is_one_skipped_line(tmp_path: Path, file: str, damage: object,
                                                           says: str) -> None:
    root = tmp_path / "store"
    make_run(root, "good", night=1)
    bad = make_run(root, "bad", night=2)
    damage(bad / file)  # type: ignore[operator]
    rc, out, err = results("ls", root, timeout=30)  # a FIFO once hung here for ever; /dev/zero ran out of memory
    assert rc == 0, err
    assert listed(out) == ["good"]
    skipped = [ln for ln in err.splitlines() if ln.startswith("skipped")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped {bad}:") and says in skipped[0], skipped


def test_a_run_reached_by_links_loops_and_copies_is_counted_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    night = make_run(root, "nights/n1", night=1)
    (night / "loop").symlink_to("..")
    (root / "nights" / "self").symlink_to(".")
    (root / "latest").symlink_to("nights/n1")
    (root / "outside").symlink_to(FIXTURE.parent)  # a link leaving the root: not followed
    shutil.copytree(night, root / "copy-of-n1", symlinks=True)  # a plain copy, as a user would make
    rc, out, err = results("ls", root)
    assert rc == 0, err
    assert listed(out) in (["nights/n1"], ["copy-of-n1"])  # the first one found, once
    assert sum("the same run as" in ln for ln in err.splitlines()) == 1  # the copy (a link is not even entered)


@pytest.mark.parametrize("again", ["link", "copy"])
def test_a_link_or_copy_of_one_bad_night_is_not_the_two_the_history_rule_needs(tmp_path: Path, again: str) -> None:
    for i, ttft in enumerate((100.0, 101.0, 99.0, 150.0)):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(ttft))
    if again == "link":
        (tmp_path / "latest").symlink_to("n3")
    else:
        shutil.copytree(tmp_path / "n3", tmp_path / "n3-copy")
    rc, out, err = results("history", tmp_path, "--experiment", "smoke")
    # one slow night is not a regression (two are): at most undecided (exit 1, the trailing set split), never counted
    # twice into "regression"
    assert rc in (0, 1), out + err
    assert not [ln for ln in out.splitlines() if ln.startswith("regression")], out


def test_a_latest_night_without_a_finite_figure_is_no_data_not_ok(tmp_path: Path) -> None:
    for i in range(4):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0 + i))
    make_run(tmp_path, "n4", night=4, bundle=set_metric(math.nan))
    rc, out, err = results("history", tmp_path, "--json", tmp_path / "h.json")
    ttft = [ln for ln in out.splitlines() if " mean_ttft_ms " in ln]
    assert ttft and all(ln.startswith("no data") for ln in ttft), ttft
    assert rc == 1 and "without data on their latest run" in err


def test_terminal_escapes_in_run_names_are_shown_not_obeyed(tmp_path: Path) -> None:
    make_run(tmp_path, "evil\x1b]0;owned\x07\x1b[2J", night=1,
             plan=lambda p: p["config"].update(model={**p["config"]["model"], "name": "m\x1b[31mred\u202e"}))
    rc, out, err = results("ls", tmp_path)
    assert rc == 0
    assert "\x1b" not in out + err and "\x07" not in out
    assert "evil\\x1b]0;owned\\x07\\x1b[2J" in out and "m\\x1b[31mred\\u202e" in out


def _with_old_secret(b: dict[str, object]) -> None:
    b["checks"][0]["detail"] = f"server said: bad key {SECRET}"  # type: ignore[index]
    b["provenance"]["command"] = f"python -m hybridbench engine.api_key={SECRET}"  # type: ignore[index]


def test_export_masks_an_old_runs_secrets(tmp_path: Path) -> None:
    root = tmp_path / "store"
    run = make_run(root, "old", night=1, bundle=_with_old_secret,
                   plan=lambda p: p["config"]["engine"].update(api_key=SECRET))
    records = (run / "records.jsonl").read_text().splitlines()
    rec = json.loads(records[0])
    rec["error"] = f"401 for key {SECRET}"
    (run / "records.jsonl").write_text("".join(f"{ln}\n" for ln in [json.dumps(rec), *records[1:]]))
    rc, _, err = results("export", root, "-o", tmp_path / "out")
    assert rc == 0, err
    files = sorted((tmp_path / "out").glob("*.parquet"))
    assert {f.name for f in files} >= {"runs.parquet", "checks.parquet", "records.parquet"}
    masked = 0
    for f in files:
        text = pd.read_parquet(f).astype(str).to_csv()
        assert SECRET not in text, f.name
        masked += text.count("***")
    assert masked >= 2  # the check's detail and the record's error, masked rather than dropped


def test_show_masks_an_old_runs_secrets(tmp_path: Path) -> None:
    run = make_run(tmp_path, "old", night=1, bundle=_with_old_secret,
                   plan=lambda p: p["config"]["engine"].update(api_key=SECRET))
    show = cli("hybridbench.results", "show", run)
    assert show.returncode == 0, show.stderr
    assert SECRET not in show.stdout + show.stderr and "server said: bad key ***" in show.stdout


def test_history_json_masks_an_old_runs_secrets(tmp_path: Path) -> None:
    def leaky(p: dict[str, Any]) -> None:  # a key pasted into a field the history key shows
        p["config"]["engine"]["api_key"] = SECRET
        p["config"]["model"]["name"] = f"org/{SECRET}"

    for night in (1, 2, 3, 4):
        make_run(tmp_path, f"n{night}", night=night, bundle=_with_old_secret, plan=leaky)
    out = tmp_path / "history.json"
    rc, stdout, err = results("history", tmp_path, "--json", out)
    assert rc in (0, 1), err
    written = out.read_text()
    assert json.loads(written) and SECRET not in written + stdout + err


def test_a_rescored_run_is_marked_in_ls_and_show(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r", night=1)
    proc = cli("hybridbench.rescore", run, "checks.enabled=[survival]")
    assert proc.returncode == 0, proc.stderr
    rc, out, _ = results("ls", tmp_path)
    assert rc == 0 and "[re-scored, checks changed: checks.enabled=[survival]" in out
    show = cli("hybridbench.results", "show", run)
    assert "verdict pass [re-scored, checks changed" in show.stdout


@pytest.mark.parametrize(("overrides", "mark"), [
    (["'checks.enabled=[survival]'"], "scoring set on its command line: checks.enabled=[survival]"),
    (["checks.ttft_regression=1e308", "seed=3"], "scoring set on its command line: checks.ttft_regression=1e308"),
    (["engine.kl_threshold=0.5"], "scoring set on its command line: engine.kl_threshold=0.5"),
    # A reviewed checks group (the nightly's), and which clock is judged: the experiment's verdict, no mark.
    (["checks=strict"], None),
    (["engine.timing=wall"], None),
    # Where the nightly's accuracy questions live is what was measured, not how it is judged: no mark.
    (["+checks.accuracy_datasets.gsm8k=/data/gsm8k", "seed=3"], None),
])
def test_a_run_whose_own_command_line_set_its_scoring_is_marked(tmp_path: Path, overrides: list[str],
                                                                mark: str | None) -> None:
    def own(b: dict[str, object]) -> None:
        b["provenance"]["command"] = " ".join(["python -m hybridbench +experiment=smoke", *overrides])  # type: ignore[index]

    run = make_run(tmp_path, "r", night=1, bundle=own)
    rc, out, _ = results("ls", tmp_path)
    show = cli("hybridbench.results", "show", run)
    if mark is None:
        assert rc == 0 and "scoring set" not in out and "verdict pass;" in show.stdout, out
    else:
        assert rc == 0 and f"[{mark}]" in out, out
        assert f"verdict pass [{mark}]" in show.stdout


def test_no_workflow_run_is_marked_so_each_can_be_a_baseline() -> None:
    """Every hybridbench command in ci/*.yml as its bundle would record it: none sets how it is scored, so the
    nightly's runs stay `compare latest:` baselines."""
    from hybridbench.results.marks import scoring_overrides

    root = Path(__file__).resolve().parents[2]
    commands = [line.split("run:", 1)[1] for wf in sorted((root / "ci").glob("*.yml"))
                for line in wf.read_text().splitlines() if "run:" in line and "-m hybridbench " in line]
    assert len(commands) >= 6
    assert {c: scoring_overrides(c) for c in commands if scoring_overrides(c)} == {}


def test_the_whole_checks_block_replaced_on_the_command_line_marks_the_verdict() -> None:
    # checks={enabled:[survival]} narrows scoring as checks.enabled=[survival] does; only the dotted form was marked,
    # so a run scored on survival alone read as a plain pass (and could be compare's latest: baseline).
    from hybridbench.report.markdown import render_report
    from hybridbench.results.marks import scoring_overrides

    for cmd in ("python -m hybridbench +experiment=smoke checks={enabled:[survival]}",
                "python -m hybridbench +experiment=smoke ++checks={enabled:[survival]}",
                "python -m hybridbench +experiment=smoke checks.enabled=[survival]"):
        assert scoring_overrides(cmd) == [cmd.split()[-1]], cmd
    assert scoring_overrides("python -m hybridbench +experiment=smoke checks=strict") == []  # a reviewed group
    fixture = Path(__file__).resolve().parents[1] / "hybridbench" / "fixtures" / "runs" / "reference-smoke-kl"
    bundle = json.loads((fixture / "bundle.json").read_text())
    assert "Scoring set on its command line" not in render_report(bundle)
    bundle["provenance"]["command"] = "python -m hybridbench +experiment=smoke checks={enabled:[survival]}"
    assert "Scoring set on its command line: `checks={enabled:[survival]}`." in render_report(bundle)


def test_an_export_that_fails_half_way_leaves_the_last_export_whole(tmp_path: Path) -> None:
    # The parquet files were written one by one into -o: records DuckDB cannot read (a lone surrogate, from a trace
    # read before the reader refused one) failed the export after runs/trials/checks were rewritten, beside the
    # previous export's records: one selection's runs, another's records.
    good, bad = tmp_path / "good", tmp_path / "bad"
    make_run(good, "a", night=1)
    run = make_run(bad, "b", night=2)
    records = (run / "records.jsonl").read_text().splitlines()
    (run / "records.jsonl").write_text("".join(f"{ln}\n" for ln in records)
                                       + records[0].replace('"error": ""', '"error": "\\ud800"') + "\n")
    out = tmp_path / "out"
    rc, _, err = results("export", good, "-o", out)
    assert rc == 0, err
    before = {f.name: f.read_bytes() for f in out.glob("*.parquet")}
    rc, _, err = results("export", bad, "-o", out)
    assert rc == 2 and err.count("\n") == 1, err
    assert {f.name: f.read_bytes() for f in out.glob("*.parquet")} == before
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no temporary folder left behind


def _load(concurrency: int) -> Any:
    return lambda p: p["config"]["load"].update(max_concurrency=concurrency)


def test_a_load_changed_on_main_leaves_its_first_nights_unjudged_not_passed(tmp_path: Path) -> None:
    # Four nights of one load, then main's load changed (another concurrency: another series) and the code slowed
    # by half with it: the new series had no baseline ("insufficient data"), the old one still read "ok" of its last
    # nights, and history exited 0 -- the nights since the change judged by nothing, the slower code its baseline.
    for i in range(4):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0), plan=_load(4))
    make_run(tmp_path, "n4", night=4, bundle=set_metric(150.0), plan=_load(2))
    rc, out, err = results("history", tmp_path, "--json", tmp_path / "h.json")
    ttft = [ln for ln in out.splitlines() if " mean_ttft_ms " in ln]
    new = [ln for ln in ttft if ln.startswith("insufficient data")]
    assert new and all("the load changed on main at n4: load " in ln for ln in new), ttft
    assert all("ended at n3: later nights ran load " in ln for ln in ttft if ln.startswith("ok")), ttft
    assert rc == 1 and "after a load, GPU, model or engine change)" in err, err
    assert {s["load_change"] != "" for s in load(tmp_path / "h.json")["series"] if s["status"] != "ok"} == {True}
    # A load added beside one still running (both ran on night 4) has no earlier main to regress from: exit 0.
    make_run(tmp_path, "n4-old-load", night=4, bundle=set_metric(100.0), plan=_load(4))
    rc, out, err = results("history", tmp_path)
    assert rc == 0 and "the load changed" not in out, out + err
    shutil.rmtree(tmp_path / "n4-old-load")
    # Four nights at the new load judge themselves again (two of baseline, two judged).
    for i in range(5, 8):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(150.0), plan=_load(2))
    rc, out, err = results("history", tmp_path)
    assert rc == 0 and "insufficient data" not in out, out + err
    assert [ln.split()[0] for ln in out.splitlines() if " mean_ttft_ms " in ln and "load changed" in ln] == ["ok"] * 2

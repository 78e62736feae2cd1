"""python -m hybridbench.results over real run directories: index, ls with filters, show, export, history."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import MAIN_RUNS, ROOT, harness
from hb_in_process import call_main

from hybridbench.dashboard.trends import trend_page
from hybridbench.results.history import Point, Series, SeriesKey, change_points, hud_rule, judge
from hybridbench.results.reader import read_run
from hybridbench.results.store import load_store, run_row


def results(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench.results", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)


def results_here(*args: str) -> tuple[int, str, str]:
    """The same entry in this process (exit code, stdout, stderr): for what is not about the process. The other
    tests run the real ``python -m hybridbench.results`` (its exit codes, its stdout/stderr split)."""
    from hybridbench.results.cli import main

    proc = call_main(main, args)
    return proc.returncode, proc.stdout, proc.stderr


def _runs(stdout: str) -> list[str]:
    return sorted(line.split()[-1] for line in stdout.splitlines() if line.strip())


def test_index_merges_every_run_and_reports_bad_directories_in_one_line_each(results_root: Path) -> None:
    proc = results("index", str(results_root))
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in (results_root / "index.jsonl").read_text().splitlines()]
    assert sorted(Path(x["run_dir"]).name for x in lines) == sorted([*MAIN_RUNS, "pr-7", "old-schema"])
    skipped = proc.stderr.strip().splitlines()
    assert len(skipped) == 2
    assert any("corrupt" in s and "not JSON" in s for s in skipped)
    assert any(s.startswith("skipped ") and s.split(":")[0].endswith("unfinished") for s in skipped)


def test_ls_filters_by_branch_arm_engine_and_date(results_root: Path) -> None:
    every = results("ls", str(results_root))  # one real process: the filters below are the same entry in this one
    assert every.returncode == 0 and _runs(every.stdout) == sorted([*MAIN_RUNS, "pr-7", "old-schema"])

    def ls(*filters: str) -> list[str]:
        code, out, err = results_here("ls", str(results_root), *filters)
        assert code == 0, err
        return _runs(out)

    assert ls("--branch", "pr-7") == ["pr-7"]
    assert ls("--pr", "7") == ["pr-7"]
    assert ls("--arm", "no-such-arm") == []
    assert len(ls("--arm", "branching", "--engine", "sim")) == 7
    assert ls("--until", "2000-01-01") == []
    code, _, err = results_here("ls", str(results_root / "nope"))
    assert code == 2 and "not a directory of runs" in err


@pytest.mark.parametrize("command", [["ls"], ["history"], ["export", "-o", "OUT"]])
def test_a_bad_date_filter_is_one_line_before_any_run_is_read(results_root: Path, tmp_path: Path,
                                                              command: list[str]) -> None:
    # results_root holds two unreadable runs: scanning first printed a "skipped ..." line for each before the error
    # (a refusal's exit code and stderr: the entry in this process says the same as a fresh one)
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    for flag in ("--since", "--until"):
        code, out, err = results_here(argv[0], str(results_root), *argv[1:], flag, "someday")
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [f"error: {flag}: not a date or time: 'someday'"]
        assert not (tmp_path / "out").exists()


def test_show_prints_a_runs_figures_and_checks(results_root: Path) -> None:
    proc = results("show", str(results_root / "main-1"))
    assert proc.returncode == 0, proc.stderr
    assert "verdict pass" in proc.stdout and "survival" in proc.stdout and "token_hit_rate" in proc.stdout
    assert results("show", str(results_root / "unfinished")).returncode == 2


def test_export_writes_parquet_including_every_record_read_in_place(results_root: Path, tmp_path: Path) -> None:
    proc = results("export", str(results_root), "-o", str(tmp_path), "--branch", "main", "--experiment", "smoke")
    assert proc.returncode == 0, proc.stderr
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    assert sorted(runs["run"]) == sorted([*MAIN_RUNS, "old-schema"])
    records = pd.read_parquet(tmp_path / "records.parquet")
    expected = sum((results_root / r / "records.jsonl").read_text().count("\n") for r in runs["run"])
    assert len(records) == expected and {"ttft_ms", "cached_tokens", "filename"} <= set(records.columns)
    agg = pd.read_parquet(tmp_path / "aggregates.parquet")
    assert set(agg["run"]) == set(runs["run"]) and "mean_ttft_ms" in set(agg["metric"])


def test_history_flags_the_slowed_nights_and_exits_1(results_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "history.json"
    proc = results("history", str(results_root), "--experiment", "smoke", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the nightly runs' series (five points); the old-schema run sent another load: a series of its own
    series = [s for s in json.loads(out.read_text())["series"] if s["points"] == len(MAIN_RUNS)]
    by = {(s["workload"], s["arm"], s["metric"]): s for s in series}
    regressed = by[("gsp", "disabled", "mean_ttft_ms")]
    # Found like for like: the slower nights ran slower code, sized as every night before them.
    assert regressed["status"] == "regression" and "+2" in regressed["detail"], regressed
    assert regressed["sizing_changes"] == [] and "sizing" not in regressed["detail"]
    # The pull request's run is not a night of main: it is in no series (else six points).
    assert len(series) == 2 * 5  # two arms x five metrics
    assert by[("gsp", "disabled", "token_hit_rate")]["status"] == "ok"  # no cache, no change: nothing to flag


def _series(*nights: tuple[float, str]) -> Series:
    key = SeriesKey("smoke", "gsp", "disabled", "mean_ttft_ms", "qwen3-next-80b-a3b", "cpu", "sim", "f00d")
    return Series(key, tuple(Point(f"night-{i}", f"2026-11-{i + 1:02d}T00:00:00+00:00", v, sizing)
                             for i, (v, sizing) in enumerate(nights)))


def test_history_judges_a_night_only_against_nights_sized_alike() -> None:
    wide, narrow = (json.dumps({"engine.chunked_prefill_size": n, "engine.tp": 1}, sort_keys=True) for n in (8192, 64))
    # A sizing change that made main slower is the configuration's step, not the code's: the new sizing has no
    # baseline yet, and the verdict names the change (before: "regression", as if the code had slowed).
    step = judge(_series((100, wide), (100, wide), (100, wide), (125, narrow), (126, narrow)), tolerance=0.1)
    assert step.status == "insufficient data", step
    assert step.sizing_changes == ("night-3: engine.chunked_prefill_size 8192 -> 64",)
    assert "judged on the 2 of 5 point(s) sized as the latest run" in step.detail and "8192 -> 64" in step.detail
    # A faster sizing hid slower code: against the older, slower-sized nights the last two were "ok" (-5%, -4%);
    # against the two nights sized as they are, +19% and +20%.
    hidden = judge(_series((100, wide), (100, wide), (100, wide), (80, narrow), (80, narrow), (95, narrow),
                           (96, narrow)), tolerance=0.1)
    assert hidden.status == "regression" and "baseline median 80" in hidden.detail, hidden
    assert hud_rule([100, 100, 100, 80, 80, 95, 96], tolerance=0.1, higher_is_worse=True)[0] == "ok"
    # Nights whose sizing was not recorded count as alike; one sizing throughout changes nothing.
    assert judge(_series((100, ""), (100, ""), (100, wide), (125, wide), (126, wide)), tolerance=0.1).status \
        == "regression"
    # The gate (history's exit 1, the trends badge) holds a series the change left without the baseline it had; one
    # whose earlier sizing never had two nights (a new store resized on its second night) had none to lose.
    assert step.unjudged_after_resize
    young = judge(_series((100, wide), (125, narrow), (126, narrow)), tolerance=0.1)
    assert young.status == "insufficient data" and young.sizing_changes and not young.unjudged_after_resize, young
    same = judge(_series(*[(v, wide) for v in (100, 101, 99, 100, 125, 130)]), tolerance=0.1)
    assert same.status == "regression" and same.sizing_changes == () and "sizing" not in same.detail
    assert same.to_json()["sizing_changes"] == []


def test_the_store_records_each_runs_sizing(results_root: Path) -> None:
    sizing = json.loads(run_row(read_run(results_root / "main-1"), results_root)["sizing"])
    assert sizing["engine.chunked_prefill_size"] == 8192 and sizing["model.hf_id"]
    assert not [k for k in sizing if k.startswith(("load.", "seed", "checks."))]
    # A run saved before some sizing keys existed (engine.workload_scale, model.quantization, ...) ran at what they
    # now default to: sized alike, not a "sizing change" that would restart every series' baseline.
    old = read_run(results_root / "old-schema")
    assert "workload_scale" not in old.plan.config["engine"]
    assert json.loads(run_row(old, results_root)["sizing"]) == sizing


@pytest.mark.parametrize(
    ("values", "status"),
    [
        ([100, 101], "insufficient data"),
        ([100, 101, 99, 100, 125, 130], "regression"),
        # one bad night of the last two is not a regression, nor ok: the trailing set straddles the tolerance
        ([100, 101, 99, 100, 125, 100], "inconclusive"),
        ([100, 101, 99, 100, 104, 100], "ok"),
        ([100, 100, 100, 130, 131, 132, 100, 101, 100], "suspicious"),
    ],
)
def test_hud_rule(values: list[float], status: str) -> None:
    assert hud_rule(values, tolerance=0.1, higher_is_worse=True)[0] == status
    # throughput-like metrics: a rise is good, so the same rise is no regression
    if status == "regression":
        assert hud_rule(values, tolerance=0.1, higher_is_worse=False)[0] == "ok"


def test_change_points_find_a_step_and_ignore_noise() -> None:
    step = [10.0, 10.2, 9.9, 10.1, 10.0, 12.0, 12.1, 11.9, 12.2, 12.0]
    assert change_points(step) == [5]
    flat = [10.0, 10.2, 9.9, 10.1, 10.0, 10.1, 9.8, 10.2, 10.0, 9.9]
    assert change_points(flat) == []


def test_compare_takes_the_latest_passing_main_run_as_its_baseline(results_root: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench.compare", f"latest:{results_root}",
                           str(results_root / "pr-7"), "-o", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)
    assert f"baseline: {results_root / 'main-5'}" in proc.stderr, proc.stderr
    data = json.loads((tmp_path / "compare.json").read_text())
    assert data["base_dir"] == str(results_root / "main-5") and data["command"].startswith("python -m hybridbench")
    # main-5 and the pull request's run are sized alike and equally fast: nothing regressed.
    assert proc.returncode == 0, proc.stdout
    none = subprocess.run([sys.executable, "-m", "hybridbench.compare", f"latest:{results_root / 'pr-7'}",
                           str(results_root / "pr-7")], capture_output=True, text=True, timeout=300, check=False,
                          cwd=ROOT)
    assert none.returncode == 2 and "no passing main run" in none.stderr


@pytest.mark.parametrize(("text", "reason"), [('{"a": "x', "Unterminated string starting at line 1 column 7"),
                                              ('{"a": 1,', "Expecting property name enclosed in double quotes at "
                                                           "line 1 column 9")])
def test_a_run_file_that_is_not_json_is_named_with_its_position_once(tmp_path: Path, text: str, reason: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from hybridbench.results.cli import main

    (tmp_path / "plan.json").write_text(text)
    assert main(["show", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {tmp_path / 'plan.json'}: not JSON ({reason})"]


@pytest.mark.parametrize(("engine", "gpu", "names", "label"), [
    ("reference", "cpu", None, "cpu"),
    ("vllm", "cpu", None, "cpu"),  # the vLLM CPU build (tests/vllm_cpu)
    ("sglang", "h100", ["NVIDIA H100 80GB HBM3"] * 4, "4x NVIDIA H100 80GB HBM3"),
    ("sglang", "h100", None, "4x h100 (unrecorded)"),  # was "cpu": drawn beside CPU runs in history
    ("sim", "h100", None, "4x h100 (modelled)"),
    # saved before engine.gpu was normalised: the same label (and latest:ROOT baseline) as a new run's h100
    ("sglang", "H100", None, "4x h100 (unrecorded)"),
    ("sim", " H100", None, "4x h100 (modelled)"),
    ("vllm", "CPU", None, "cpu"),
])
def test_a_runs_gpu_label_says_what_ran_it(tmp_path: Path, engine: str, gpu: str, names: list[str] | None,
                                           label: str) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(ROOT / "tests/hybridbench/fixtures/runs/reference-smoke-kl", run_dir)
    plan = json.loads((run_dir / "plan.json").read_text())
    plan["engine"], plan["config"]["engine"]["gpu"], plan["config"]["engine"]["tp"] = engine, gpu, 4
    (run_dir / "plan.json").write_text(json.dumps(plan))
    bundle = json.loads((run_dir / "bundle.json").read_text())
    if names is not None:
        bundle["provenance"]["engine"]["extra"]["gpus"] = names
    (run_dir / "bundle.json").write_text(json.dumps(bundle))
    assert run_row(read_run(run_dir), tmp_path)["gpu"] == label


def test_history_exits_1_while_a_sizing_change_leaves_main_unjudged(results_root: Path, tmp_path: Path) -> None:
    # Three nights, then main's chunked prefill changed: the new nights had no baseline of their own ("insufficient
    # data") and history exited 0, so the nightly gate read "no regression" for every series it could no longer
    # judge; slower code landing in those nights became the new sizing's baseline, never flagged.
    root = tmp_path / "runs"
    for name in ("n1", "n2", "n3"):  # main-1..3 ran as harness(root / name) would: copies, not three more runs
        shutil.copytree(results_root / f"main-{name[1]}", root / name)
    code, _, err = results_here("history", str(root))
    assert code == 0, err  # a new store: nothing earlier to regress from, said on its last line
    assert ("with too few points to judge (0 after a sizing change, 0 after a load, GPU, model or engine change)"
            in err)
    for name in ("n4", "n5"):
        harness(root / name, "engine.chunked_prefill_size=4096")
    proc = results("history", str(root))
    assert proc.returncode == 1, proc.stderr
    assert ("10 with too few points to judge (10 after a sizing change, 0 after a load, GPU, model or engine change)"
            in proc.stderr)
    assert "engine.chunked_prefill_size 8192 -> 4096" in proc.stdout
    # The trends page shows those series as the gate reads them: undecided, not a grey skip.
    page = trend_page(load_store(root), root)
    assert page.count('<span class="v-inconclusive">insufficient data</span>') == 10
    assert '<span class="v-skip">' not in page

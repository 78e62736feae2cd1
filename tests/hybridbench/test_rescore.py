"""`python -m hybridbench.rescore`: metrics and checks again from a saved run's files alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.rescore.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
RUNS = Path(__file__).parent / "fixtures" / "runs"


def _verdicts(run: Path) -> list[tuple[str, str, str, str]]:
    checks = json.loads((run / "bundle.json").read_text())["checks"]
    return [(c["check"], c["workload"], c["arm"], c["status"]) for c in checks]


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sim run: lru is +3.3% TTFT against branching in both repeats (the simulator is deterministic)."""
    run = tmp_path_factory.mktemp("sim") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "arms=[branching,lru]", "repeats=2",
         "checks.min_token_hit_rate=0", f"hydra.run.dir={run}"],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return run


@pytest.fixture
def run_copy(sim_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(sim_run, tmp_path / "run"))


def test_same_settings_reproduce_the_same_bundle_and_report(run_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = json.loads((run_copy / "bundle.json").read_text())
    report = (run_copy / "report.md").read_text()
    records = (run_copy / "records.jsonl").read_bytes()
    assert main([str(run_copy)]) == 0
    after = json.loads((run_copy / "bundle.json").read_text())
    for key in ("checks", "verdict", "trials", "aggregates", "published", "baseline_arm"):
        assert json.dumps(after[key], sort_keys=True) == json.dumps(before[key], sort_keys=True), key
    assert after["rescored"]["overrides"] == []
    assert after["provenance"]["git_sha"] == before["provenance"]["git_sha"]  # the build that measured
    lines = (run_copy / "report.md").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("**Re-scored**"))
    assert "with the run's own settings" in lines[at]
    assert lines[:at] + lines[at + 2:] == report.splitlines()  # the same report, plus when it was re-scored
    assert (run_copy / "records.jsonl").read_bytes() == records  # what was measured is only read
    assert "verdict: **pass**" in capsys.readouterr().out


def test_a_tighter_threshold_fails_and_the_original_one_passes_again(run_copy: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    original = _verdicts(run_copy)
    assert main([str(run_copy), "checks.ttft_regression=0.02"]) == 1
    bundle = json.loads((run_copy / "bundle.json").read_text())
    assert bundle["verdict"] == "fail" and bundle["provenance"]["config"]["checks"]["ttft_regression"] == 0.02
    assert ("ttft", "gsp", "lru", "fail") in _verdicts(run_copy)
    assert "| ttft | gsp | lru | **FAIL** |" in (run_copy / "report.md").read_text()
    assert "`checks.ttft_regression=0.02`" in (run_copy / "report.md").read_text()
    # Back to the run's own settings (0.10): the first verdicts, exactly.
    assert main([str(run_copy), "checks.ttft_regression=0.05"]) == 0
    assert _verdicts(run_copy) == original


def test_other_checks_and_other_baseline(run_copy: Path) -> None:
    assert main([str(run_copy), "checks.enabled=[survival,cache_hits]", "checks.min_token_hit_rate=0.2"]) == 1
    assert {v[0] for v in _verdicts(run_copy)} == {"survival", "cache_hits"}
    assert ("cache_hits", "gsp", "lru", "fail") in _verdicts(run_copy)
    assert main([str(run_copy), "checks.baseline_arm=lru"]) == 0
    bundle = json.loads((run_copy / "bundle.json").read_text())
    assert bundle["baseline_arm"] == "lru"
    assert ("ttft", "gsp", "branching", "pass") in _verdicts(run_copy)  # branching is now the candidate


def test_a_straddling_interval_rescores_inconclusive_not_pass(run_copy: Path) -> None:
    """lru's TTFT +30% in one repeat and -20% in the other: a +5% mean whose interval reaches past +10% and below
    it. The old rule (fail only wholly past the limit) passed it; a re-scoring says it decided nothing."""
    lines = [json.loads(x) for x in (run_copy / "records.jsonl").read_text().splitlines()]
    for r in lines:
        if r["arm"] == "lru" and r["first_token_s"] is not None:
            scale = 1.3 if r["repeat"] == 0 else 0.8
            r["first_token_s"] = r["sent_s"] + (r["first_token_s"] - r["sent_s"]) * scale
            r["end_s"] = max(r["end_s"], r["first_token_s"])
    (run_copy / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main([str(run_copy)]) == 1
    bundle = json.loads((run_copy / "bundle.json").read_text())
    (row,) = [c for c in bundle["checks"] if c["check"] == "ttft"]
    assert row["status"] == "inconclusive" and row["low"] < row["limit"] < row["high"]
    assert bundle["verdict"] == "inconclusive" and "**INCONCLUSIVE**" in (run_copy / "report.md").read_text()


def test_checks_that_all_skip_rescore_inconclusive_not_pass(run_copy: Path) -> None:
    # The run has no hit-rate floor: cache_hits shows the rates, judges nothing, and a verdict made of skips alone
    # decided nothing.
    assert main([str(run_copy), "checks.enabled=[cache_hits]"]) == 1
    assert {v[3] for v in _verdicts(run_copy)} == {"skip"}
    assert json.loads((run_copy / "bundle.json").read_text())["verdict"] == "inconclusive"


def test_kl_enabled_on_a_run_that_never_ran_its_probe_rescores_inconclusive_not_pass(run_copy: Path) -> None:
    # The run never ran the kl probe (kl was not enabled; the sim cannot serve it): a re-scoring that enables kl has
    # no sample to judge. Its rows were skips ("the engine has no prompt logprobs"), and the run passed on survival.
    assert main([str(run_copy), "checks.enabled=[survival,kl]"]) == 1
    rows = [v for v in _verdicts(run_copy) if v[0] == "kl"]
    assert rows and {v[3] for v in rows} == {"inconclusive"}, rows
    bundle = json.loads((run_copy / "bundle.json").read_text())
    assert bundle["verdict"] == "inconclusive"
    assert all("did not run" in c["detail"] for c in bundle["checks"] if c["check"] == "kl"), bundle["checks"]


def test_a_check_the_arms_give_nothing_to_judge_rescores_inconclusive_not_pass(run_copy: Path) -> None:
    # host_hits with no l2 arm: the plan refuses it for a new run; a re-scoring's arms are fixed, so it is said in
    # an inconclusive row. It was a skip, and the run passed on survival alone.
    assert main([str(run_copy), "checks.enabled=[survival,host_hits]"]) == 1
    bundle = json.loads((run_copy / "bundle.json").read_text())
    (row,) = [c for c in bundle["checks"] if c["check"] == "host_hits"]
    assert row["status"] == "inconclusive" and "no arm has one" in row["detail"], row
    assert bundle["verdict"] == "inconclusive"


def test_records_lost_at_a_line_boundary_fail_survival_not_a_traceback(run_copy: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # A run killed between two appends keeps whole lines only: three trials then have no records at all.
    lines = (run_copy / "records.jsonl").read_text().splitlines(keepends=True)
    (run_copy / "records.jsonl").write_text("".join(lines[:5]))
    assert main([str(run_copy)]) == 1
    assert json.loads((run_copy / "bundle.json").read_text())["verdict"] == "fail"
    assert {v[3] for v in _verdicts(run_copy) if v[0] == "survival"} == {"fail"}
    assert "5 of 18 planned requests recorded" in capsys.readouterr().out


def test_the_first_harness_run_rescores(tmp_path: Path) -> None:
    run = Path(shutil.copytree(RUNS / "fbde869-smoke-sim", tmp_path / "old"))
    # one repeat a side: its TTFT and throughput rows (a pass under the old rule) decide nothing now
    assert main([str(run)]) == 1
    bundle = json.loads((run / "bundle.json").read_text())
    assert bundle["schema_version"] == 1 and "rescored" in bundle and bundle["verdict"] == "inconclusive"
    assert {c["status"] for c in bundle["checks"] if c["check"] in ("ttft", "throughput")} == {"inconclusive"}
    assert main([str(run), "checks.enabled=[survival,cache_hits]"]) == 0
    assert main([str(run), "checks.min_token_hit_rate=0.99"]) == 1


def test_a_reference_run_rescores_its_kl_samples(tmp_path: Path) -> None:
    run = Path(shutil.copytree(RUNS / "reference-smoke-kl", tmp_path / "ref"))
    original = [v for v in _verdicts(run) if v[0] != "ttft" and v[0] != "throughput"]
    # one repeat: the timing rows are inconclusive now; every other verdict re-scores as it was
    assert main([str(run), "checks.enabled=[survival,cache_hits,kl]"]) == 0
    assert _verdicts(run) == original and any(v[0] == "kl" for v in original)
    assert main([str(run), "engine.kl_threshold=1e-15"]) == 1  # the saved samples' k3 is ~1e-12
    assert {v[3] for v in _verdicts(run) if v[0] == "kl"} == {"fail"}


def test_kl_short_of_its_planned_samples_is_inconclusive_in_the_run_and_its_rescoring(tmp_path: Path) -> None:
    # smoke's trace holds 18 distinct prompts; checks.kl_samples=20 plans 20 a variant. The run measured 18 hits and
    # passed as "more than half" of the 18 gathered; the run and its re-scoring now both say 18 of 20, inconclusive.
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=reference", "arms=[branching]",
         "checks.enabled=[survival,kl]", "checks.kl_samples=20", "checks.kl_variants=[prefill]", "repeats=1",
         f"hydra.run.dir={run}"], capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr[-2000:]
    ran = [c for c in json.loads((run / "bundle.json").read_text())["checks"] if c["check"] == "kl"]
    assert [(c["status"], c["observed"]) for c in ran] == [("inconclusive", None)], ran
    assert "18 of 20 planned sample(s) measured" in ran[0]["detail"], ran
    assert main([str(run)]) == 1
    rescored = [c for c in json.loads((run / "bundle.json").read_text())["checks"] if c["check"] == "kl"]
    assert rescored == ran


@pytest.mark.parametrize(("args", "needle"), [
    (["load.max_concurrency=1"], "load.max_concurrency decided what the run measured"),
    # The kl probe read these while the run was live; re-scoring with them changed nothing but the report's config.
    (["checks.kl_variants=[prefill]"], "checks.kl_variants decided what the run measured"),
    (["checks.kl_samples=9"], "checks.kl_samples decided what the run measured"),
    # The accuracy probe's settings chose the questions and how they were asked: accepted, they changed nothing and
    # showed in provenance.config as if they had (accuracy_mode=bogus too: only the probe validates it).
    (["checks.accuracy_limit=3"], "checks.accuracy_limit decided what the run measured"),
    (["checks.accuracy_mode=bogus"], "checks.accuracy_mode decided what the run measured"),
    (["checks.accuracy_datasets.gsm8k=/data/gsm8k"], "checks.accuracy_datasets.gsm8k decided what the run measured"),
    (["checks.nope=1"], "override checks.nope: no such key"),
    (["checks.ttft_regression=abc"], "checks.ttft_regression"),
    (["checks.bootstrap_samples=5"], "checks.bootstrap_samples must be"),
    (["checks.confidence=0.999999"], "checks.confidence must be a finite number in [0.5, 0.99], got 0.999999"),
    (["checks.enabled=[ttft,nope]"], "checks.enabled: unknown check(s) nope"),
    (["checks.enabled=[survival,ttft,survival]"], "checks.enabled: survival listed more than once"),
    (["checks.baseline_arm=seglen"], "checks.baseline_arm: 'seglen' is not one of the run's arms"),
    (["ttft_regression"], "expected key=value"),
    # a simulator run has no reference-server modelled clock to judge (nor would a GPU engine be judged on one)
    (["engine.timing=modelled"], "engine.timing=modelled: engine 'sim' reports no modelled time"),
    (["engine.timing=cpu"], "engine.timing: expected one of wall, modelled"),
])
def test_bad_overrides_are_one_line_and_exit_2(run_copy: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                               needle: str) -> None:
    before = (run_copy / "bundle.json").read_bytes()
    assert main([str(run_copy), *args]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert (run_copy / "bundle.json").read_bytes() == before


def test_unreadable_runs_are_one_line_and_exit_2(run_copy: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bundle = json.loads((run_copy / "bundle.json").read_text())
    (run_copy / "bundle.json").write_text(json.dumps({**bundle, "schema_version": 2}))
    assert main([str(run_copy)]) == 2
    assert main([str(tmp_path / "nowhere")]) == 2
    (run_copy / "bundle.json").unlink()
    assert main([str(run_copy)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 3 and "bundle schema version 2 is newer" in err[0]
    assert "not a run directory" in err[1] and "bundle.json: missing" in err[2]


def test_a_run_dir_that_cannot_take_the_report_is_one_line_and_keeps_its_bundle(
        run_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # bundle.json was rewritten with the new verdict, then report.md raised IsADirectoryError: a traceback, and a
    # new verdict beside the old report.
    before = (run_copy / "bundle.json").read_bytes()
    (run_copy / "report.md").unlink()
    (run_copy / "report.md").mkdir()
    assert main([str(run_copy), "checks.ttft_regression=0.02"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "report.md: is a directory" in err[0], err
    assert (run_copy / "bundle.json").read_bytes() == before
    assert not [p for p in run_copy.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_the_module_runs_from_the_command_line(run_copy: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench.rescore", str(run_copy), "checks.ttft_regression=0.02"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert proc.returncode == 1 and "verdict: **fail**" in proc.stdout, proc.stderr


def test_the_index_beside_the_run_reads_typed(sim_run: Path, tmp_path: Path) -> None:
    from hybridbench.errors import ConfigError
    from hybridbench.results import read_index, read_run

    entries = read_index(sim_run.parent / "index.jsonl")
    assert [e.path for e in entries] == [sim_run]
    entry, run = entries[0], read_run(sim_run)
    assert run.bundle is not None
    assert (entry.verdict, entry.engine, entry.arms, entry.modelled) == ("pass", "sim", ("branching", "lru"), True)
    assert entry.plan_fingerprint == run.plan.fingerprint and entry.failed_checks == ()
    assert entry.rescored == ""
    copy = Path(shutil.copytree(sim_run, tmp_path / "runs" / "run"))
    assert main([str(copy), "checks.ttft_regression=0.02"]) == 1
    (again,) = read_index(copy.parent / "index.jsonl")  # the copy's own index: one line, the re-scored verdict
    assert again.verdict == "fail" and again.rescored and again.failed_checks == ("ttft:gsp:lru",)
    bad = tmp_path / "index.jsonl"
    bad.write_text((sim_run.parent / "index.jsonl").read_text() + '{"name": "x"}\n')
    with pytest.raises(ConfigError, match=r"index.jsonl:2: not an index line \(missing key 'run_dir'\)"):
        read_index(bad)


@pytest.fixture(scope="module")
def kl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real reference-server run with the kl probe: its bundle says how many samples each trial wrote."""
    run = tmp_path_factory.mktemp("kl") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=reference", "checks.enabled=[survival,kl]",
         "repeats=1",
         "checks.kl_samples=1", f"hydra.run.dir={run}"],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run


@pytest.mark.parametrize("keep", [0, 2, None])
def test_a_samples_file_that_lost_lines_is_refused_not_skipped_into_a_pass(
        kl_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], keep: int | None) -> None:
    # Before, kl.jsonl cut short or deleted left the kl check without samples (a skip) and the run a pass.
    run = Path(shutil.copytree(kl_run, tmp_path / "run"))
    written = {t["trial_id"]: t["server"].get("samples_written") for t in json.loads((run / "bundle.json").read_text())
               ["trials"]}
    assert written == {"000-gsp-disabled-r0": None, "001-gsp-branching-r0": {"kl": 3}}
    lines = (run / "kl.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 3
    if keep is None:
        (run / "kl.jsonl").unlink()
    else:
        (run / "kl.jsonl").write_text("".join(lines[:keep]))
    assert main([str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"kl.jsonl: holds {keep or 0} of the 3 kl sample(s) trial 001-gsp-branching-r0" in err[0]
    assert main([str(Path(shutil.copytree(kl_run, tmp_path / "whole")))]) == 0


def test_a_saved_value_a_later_rule_refuses_is_named_as_saved_and_an_override_rescores_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # checks.confidence was bounded to [0.5, 0.99] after runs saved with 0.999 existed: re-scoring such a run with no
    # override at all was refused in words that blamed an override.
    run = Path(shutil.copytree(RUNS / "fbde869-smoke-sim", tmp_path / "old"))
    plan = json.loads((run / "plan.json").read_text())
    plan["config"]["checks"]["confidence"] = 0.999
    (run / "plan.json").write_text(json.dumps(plan))
    assert main([str(run)]) == 2
    err = capsys.readouterr().err
    assert "checks.confidence must be a finite number in [0.5, 0.99], got 0.999" in err
    assert "the value the run was saved with; override the key to re-score it" in err
    assert main([str(run), "checks.confidence=0.999999"]) == 2  # an override's own bad value: no such note
    assert "saved with" not in capsys.readouterr().err
    assert main([str(run), "checks.confidence=0.95"]) == 1  # re-scored (one repeat: timing rows inconclusive)

"""The typed results reader: every run shape the project has written, frozen values, one-line refusals."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from hybridbench.errors import ConfigError
from hybridbench.results import read_run
from hybridbench.results.reader import read_records

RUNS = Path(__file__).parent / "fixtures" / "runs"


def test_reads_the_first_bundle_ever_written() -> None:
    run = read_run(RUNS / "fbde869-smoke-sim")
    assert run.plan.engine == "sim" and run.plan.arms == ("disabled", "branching")
    assert run.plan.model == "qwen3-next-80b-a3b" and run.plan.baseline_arm == "disabled"
    assert [t.trial.trial_id for t in run.trials] == ["000-gsp-disabled-r0", "001-gsp-branching-r0"]
    assert all(len(t.records) == 18 and t.result is not None for t in run.trials)
    bundle = run.bundle
    assert bundle is not None and bundle.verdict == "pass" and bundle.modelled
    assert bundle.published == () and bundle.rescored is None  # keys that came later read as empty
    assert bundle.provenance.engine.name == "sim" and bundle.provenance.plan_fingerprint == run.plan.fingerprint
    assert {(c.check, c.arm, c.status) for c in bundle.checks} >= {("cache_hits", "branching", "pass")}
    assert bundle.aggregates["gsp"]["branching"]["token_hit_rate"] > 0.3
    assert run.kl_samples == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        bundle.verdict = "fail"  # type: ignore[misc]


def test_reads_a_reference_run_with_its_kl_samples() -> None:
    run = read_run(RUNS / "reference-smoke-kl")
    assert run.plan.engine == "reference"
    assert {s.variant for s in run.kl_samples} == {"prefill", "decode", "branch"}
    assert all(s.arm == "branching" and s.hit and s.kl is not None for s in run.kl_samples)
    assert len(run.records_of("gsp", "branching")) == 18 and run.missing_trials("gsp", "branching") == 0


def _copy(tmp_path: Path, name: str = "fbde869-smoke-sim") -> Path:
    return Path(shutil.copytree(RUNS / name, tmp_path / name))


@pytest.mark.parametrize("name", ["bundle.json", "plan.json"])
def test_a_newer_schema_version_is_refused_naming_the_file(tmp_path: Path, name: str) -> None:
    run = _copy(tmp_path)
    data = json.loads((run / name).read_text())
    (run / name).write_text(json.dumps({**data, "schema_version": 2}))
    with pytest.raises(ConfigError, match=rf"{name}: .* schema version 2 is newer than this hybridbench reads"):
        read_run(run)


def test_a_newer_record_version_is_refused_naming_the_line(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    lines = (run / "records.jsonl").read_text().splitlines()
    lines[4] = json.dumps({**json.loads(lines[4]), "schema_version": 7})
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"records.jsonl:5: record schema version 7 is newer"):
        list(read_records(run / "records.jsonl"))


@pytest.mark.parametrize(("file", "field", "value", "needle"), [
    ("records.jsonl", "repeat", "0", "records.jsonl:5: not a record (field 'repeat' is '0', not int)"),
    ("records.jsonl", "cached_tokens", "x", "not a record (field 'cached_tokens' is 'x', not int | None)"),
    ("records.jsonl", "prompt_tokens", None, "not a record (field 'prompt_tokens' is None, not int)"),
    ("records.jsonl", "status", "weird", "field 'status' is 'weird', not Literal['ok', 'error'"),
    ("records.jsonl", "sent_s", "NaN", "field 'sent_s' is nan"),
    ("records.jsonl", "itl_ms", 5, "field 'itl_ms' is 5, not list[float]"),
    ("kl.jsonl", "variant", "weird", "kl.jsonl:2: not a KL sample (field 'variant' is 'weird'"),
    ("kl.jsonl", "hit_logprobs", ["a"], "not a KL sample (field 'hit_logprobs' is ['a'], not list[float])"),
    ("kl.jsonl", "ref_logprobs", [-1.0], "not a KL sample (16 hit_logprobs but 1 ref_logprobs)"),
])
def test_a_field_of_the_wrong_type_is_one_line_naming_file_line_and_field(tmp_path: Path, file: str, field: str,
                                                                        value: object, needle: str) -> None:
    # Records and samples were built without a type check: a string count crashed a metric with a traceback, and a
    # string repeat or an unknown variant scored as if it were valid.
    run = Path(shutil.copytree(RUNS / "reference-smoke-kl", tmp_path / "run"))
    lines = (run / file).read_text().splitlines()
    at = 4 if file == "records.jsonl" else 1
    lines[at] = json.dumps({**json.loads(lines[at]), field: float("nan") if value == "NaN" else value})
    (run / file).write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        read_run(run)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda b: b["checks"][0].update(status="maybe"), "checks[0]: status 'maybe'"),
    (lambda b: b["trials"][1].update(repeat="0"), "trials[1]: not a hybridbench bundle (repeat must be int"),
    (lambda b: b.update(schema_version="one"), "schema_version 'one' is not a bundle schema version"),
    (lambda b: b["trials"].append({**b["trials"][0], "state": "engine died"}), "is listed twice"),
    (lambda b: b["provenance"].update(engine=[]), "provenance: engine: not a hybridbench bundle"),
])
def test_a_malformed_bundle_is_one_line_naming_the_key(tmp_path: Path, edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    run = _copy(tmp_path)
    bundle = json.loads((run / "bundle.json").read_text())
    edit(bundle)
    (run / "bundle.json").write_text(json.dumps(bundle))
    with pytest.raises(ConfigError) as err:
        read_run(run)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_bundle_of_another_run_is_refused_naming_both_fingerprints(tmp_path: Path) -> None:
    # A run killed before scoring, synced over the directory of an earlier one, kept that run's bundle.json: its
    # GPUs, trial states, server snapshots, verdict and figures were read as this run's (compare, history, ls).
    run = Path(shutil.copytree(RUNS / "fbde869-smoke-sim", tmp_path / "run"))
    bundle = json.loads((run / "bundle.json").read_text())
    bundle["provenance"]["plan_fingerprint"] = "0123456789abcdef"
    (run / "bundle.json").write_text(json.dumps(bundle))
    with pytest.raises(ConfigError, match=r"bundle.json: another run's bundle \(plan_fingerprint '0123456789abcdef'; "
                                          r"plan.json's fingerprint is '79e8ede2a911f89a'\)"):
        read_run(run)

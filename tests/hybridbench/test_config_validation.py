"""Every config number is range-checked at plan time (issue 13): a value that would switch a gate off, end in an
internal error or plan unbounded work is one line naming the key, exit 2, before anything is written."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.config.schema import RunCfg, WorkloadCfg
from hybridbench.config.validate import RULES, check_unread_keys, validate_config
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan
from hybridbench.results.run_dir import claim_run_dir

ROOT = Path(__file__).resolve().parents[2]

# (key, bad value, what the message must say): each once reached a run (issue 13's audit).
BAD = [
    ("checks.bootstrap_samples", 0, "in [100, 1000000]"),  # turned a +19% TTFT regression into a pass
    ("checks.bootstrap_samples", -5, "in [100, 1000000]"),
    ("checks.bootstrap_samples", 99, "in [100, 1000000]"),
    ("checks.ttft_regression", float("nan"), "expected a number, got nan"),
    ("checks.ttft_regression", float("inf"), ">= 0"),
    ("checks.ttft_regression", -0.1, ">= 0"),
    ("checks.throughput_regression", float("nan"), "got nan"),
    ("checks.throughput_regression", 1.0, "in [0, 1)"),  # a -99.9% throughput passed: no drop can exceed 100%
    ("checks.throughput_regression", 10.0, "in [0, 1)"),  # 10%'s typo
    ("checks.accuracy_tolerance", 1.0, "in [0, 1)"),  # no drop exceeds it: 1%'s typo passed half the answers lost
    ("checks.confidence", 0.0, "in [0.5, 0.99]"),  # a zero-width interval
    ("checks.confidence", -1.0, "in [0.5, 0.99]"),  # an inverted one
    ("checks.confidence", 1.0, "in [0.5, 0.99]"),
    ("checks.confidence", 0.999999, "in [0.5, 0.99]"),  # so wide no regression could fail it: a wrong pass
    ("checks.confidence", 0.3, "in [0.5, 0.99]"),
    ("checks.confidence", float("nan"), "got nan"),
    ("checks.min_token_hit_rate", 1.5, "in [0, 1]"),
    ("checks.min_token_hit_rate", float("nan"), "got nan"),
    ("checks.kl_min_hit_fraction", -0.5, "in [0, 1]"),
    ("checks.min_prefill_throughput_ratio", float("inf"), ">= 0"),
    ("checks.kl_samples", 0, "in [1, 10000]"),
    ("checks.kl_temperature", -1.0, ">= 0"),
    ("engine.kv_tokens", -5, ">= 0"),  # was "internal ValueError: KV pool size must be positive"
    ("engine.max_mamba_cache_size", -1, ">= 0"),
    ("engine.port", 99999, "in [0, 65535]"),
    ("engine.port", -1, "in [0, 65535]"),
    ("engine.mem_fraction_static", 0.0, "in (0, 1]"),
    ("engine.startup_timeout_s", float("inf"), "> 0"),
    ("engine.request_timeout_s", 0.0, "> 0"),
    ("engine.health_timeout_s", 0.0, "> 0"),
    ("engine.kl_threshold", float("nan"), "got nan"),
    ("engine.max_vocab", -3, ">= 0"),
    ("engine.workload_scale", 0, ">= 1"),
    ("engine.tp", 0, ">= 1"),
    ("model.vocab_size", 0, "in [2, "),
    ("seed", 2**64, "in [-9223372036854775808, 9223372036854775807]"),  # beyond the reference server's int64
    ("seed", -(2**63) - 1, "in [-9223372036854775808"),
    ("repeats", 0, ">= 1"),
    ("repeats", 100_000_000, "200000000 trials; one run plans at most 10000"),  # grew to gigabytes, silently
    ("load.request_rate", float("nan"), "got nan"),
    ("load.slowdown", float("nan"), "got nan"),
    ("arm.seglen.eff_weight", float("nan"), "got nan"),
]


def _cfg_with(key: str, value: object) -> RunCfg:
    cfg = RunCfg(arms=["disabled", "lru"], workloads={"gsp": WorkloadCfg(kind="gsp")})
    *parents, leaf = key.split(".")
    node: object = cfg
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, value)
    return cfg


@pytest.mark.parametrize(("key", "value", "needle"), BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_each_bad_value_is_refused_at_plan_time_naming_its_key(key: str, value: object, needle: str,
                                                               tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_plan(_cfg_with(key, value), tmp_path, {})
    message = str(err.value)
    assert message.startswith(key) and needle in message and "\n" not in message
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_shipped_defaults_and_every_rule_boundary_are_accepted(tmp_path: Path) -> None:
    validate_config(RunCfg(workloads={"gsp": WorkloadCfg()}))
    for key, rule in RULES.items():
        for edge, is_open in ((rule.lo, rule.lo_open), (rule.hi, rule.hi_open)):
            if not is_open and abs(edge) != float("inf"):
                validate_config(_cfg_with(key, type(_get(RunCfg(), key))(edge)))


def _get(cfg: object, key: str) -> object:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_nan_in_workload_parameters_names_the_parameter() -> None:
    cfg = RunCfg(workloads={"gsp": WorkloadCfg(params={"prefix_fraction": float("nan")})})
    with pytest.raises(ConfigError, match=r"^workloads\.gsp\.params\.prefix_fraction: expected a number, got nan$"):
        validate_config(cfg)


def hb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)


@pytest.mark.parametrize(("override", "needle"), [
    ("checks.bootstrap_samples=0", "checks.bootstrap_samples must be a finite number in [100, 1000000], got 0"),
    ("checks.confidence=nan", "checks.confidence: expected a number, got nan"),
    ("engine.port=99999", "engine.port must be a finite number in [0, 65535], got 99999"),
    ("repeats=100000000",
     "repeats: 100000000 repeats x 2 arm(s) x 1 workload(s) = 200000000 trials; one run plans at most 10000"),
])
def test_on_the_command_line_a_bad_value_is_one_line_exit_2_and_no_files(override: str, needle: str,
                                                                         tmp_path: Path) -> None:
    proc = hb("+experiment=smoke", "engine=sim", override, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {needle}", proc.stderr
    assert not (tmp_path / "run").exists()  # not even Hydra's empty job log: a refused run leaves nothing


def test_a_refusal_keeps_whatever_the_run_dir_already_held(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "__main__.log").write_text("[submitit][INFO] - Job completed successfully\n")
    (run / "notes.txt").write_text("mine")
    proc = hb("+experiment=smoke", "engine=sim", "engine.port=99999", f"hydra.run.dir={run}")
    assert proc.returncode == 2
    assert (run / "notes.txt").read_text() == "mine" and (run / "__main__.log").read_text().startswith("[submitit]")


def test_a_run_dir_that_is_a_file_is_one_line_not_a_flattened_traceback(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    proc = hb("+experiment=smoke", "engine=sim", f"hydra.run.dir={tmp_path / 'file'}")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: hydra.run.dir: cannot create the run directory")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_reused_run_dir_is_refused_unless_overwrite_and_then_holds_one_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert hb("+experiment=smoke", "engine=sim", f"hydra.run.dir={run}").returncode == 0
    first = (run / "records.jsonl").read_text()
    again = hb("+experiment=smoke", "engine=sim", f"hydra.run.dir={run}")
    assert again.returncode == 2 and "already holds files" in again.stderr and "overwrite=true" in again.stderr
    assert (run / "records.jsonl").read_text() == first  # untouched: no second run appended to it
    replaced = hb("+experiment=smoke", "engine=sim", "overwrite=true", f"hydra.run.dir={run}")
    assert replaced.returncode == 0, replaced.stderr
    assert len((run / "records.jsonl").read_text().splitlines()) == len(first.splitlines())
    bundle = json.loads((run / "bundle.json").read_text())
    assert sum(t["summary"]["completed"] for t in bundle["trials"]) == len(first.splitlines())


def test_overwrite_never_empties_a_directory_that_holds_no_run(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")
    with pytest.raises(ConfigError, match="no hybridbench run"):
        claim_run_dir(tmp_path, overwrite=True)
    assert (tmp_path / "thesis.tex").read_text() == "years of work"
    (tmp_path / "__main__.log").write_text("")  # Hydra's own log, opened before the run: not a previous run
    (tmp_path / "thesis.tex").unlink()
    claim_run_dir(tmp_path, overwrite=False)


def test_overwrite_removes_a_runs_files_and_nothing_else(tmp_path: Path) -> None:
    """A directory with a plan.json and anything else (a checkout: hydra.run.dir=. overwrite=true) was emptied whole."""
    for name in ("plan.json", "records.jsonl", "bundle.json", "report.md", "kl.jsonl", ".records.jsonl.x1y2_3z4"):
        (tmp_path / name).write_text("{}")
    for folder in ("traces", "logs", "accuracy"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "f").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "keep.txt").write_text("mine")
    (tmp_path / ".plan.json.bak").write_text("mine too")  # not an atomic writer's leftover: those end in 8 characters
    with pytest.raises(ConfigError, match=r"holds a run and files no run writes \(\.git, \.plan\.json\.bak, sub\)"):
        claim_run_dir(tmp_path, overwrite=True)
    assert (tmp_path / ".git" / "HEAD").is_file() and (tmp_path / "sub" / "keep.txt").is_file()
    assert (tmp_path / "records.jsonl").is_file()  # nothing removed when refused
    shutil.rmtree(tmp_path / ".git")
    shutil.rmtree(tmp_path / "sub")
    (tmp_path / ".plan.json.bak").unlink()
    (tmp_path / "traces.lnk").symlink_to(tmp_path / "traces")
    with pytest.raises(ConfigError, match=r"files no run writes \(traces\.lnk\)"):  # a run writes no link
        claim_run_dir(tmp_path, overwrite=True)
    (tmp_path / "traces.lnk").unlink()
    claim_run_dir(tmp_path, overwrite=True)
    assert list(tmp_path.iterdir()) == []


def test_model_quantization_is_an_sglang_name_or_refused_at_plan_time(tmp_path: Path) -> None:
    """model.quantization takes SGLang's --quantization names (the SGLang tier checks the list against the real
    builds' parsers); the simulator models a subset of them. engine=sglang defers to its build's --help."""
    from hybridbench.config.quantization import SGLANG_QUANTIZATIONS
    from reference_impl.engine.cost_model import QUANTIZATIONS

    assert set(QUANTIZATIONS) <= SGLANG_QUANTIZATIONS
    for name in ("fp8", "w8a8_fp8", "awq", ""):
        validate_config(_cfg_with("model.quantization", name))
    for name in ("fp9", "FP8", "int4"):
        with pytest.raises(ConfigError) as err:
            build_plan(_cfg_with("model.quantization", name), tmp_path, {})
        assert str(err.value).startswith(f"model.quantization: {name!r} is not an SGLang --quantization name")
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
    sglang = _cfg_with("model.quantization", "fp9")
    sglang.engine.name = "sglang"
    validate_config(sglang)  # the installed build's --help decides (test_sglang_real_help.py)


@pytest.mark.parametrize(("key", "value", "where", "needle"), [
    ("engine.capacity_bytes", 4e10, ("engine.name", "sim"), "only engine=replay reads it"),
    ("engine.capacity_bytes", 4e10, ("engine.name", "sglang"), "only engine=replay reads it"),
    ("load.slowdown", 5.0, ("load.kind", "closed"), "only load=trace reads it"),
])
def test_a_key_only_another_engine_or_load_reads_is_refused(key: str, value: float, where: tuple[str, str],
                                                            needle: str) -> None:
    # Nothing reads it, yet compare requires it equal: the run could be compared with no other (red-team).
    cfg = _cfg_with(key, value)
    *parents, leaf = where[0].split(".")
    setattr(getattr(cfg, parents[0]), leaf, where[1])
    with pytest.raises(ConfigError, match=f"^{re.escape(key)}: {needle}"):
        check_unread_keys(cfg)
    reader = {"engine.capacity_bytes": ("engine", "name", "replay"), "load.slowdown": ("load", "kind", "trace")}[key]
    setattr(getattr(cfg, reader[0]), reader[1], reader[2])
    check_unread_keys(cfg)  # where it is read, it is taken


def test_the_run_is_refused_for_a_key_its_engine_does_not_read_but_not_before_the_engines_own_refusal(
        tmp_path: Path) -> None:
    from hybridbench.prepare import prepare_run
    from hybridbench.preview.compose import compose_run

    def outcome(*overrides: str) -> str:
        composed = compose_run([*overrides, f"hydra.run.dir={tmp_path / 'run'}"])
        try:
            prepare_run(composed.cfg, composed.run_dir, composed.resolved).engine.close()
        except ConfigError as exc:
            return str(exc)
        return "planned"

    assert outcome("+experiment=smoke", "engine=sim", "engine.capacity_bytes=4e10").startswith(
        "engine.capacity_bytes: only engine=replay reads it")
    assert outcome("+experiment=smoke", "engine=sim") == "planned"
    # marconi's byte budget comes with the experiment: elsewhere its arms' own refusal says more
    assert "use engine=replay" in outcome("+experiment=marconi", "engine=sim")

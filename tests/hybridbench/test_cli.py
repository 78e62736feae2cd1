"""`python -m hybridbench` end to end on the sim engine: files, records, exit codes 0/1/2."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hb_in_process import HbHere, hb_here_fixture  # noqa: F401 - the hb_here fixture

from hybridbench.metrics.summary import summarize
from hybridbench.results.reader import read_records

ROOT = Path(__file__).resolve().parents[2]


def hb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hybridbench", *args], capture_output=True, text=True, timeout=300, check=False, cwd=ROOT
    )


def test_smoke_on_sim_writes_every_artifact_and_passes(tmp_path: Path) -> None:
    proc = hb("+experiment=smoke", "engine=sim", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    for name in ("plan.json", "records.jsonl", "bundle.json", "report.md"):
        assert (tmp_path / name).is_file()
    plan = json.loads((tmp_path / "plan.json").read_text())
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    records = list(read_records(tmp_path / "records.jsonl"))
    trace_rows = Path(plan["workloads"][0]["trace_path"]).read_text().count('"session_id"')
    assert len(records) == len(plan["trials"]) * trace_rows
    assert all(r.modelled and r.cache_state == "cold-flushed" for r in records)
    # The bundle's numbers are recomputed from the saved records, so re-scoring gives the same.
    for trial in bundle["trials"]:
        recs = [r for r in records if r.trial_id == trial["trial_id"]]
        assert summarize(recs)["mean_ttft_ms"] == pytest.approx(trial["summary"]["mean_ttft_ms"])
    summary = bundle["trials"][0]["summary"]
    for key in ("completed", "duration", "request_throughput", "input_throughput", "output_throughput",
                "total_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                "median_itl_ms", "mean_e2e_latency_ms", "mean_e2el_ms", "total_token_throughput"):
        assert key in summary
    assert bundle["schema_version"] == 1 and bundle["verdict"] == "pass" and bundle["modelled"]
    assert bundle["provenance"]["plan_fingerprint"] == plan["fingerprint"]
    assert "Modelled" in proc.stdout and "| token hit rate |" in proc.stdout


def test_a_failed_check_exits_1_and_says_which(tmp_path: Path) -> None:
    proc = hb("+experiment=smoke", "engine=sim", "checks.min_token_hit_rate=0.99", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 1
    assert "| cache_hits | gsp | branching | **FAIL**" in proc.stdout
    assert json.loads((tmp_path / "bundle.json").read_text())["verdict"] == "fail"


@pytest.mark.parametrize("enabled", ["[throughput]", "[]"])
def test_a_run_whose_checks_all_skipped_is_inconclusive_not_a_pass(tmp_path: Path, enabled: str,
                                                                   hb_here: HbHere) -> None:
    # One repeat gives throughput no interval (skip); no check at all decides nothing either: exit 1, not 0.
    # (the run's exit code in this process; test_a_failed_check_exits_1_and_says_which is the real process's)
    proc = hb_here("+experiment=smoke", "engine=sim", "repeats=1", f"checks.enabled={enabled}",
                   f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 1, proc.stdout[-500:]
    assert json.loads((tmp_path / "bundle.json").read_text())["verdict"] == "inconclusive"
    assert "verdict: **inconclusive**" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # host_hits without an l2 arm: a skip, and the run passed on survival (exit 0)
        (["checks.enabled=[survival,host_hits]"], "checks.enabled: host_hits judges the arms with a host tier, and "
                                                  "no arm has one: add one"),
        (["arms=[disabled,branching]", "checks.baseline_arm=branching"],
         "checks.enabled: ttft compares each arm with the baseline arm branching, and no other arm is compared"),
        (["arms=[branching,lru]", "checks.enabled=[survival,prefill_overhead]"],
         "checks.enabled: prefill_overhead compares each cache-on arm's input throughput with a cache-off arm's, and "
         "no arm has the cache off: add `disabled` to arms, or drop prefill_overhead from checks.enabled"),
    ],
)
def test_an_enabled_check_the_arms_give_nothing_to_judge_is_refused_before_a_run(
        tmp_path: Path, args: list[str], needle: str, hb_here: HbHere) -> None:
    proc = hb_here("+experiment=smoke", "engine=sim", *args, f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2, proc.stdout[-500:] + proc.stderr[-500:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {needle}"), proc.stderr
    assert not (tmp_path / "bundle.json").exists() and not (tmp_path / "plan.json").exists()


def test_a_single_arm_run_passes_on_its_own_checks_for_compare_to_judge_its_timing(tmp_path: Path,
                                                                                   hb_here: HbHere) -> None:
    # The README's pull request against main: two single-arm runs, their timing judged by hybridbench compare. Each
    # run's ttft and throughput compare nothing inside it: a skip (not refused, not inconclusive), exit 0.
    proc = hb_here("+experiment=smoke", "engine=sim", "arms=[branching]", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout[-500:] + proc.stderr[-500:]
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    assert {c["status"] for c in bundle["checks"] if c["check"] in ("ttft", "throughput")} == {"skip"}
    assert bundle["verdict"] == "pass"


def test_a_check_no_workload_is_judged_by_is_not_refused_for_its_arms(tmp_path: Path, hb_here: HbHere) -> None:
    # workloads.gsp.judged_by=[survival]: host_hits is asked nothing, so no l2 arm is no reason to refuse the run;
    # and a single arm is not refused for ttft: the README's pull request against main compares two such runs
    proc = hb_here("+experiment=smoke", "engine=sim", "arms=[branching]", "checks.enabled=[survival,ttft,host_hits]",
              "workloads.gsp.judged_by=[survival]", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout[-500:] + proc.stderr[-500:]
    checks = json.loads((tmp_path / "bundle.json").read_text())["checks"]
    assert {c["status"] for c in checks if c["check"] in ("ttft", "host_hits")} == {"skip"}, checks



def test_kl_with_every_arm_cache_off_is_refused_before_a_run(tmp_path: Path) -> None:
    # The kl probe skips cache-off arms: +experiment=kl with arms=[disabled] measured no KL, its kl and cache_hits rows
    # said "found nothing to judge" (skip), and the run passed on survival alone (exit 0).
    proc = hb("+experiment=kl", "arms=[disabled]", "checks.baseline_arm=disabled", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2, proc.stdout[-500:] + proc.stderr[-500:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: checks.enabled: kl compares logprobs after a cache hit with a cache-free replay's, and every arm has "
        "the cache off: add a cache-on arm"), proc.stderr
    assert not (tmp_path / "bundle.json").exists()

@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["+experiment=nope"], "Could not find 'experiment/nope'"),
        (["+experiment=smoke", "load.max_concurency=3"], "Key 'max_concurency' not in 'LoadCfg'"),
        (["+experiment=smoke", "seed=abc"], "could not be converted to Integer"),
        (["+experiment=smoke", "arms=[lru,marconi]"], "arm 'marconi' cannot run on this engine"),
        (["+experiment=smoke", "checks.enabled=[ttft,nope]"], "unknown check(s) nope"),
        (["+experiment=smoke", "checks.kl_variants=[decode,decode]"],
         "checks.kl_variants: decode listed more than once"),
        (["+experiment=smoke", "workloads.gsp.params.num_groups=-1"], "num_groups must be >= 1"),
        # planned fine, then the run refused its own temp trace ("'input_tokens' is empty")
        (["+experiment=smoke", "workloads.gsp.params.system_prompt_len=0", "workloads.gsp.params.question_len=0"],
         "workloads.gsp: system_prompt_len + question_len must be >= 1"),
        # reached 12 GB of memory in 40 s with no output
        (["+experiment=smoke", "workloads.gsp.params.num_groups=100000000"],
         "workloads.gsp: num_groups * prompts_per_group * num_turns = 600,000,000 requests; one workload may"),
        (["+experiment=smoke", "arms=[disabled,l2]", "arm.l2.hicache_ratio=1e300"],
         "arm.l2.hicache_ratio must be at most 100 (host pools as a multiple of the device pools), got 1e+300"),
        ([], "pick an experiment with +experiment=NAME"),
        # `+` forces a key in past Hydra's schema check; the dataclass conversion would drop it silently.
        (["+experiment=smoke", "+engine.chunked_prefil_size=4"],
         "unknown config key engine.chunked_prefil_size (did you mean engine.chunked_prefill_size?)"),
        (["+experiment=smoke", "+workloads.gsp.parms.num_groups=2"], "unknown config key workloads.gsp.parms"),
        (["+experiment=smoke", "++checks.ttft_regresion=0.2"], "unknown config key checks.ttft_regresion"),
        (["+experiment=kl"], "probe kl (checks.enabled has kl) needs a live server to send requests to; "
                             "engine sim cannot serve it"),
        (["+experiment=smoke", "engine.health_timeout_s=0"],
         "engine.health_timeout_s must be a finite number > 0, got 0.0"),
        # results/runs/<time>-<name>: a '/' put the run outside results/runs/, '../../x' anywhere on disk
        (["+experiment=smoke", "name=../../escaped"], "name must be a plain file name (no '/', not empty)"),
        # The console script's subcommands typed after python -m (Hydra: "missing EQUAL at '<EOF>'").
        (["plan", "+experiment=smoke"], "'plan' is a subcommand of the hybridbench command: hybridbench plan ..."),
        (["run", "+experiment=smoke"], "python -m hybridbench takes the overrides themselves"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str], needle: str,
                                              hb_here: HbHere) -> None:
    proc = hb_here(*args, "engine=sim", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # --help composes the config outside Hydra's error reporting: these were tracebacks, exit 1.
        (["+experiment=smoke", "bogus=1", "--help"], "Could not override 'bogus'"),
        (["+experiment=nope", "--help"], "Could not find 'experiment/nope'; Available options in 'experiment': "),
        (["plan", "--help"], "'plan' is a subcommand of the hybridbench command"),
    ],
)
def test_help_after_a_bad_override_is_one_line_and_exit_2(
        args: list[str], needle: str, hb_here: HbHere) -> None:
    proc = hb_here(*args)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_help_itself_still_prints_the_configuration_groups(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridbench.__main__ import _STOP_SIGNALS
    from hybridbench.cli import main as cli_main

    proc = hb("+experiment=smoke", "--help")
    assert proc.returncode == 0
    assert "== Configuration groups ==" in proc.stdout and "experiment: accuracy" in proc.stdout
    # Hydra's default header named the app after its module ("__main__ is powered by Hydra") and no command
    assert "__main__" not in proc.stdout and proc.stdout.startswith("hybridbench: prefix-cache benchmark runs")
    for path in re.findall(r"docs/[\w/.-]+\.md", proc.stdout):  # the guides it points at exist
        assert (ROOT / path).is_file(), path
    # each subcommand the footer names takes --help: the console script's entry in this process (the real
    # `hybridbench SUB --help` processes are tests/hybridbench/test_console_script.py's)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # `run` hands Hydra its own argv
    handlers = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}  # `run` installs the run's stop handlers
    try:
        for sub in re.search(r"hybridbench \{([a-z,]+)\} --help", proc.stdout).group(1).split(","):  # type: ignore[union-attr]
            try:
                code = cli_main([sub, "--help"])
            except SystemExit as exc:
                code = exc.code
            assert code in (0, None), (sub, capsys.readouterr().err[-500:])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("name", ["../x", "a/b/c", "../../escaped", "a/..", "/etc", "a//b"])
def test_a_refused_name_leaves_no_directory_hydra_made_for_it(tmp_path: Path, name: str, hb_here: HbHere) -> None:
    # The default run dir, results/runs/<time>-<name>: Hydra made results/runs/<time>-.. (or <time>-a/b) before
    # the name was refused, and the refusal removed only the last directory. (In this process, from tmp_path; the
    # next tests run the real process from a working directory of their own.)
    proc = hb_here("+experiment=smoke", "engine=sim", f"name={name}", cwd=tmp_path)
    assert proc.returncode == 2 and "name must be a plain file name" in proc.stderr, proc.stderr
    assert not [p for p in tmp_path.rglob("*") if p != tmp_path / "results" / "runs" and p != tmp_path / "results"]


def test_a_refused_name_never_removes_directories_it_did_not_shape(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)  # empty: exactly what a careless clean-up would take for Hydra's
    proc = hb("+experiment=smoke", "engine=sim", "name=a/b", f"hydra.run.dir={tmp_path / 'a' / 'b' / 'run'}")
    assert proc.returncode == 2
    assert (tmp_path / "a" / "b").is_dir() and not (tmp_path / "a" / "b" / "run").exists()


def test_a_refused_name_never_removes_an_empty_directory_the_user_had(tmp_path: Path) -> None:
    # results/runs/<time>-../../../keep from work/ is tmp_path/keep: the old clean-up after Hydra made the run dir
    # took this empty directory for one Hydra had made and removed it.
    (tmp_path / "keep").mkdir()
    (tmp_path / "work").mkdir()
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim",
                           "name=../../../keep"], capture_output=True, text=True, timeout=300, check=False,
                          cwd=tmp_path / "work")
    assert proc.returncode == 2 and "name must be a plain file name" in proc.stderr, proc.stderr
    assert (tmp_path / "keep").is_dir() and not list((tmp_path / "work").iterdir())


def test_a_priming_pass_warms_the_cache_and_is_recorded_as_primed(tmp_path: Path) -> None:
    cold = hb("+experiment=smoke", "engine=sim", f"hydra.run.dir={tmp_path / 'cold'}")
    primed = hb("+experiment=smoke", "engine=sim", "load.prime=true", f"hydra.run.dir={tmp_path / 'primed'}")
    assert cold.returncode == primed.returncode == 0, primed.stderr
    rate = {}
    for name in ("cold", "primed"):
        recs = [r for r in read_records(tmp_path / name / "records.jsonl") if r.arm == "branching"]
        assert {r.cache_state for r in recs} == {"cold-flushed" if name == "cold" else "primed"}
        rate[name] = sum(r.cached_tokens or 0 for r in recs) / sum(r.prompt_tokens for r in recs)
    assert rate["primed"] > rate["cold"]  # every prompt was seen once before the measured pass


def test_a_multirun_sweeps_an_arm_knob_into_every_engine(tmp_path: Path) -> None:
    """docs/guides/harness.md's sweep: `-m ... arm.seglen.eff_weight=A,B` runs one job per value, and the value reaches
    what each engine runs (the reference server's own flag; the plan every engine reads)."""
    from hybridbench.config.schema import ArmCfg, L2ArmCfg, RunCfg, SeglenArmCfg
    from hybridbench.engines.reference_cmd import reference_command
    from hybridbench.plan.arms import plan_arm

    proc = hb("-m", "+experiment=smoke", "engine=sim", "arms=[lru,seglen]", "arm.seglen.eff_weight=0.25,0.75",
              f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode in (0, 1), proc.stderr
    weights = sorted(json.loads((tmp_path / job / "plan.json").read_text())["config"]["arm"]["seglen"]["eff_weight"]
                     for job in ("0", "1"))
    assert weights == [0.25, 0.75]
    cfg = RunCfg(arm=ArmCfg(seglen=SeglenArmCfg(eff_weight=0.25), l2=L2ArmCfg(hicache_ratio=3.0)))
    cmd = reference_command(cfg, plan_arm("seglen+l2", cfg.arm), 1)
    assert cmd[cmd.index("--seglen-eff-weight") + 1] == "0.25" and cmd[cmd.index("--hicache-ratio") + 1] == "3.0"
    assert "--seglen-eff-weight" not in reference_command(cfg, plan_arm("branching", cfg.arm), 1)


def test_every_finished_run_adds_one_line_to_the_index_beside_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert hb("+experiment=smoke", "engine=sim", f"hydra.run.dir={runs / 'a'}").returncode == 0
    assert hb("+experiment=smoke", "engine=sim", "checks.min_token_hit_rate=0.99",
              f"hydra.run.dir={runs / 'b'}").returncode == 1
    lines = [json.loads(line) for line in (runs / "index.jsonl").read_text().splitlines()]
    assert [(e["run_dir"], e["verdict"]) for e in lines] == [(str(runs / "a"), "pass"), (str(runs / "b"), "fail")]
    assert lines[1]["failed_checks"] == ["cache_hits:gsp:branching"]
    fingerprint = json.loads((runs / "a" / "plan.json").read_text())["fingerprint"]
    assert lines[0]["plan_fingerprint"] == fingerprint and lines[0]["engine"] == "sim" and lines[0]["modelled"]


@pytest.mark.parametrize(("args", "needle"), [
    # The server's own parser ran only at launch: a typo in extra_args ended the run as an infrastructure failure.
    (["engine.extra_args=[--bogus-flag]"],
     "engine.extra_args: the reference server refuses its command line: unrecognized arguments: --bogus-flag"),
    (["engine.extra_args=[--context-length,abc]"], "argument --context-length: invalid int value: 'abc'"),
    (["engine.extra_args=[--max-mamba-cache-size,1]"], "--max-mamba-cache-size 1 cannot hold one running request"),
    # -h printed the server's whole help on the harness's stdout, then "bad arguments"
    (["engine.extra_args=[--help]"], "refuses its command line: it prints its help and exits (-h/--help)"),
    # An address the server cannot listen on crashed the harness in free_port (an internal error, exit 3).
    (["engine.host=999.1.1.1"], "engine.host: the server cannot listen on '999.1.1.1'"),
    (["engine.host=8.8.8.8"], "engine.host: the server cannot listen on '8.8.8.8' (Cannot assign requested address)"),
    (["engine.host="], "engine.host: the server cannot listen on '' (an empty name)"),
    # The arm ran another policy under its own name (seglen as branching: pass), or the harness polled its own port.
    (["engine.extra_args=['--policy=seglen']"], "engine.extra_args has --policy, which the arm (choose arms"),
    (["engine.extra_args=[--arm,lru]"], "engine.extra_args has --arm, which the arm"),
    (["engine.extra_args=['--host=0.0.0.0']"], "engine.extra_args has --host, which engine.host sets; set that key"),
    (["engine.extra_args=['--port=1']"], "engine.extra_args has --port, which the harness (it picks a free port"),
])
def test_reference_server_inputs_it_would_refuse_are_refused_at_plan_time(
        tmp_path: Path, args: list[str], needle: str, hb_here: HbHere) -> None:
    run_dir = tmp_path / "run"
    proc = hb_here("+experiment=smoke", "engine=reference", *args, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr[-800:]
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--hicache-write-policy" not in proc.stdout  # no server help on the terminal
    assert not run_dir.exists()


@pytest.mark.parametrize(("args", "needle"), [
    # Hydra's compose error (condensed to one line) and the reference server's own parser, as a real process prints
    # them: the in-process cases above cannot see a warning or a write straight to the terminal.
    (["+experiment=nope", "engine=sim"], "Could not find 'experiment/nope'"),
    (["+experiment=smoke", "engine=reference", "engine.extra_args=[--bogus-flag]"],
     "engine.extra_args: the reference server refuses its command line: unrecognized arguments: --bogus-flag"),
])
def test_a_real_process_refuses_in_exactly_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = hb(*args, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-800:]
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stdout == "" and not (tmp_path / "run").exists()


def test_another_venv_on_the_same_base_python_keeps_its_own_server_parser(tmp_path: Path) -> None:
    """A venv's bin/python is a symlink to its base interpreter, so resolving it named this venv's interpreter for a
    PR venv's too: this checkout's server parser then refused at plan time a flag the PR's server may add."""
    import site
    import venv

    from hybridbench.config.schema import EngineCfg, RunCfg
    from hybridbench.engines.reference_cmd import reference_command
    from hybridbench.errors import ConfigError
    from hybridbench.plan.arms import plan_arm

    venv.create(tmp_path / "pr", with_pip=False, symlinks=True)
    pr_python = tmp_path / "pr" / "bin" / "python"
    # The PR venv has the server's dependencies installed (the plan runs its server's --help): this venv's, lent.
    lib = next((tmp_path / "pr" / "lib").glob("python*/site-packages"))
    (lib / "lent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    assert pr_python.resolve() == Path(sys.executable).resolve()  # the case: the same base interpreter
    cfg = RunCfg(engine=EngineCfg(name="reference", python=str(pr_python), extra_args=["--a-flag-of-the-pr"]))
    cmd = reference_command(cfg, plan_arm("lru", cfg.arm), 1)  # the PR's server decides at launch
    assert cmd[0] == str(pr_python) and cmd[-1] == "--a-flag-of-the-pr"
    same = RunCfg(engine=EngineCfg(name="reference", python=sys.executable, extra_args=["--a-flag-of-the-pr"]))
    with pytest.raises(ConfigError, match="unrecognized arguments: --a-flag-of-the-pr"):
        reference_command(same, plan_arm("lru", same.arm), 1)

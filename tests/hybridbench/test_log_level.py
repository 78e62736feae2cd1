"""A log level that hides the lines hybridbench reads is refused at plan time (hybridbench/engines/log_level.py).

``engine.extra_args=[--log-level,warning]`` used to plan and run: a TokenSpeed run then recorded no served page (the
scheduler's info-level "Scheduler config" line was never written, and nothing said so) and its cache_hits
cross-check had no "#cached-token" line to compare; an SGLang run recorded 0 peak usage and an empty usage series
from batch lines never written. The releases' own parsers and ``configure_logger`` are run over these flags in
tests/sglang_oracle/test_sglang_log_level.py and tests/tokenspeed/test_tokenspeed_log_level.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from machine_fakes import FIXTURES, fake_sglang, fake_vllm
from test_tokenspeed_page import LINE_011, SMALL, fake_tokenspeed

from hybridbench.engines.tokenspeed import TokenSpeedEngine
from hybridbench.errors import ConfigError
from hybridbench.load.trial import ServerTrials
from hybridbench.prepare import prepare_run
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run

# engine.extra_args overrides: the last --log-level given is the one argparse keeps
HIDDEN = ("[--log-level,warning]", "['--log-level=ERROR']", "[--log-level,debug,--log-level,critical]",
          "[--log-level,warn]")
SHOWN = ("[--log-level,debug]", "['--log-level=INFO']", "[--log-level,warning,--log-level,info]",
         "[--log-level,notset]")


def plans(*overrides: str) -> None:
    build_preview(compose_run(list(overrides)), forecast=False)


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        plans(*overrides)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("extra", HIDDEN)
def test_tokenspeed_refuses_a_level_that_hides_its_scheduler_and_prefill_lines(tmp_path: Path, extra: str) -> None:
    for version in ("0.1.0", "0.1.1"):
        why = refusal(*SMALL, f"engine.python={fake_tokenspeed(tmp_path, version)}", f"engine.extra_args={extra}")
        assert why.startswith("engine.extra_args has --log-level "), why
        assert 'hides its info-level "Scheduler config" line (the page the run served) and "#cached-token"' in why


@pytest.mark.parametrize("extra", SHOWN)
def test_tokenspeed_plans_at_info_or_below(tmp_path: Path, extra: str) -> None:
    plans(*SMALL, f"engine.python={fake_tokenspeed(tmp_path, '0.1.1')}", f"engine.extra_args={extra}")


def test_a_level_no_server_resolves_and_a_logging_config_are_refused(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ts = f"engine.python={fake_tokenspeed(tmp_path, '0.1.1')}"
    why = refusal(*SMALL, ts, "engine.extra_args=[--log-level,verbose]")
    assert why.startswith("engine.extra_args has --log-level 'verbose', which is not a logging level TokenSpeed knows")
    monkeypatch.setenv("TOKENSPEED_LOGGING_CONFIG_PATH", str(tmp_path / "logging.json"))
    why = refusal(*SMALL, ts)
    assert why.startswith("TOKENSPEED_LOGGING_CONFIG_PATH is set in the environment the TokenSpeed server inherits: "
                          "its logging config replaces --log-level"), why
    monkeypatch.setenv("TOKENSPEED_LOGGING_CONFIG_PATH", "")  # what both releases read as unset
    plans(*SMALL, ts)


SGLANG = ("+experiment=radix", "engine=sglang", "engine.tp=1", "repeats=1")
# Every SGLang release's --help has these (0.5.23's as printed: tests/sglang_oracle/test_sglang_log_level.py); the
# recorded fixture is cut to the cache flags.
LOG_HELP = ("  --log-level LOG_LEVEL\n  --log-level-http LOG_LEVEL_HTTP\n"
            "  --config CONFIG       Read CLI options from a config file.\n")


def sglang_python(tmp_path: Path) -> str:
    help_file = tmp_path / "help.txt"
    help_file.write_text((FIXTURES / "sglang_help_new.txt").read_text() + LOG_HELP)
    return f"engine.python={fake_sglang(tmp_path, str(help_file))}"


@pytest.mark.parametrize("extra", HIDDEN)
def test_sglang_refuses_a_level_that_hides_its_batch_lines(tmp_path: Path, extra: str) -> None:
    why = refusal(*SGLANG, sglang_python(tmp_path), f"engine.extra_args={extra}")
    assert why.startswith("engine.extra_args has --log-level "), why
    assert 'hides its info-level "Prefill batch" / "Decode batch" lines' in why


def test_sglang_plans_at_info_or_below_and_with_a_quiet_http_log(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    python = sglang_python(tmp_path)
    for extra in (*SHOWN, "[--log-level-http,warning]"):  # uvicorn's logger: nothing hybridbench reads
        plans(*SGLANG, python, f"engine.extra_args={extra}")
    why = refusal(*SGLANG, python, f"engine.extra_args=[--config,{tmp_path / 'server.yaml'}]")
    assert why.startswith("engine.extra_args has --config, whose file can give any flag, --log-level included"), why
    monkeypatch.setenv("SGLANG_LOGGING_CONFIG_PATH", str(tmp_path / "logging.json"))
    assert refusal(*SGLANG, python).startswith("SGLANG_LOGGING_CONFIG_PATH is set in the environment the SGLang server")


def test_vllm_is_not_refused_a_quiet_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hybridbench reads nothing from a vLLM server's log (its hits, block and evictions come from /metrics)."""
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "ERROR")  # vllm/envs.py: its own loggers' level
    monkeypatch.setenv("SGLANG_LOGGING_CONFIG_PATH", "/nonexistent.json")  # another engine's variable: not vLLM's
    plans("+experiment=radix", "engine=vllm", "repeats=1", f"engine.python={fake_vllm(tmp_path)}")


def test_a_server_that_logs_no_page_is_said_so_once_per_arm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """launch used to read the whole (growing) log again at every cold start of an arm whose page it had not found,
    and said nothing when it never did."""
    composed = compose_run([*SMALL, f"engine.python={fake_tokenspeed(tmp_path, '0.1.1')}"])
    prepared = prepare_run(composed.cfg, tmp_path / "run", composed.resolved)
    assert isinstance(prepared.engine, ServerTrials) and isinstance(prepared.engine.engine, TokenSpeedEngine)
    engine = prepared.engine.engine
    spec = next(s for s in prepared.plan.arm_specs if s.name == "branching")
    log = tmp_path / "server-branching.log"
    log.write_text("ts serve starting\n")
    capsys.readouterr()
    for _ in range(3):  # the arm's server is up: launch keeps it and reads what it logged at start-up
        engine._server, engine._arm = SimpleNamespace(alive=lambda: True, log_path=log), "branching"  # type: ignore[assignment]
        engine.launch(composed.cfg, spec)
    engine._server = None
    err = capsys.readouterr().err
    assert err.count('tokenspeed: arm branching\'s server logged no single "Scheduler config" page') == 1, err
    assert "served_page" not in prepared.engine.info().extra
    log.write_text(LINE_011.format(128) + "\n")  # another arm's server that logs it is read as before
    engine._server, engine._arm = SimpleNamespace(alive=lambda: True, log_path=log), "disabled"  # type: ignore[assignment]
    engine.launch(composed.cfg, next(s for s in prepared.plan.arm_specs if s.name == "disabled"))
    engine._server = None
    assert prepared.engine.info().extra["served_page"] == {"disabled": 128}


def test_the_reference_server_is_held_to_the_same_rule() -> None:
    """reference_impl's server writes SGLang's batch lines at its --log-level (server/__main__.py), which the record's
    usage numbers come from as SGLang's do."""
    reference = ("+experiment=smoke", "engine=reference", "repeats=1")
    why = refusal(*reference, "engine.extra_args=[--log-level,warning]")
    assert why.startswith('engine.extra_args has --log-level warning, which hides its info-level "Prefill batch"'), why
    plans(*reference, "engine.extra_args=[--log-level,debug]")
    # abbreviations name no flag the refusals know ("--log warning" used to plan): refused whatever interpreter
    # serves, as another checkout's parser may take them (a venv's python resolves to its base: another interpreter)
    other = f"engine.python={Path(sys.executable).resolve()}"
    for abbreviated, full in (("[--log,warning]", "--log-level"), ("[--log-l,error]", "--log-level"),
                              ("['--pol=seglen']", "--policy")):
        for python in ((), (other,)):
            why = refusal(*reference, *python, f"engine.extra_args={abbreviated}")
            assert why.startswith("engine.extra_args has --") and f", an abbreviation of {full}: " in why, why


@pytest.mark.parametrize("extra", ["['--log-level=']", "[--log-level,'']", "[--log-level,info,'--log-level=']"])
def test_an_empty_level_is_refused_as_no_level(tmp_path: Path, extra: str) -> None:
    """argparse keeps "" for ``--log-level=``, and every release's getattr(logging, "") then stops it at start-up."""
    for setup in (("+experiment=smoke", "engine=reference", "repeats=1"),
                  (*SMALL, f"engine.python={fake_tokenspeed(tmp_path, '0.1.1')}")):
        why = refusal(*setup, f"engine.extra_args={extra}")
        assert why.startswith("engine.extra_args has --log-level '', which is not a logging level"), why

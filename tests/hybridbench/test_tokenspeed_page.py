"""engine=tokenspeed records the page it passes (``planned_page``) and the one each server's scheduler says it runs
(``served_page``), as vLLM's runs do, and never a page it did not pass: ``engine.page_size=1`` gave ``ts serve`` no
page flag, both releases ran 64-token pages (tests/tokenspeed resolves it with their parsers), and the plan's config,
the bundle and the report said 1. The scheduler's start-up line is read as each release writes it
(tests/tokenspeed/test_tokenspeed_parsers.py renders it from their own source)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hybridbench.engines.tokenspeed import TokenSpeedEngine, scheduler_page
from hybridbench.errors import ConfigError
from hybridbench.load.trial import ServerTrials
from hybridbench.prepare import prepare_run
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run
from hybridbench.results.bundle import build_bundle
from hybridbench.results.served_block import block_mark, block_mismatches

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["+experiment=radix", "repeats=1", "engine=tokenspeed", "model=qwen3.5-9b", "engine.tp=1",
         "model.architecture=Qwen3_5ForConditionalGeneration", "arms=[disabled,branching]"]
# What each release's scheduler logs once per rank at start-up (runtime/engine/event_loop.py).
LINE_010 = ("[2026-11-30 10:00:00 TP0] Scheduler config: block_size={} num_device_pages=900 max_scheduled_tokens=8192 "
            "decode_input_tokens=1 overlap_schedule_depth=1 disable_l2_cache=True")
LINE_011 = ("[2026-11-30 10:00:00 TP0] Scheduler config: prefix_granularity={} num_device_pages=900 "
            "max_scheduled_tokens=8192 decode_input_tokens=1 overlap_schedule_depth=1 disable_l2_cache=True")


@pytest.fixture
def ts_python(tmp_path: Path) -> Path:
    """TokenSpeed 0.1.1 as far as the plan can tell: its version and its engine parser's recorded help."""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\ncase "$*" in *ServerArgs*) cat "{ROOT}/tests/hybridbench/fixtures/'
                    'tokenspeed_help_0_1_1.txt";; *) echo 0.1.1;; esac\n')
    fake.chmod(0o755)
    return fake


def test_a_run_records_the_page_it_passes_per_arm(ts_python: Path, tmp_path: Path) -> None:
    def recorded(*overrides: str) -> tuple[dict[str, Any], dict[str, Any]]:
        composed = compose_run([*SMALL, f"engine.python={ts_python}", *overrides])
        prepared = prepare_run(composed.cfg, tmp_path / "run", composed.resolved)
        bundle = build_bundle(prepared.plan, prepared.engine.info(), [], {}, [])
        return bundle["provenance"]["engine"]["extra"], bundle["provenance"]["config"]["engine"]

    extra, config = recorded()  # conf/engine/tokenspeed.yaml's 64, passed as --prefix-granularity
    assert extra["planned_page"] == {"disabled": 64, "branching": 64}, extra
    assert config["page_size"] == 64
    for argv in extra["commands"].values():
        assert argv[argv.index("--prefix-granularity") + 1] == "64"
    extra, config = recorded("engine.page_size=128")
    assert extra["planned_page"] == {"disabled": 128, "branching": 128} and config["page_size"] == 128, extra


def test_a_page_that_passes_no_flag_is_refused_before_the_plan_records_it(ts_python: Path) -> None:
    pools = build_preview(compose_run([*SMALL, f"engine.python={ts_python}"]), forecast=False).pools
    assert pools["page_size"] == 64 and "page_size_set_by" not in pools  # the page passed is the page planned
    # engine.page_size=1 used to plan (and forecast) 64 while the run's config said 1: now one line, exit 2
    with pytest.raises(ConfigError, match=r"^engine\.page_size=1 gives ts serve no --prefix-granularity: "
                                          r"TokenSpeed would run its own 64-token pages") as err:
        build_preview(compose_run([*SMALL, f"engine.python={ts_python}", "engine.page_size=1"]), forecast=False)
    assert "\n" not in str(err.value)


def test_scheduler_page_reads_the_line_every_rank_agrees_on(tmp_path: Path) -> None:
    log = tmp_path / "server-branching.log"
    assert scheduler_page(log) is None  # no log yet
    log.write_text("ts serve starting\n" + LINE_010.format(64) + "\n" + LINE_010.format(64).replace("TP0", "TP1"))
    assert scheduler_page(log) == 64
    log.write_text(LINE_011.format(128) + "\n")
    assert scheduler_page(log) == 128
    log.write_text(LINE_011.format(128) + "\n" + LINE_011.format(64) + "\n")  # ranks disagree: no one page
    assert scheduler_page(log) is None
    log.write_text("Scheduler config: max_batch_size=8 page_size_hint=64\n")  # no page field
    assert scheduler_page(log) is None


def test_a_server_that_ran_another_page_than_planned_marks_the_run(ts_python: Path, tmp_path: Path) -> None:
    """The plan passed 64; the server's scheduler said 128 (0.1.1's Qwen3.5 cache recipe fixes 128,
    kv_cache/recipes/qwen35.py): the bundle carries both and the verdict is marked for that arm."""
    composed = compose_run([*SMALL, f"engine.python={ts_python}"])
    prepared = prepare_run(composed.cfg, tmp_path / "run", composed.resolved)
    assert isinstance(prepared.engine, ServerTrials) and isinstance(prepared.engine.engine, TokenSpeedEngine)
    engine = prepared.engine.engine
    for arm, page in (("disabled", 64), ("branching", 128)):
        log = tmp_path / f"server-{arm}.log"
        log.write_text(LINE_011.format(page) + "\n")
        # The arm's server is up: launch keeps it (no process is started) and reads what it logged at start-up.
        engine._server, engine._arm = SimpleNamespace(alive=lambda: True, log_path=log), arm  # type: ignore[assignment]
        engine.launch(composed.cfg, next(s for s in prepared.plan.arm_specs if s.name == arm))
    engine._server = None
    extra = prepared.engine.info().extra
    assert extra["served_page"] == {"disabled": 64, "branching": 128}
    assert block_mark(block_mismatches(extra)) == "served another block than planned: branching 128 tokens (planned 64)"

"""engine=tokenspeed records the page its release serves for the model (``planned_page``: hybridbench/engines/
tokenspeed_page.py) and the one each server's scheduler says it runs (``served_page``), as vLLM's runs do, and never a
page it did not pass: ``engine.page_size=1`` gave ``ts serve`` no page flag, both releases ran 64-token pages
(tests/tokenspeed resolves it with their parsers), and the plan's config, the bundle and the report said 1. A Qwen3.5
or Nemotron-H model on 0.1.1 serves its cache recipe's 128 whatever the flag says, so the plan, its pool and its
forecast say 128 (tests/tokenspeed/test_tokenspeed_served_page.py runs the releases' own recipe code on the models'
configs); on 0.1.0 a Qwen3.5 model's page depends on the scheduler build, so the plan says it does not know. The
scheduler's start-up line is read as each release writes it (tests/tokenspeed/test_tokenspeed_parsers.py renders it
from their own source)."""

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
from hybridbench.preview.forecast_page import forecast_page
from hybridbench.preview.forecast_warnings import forecast_warnings
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


def fake_tokenspeed(tmp_path: Path, version: str) -> Path:
    """TokenSpeed ``version`` as far as the plan can tell: its version and its engine parser's recorded help."""
    fake = tmp_path / f"python-{version}"
    fake.write_text(f'#!/bin/sh\ncase "$*" in *ServerArgs*) cat "{ROOT}/tests/hybridbench/fixtures/'
                    f'tokenspeed_help_{version.replace(".", "_")}.txt";; *) echo {version};; esac\n')
    fake.chmod(0o755)
    return fake


@pytest.fixture
def ts_python(tmp_path: Path) -> Path:
    return fake_tokenspeed(tmp_path, "0.1.1")


def recorded(tmp_path: Path, *overrides: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine provenance and the engine config a run's bundle.json would carry."""
    composed = compose_run([*SMALL, *overrides])
    prepared = prepare_run(composed.cfg, tmp_path / "run", composed.resolved)
    bundle = build_bundle(prepared.plan, prepared.engine.info(), [], {}, [])
    return bundle["provenance"]["engine"]["extra"], bundle["provenance"]["config"]["engine"]


def test_a_run_records_the_page_its_release_serves_per_arm(ts_python: Path, tmp_path: Path) -> None:
    for page in (64, 256):  # conf/engine/tokenspeed.yaml's, and one above the recipe's: passed, and not served
        extra, config = recorded(tmp_path, f"engine.python={ts_python}", f"engine.page_size={page}")
        assert extra["planned_page"] == {"disabled": 128, "branching": 128}, extra  # 0.1.1's Qwen3.5 recipe
        assert config["page_size"] == page
        for argv in extra["commands"].values():
            assert argv[argv.index("--prefix-granularity") + 1] == str(page)
    # a plain-attention model keeps the page passed
    extra, _ = recorded(tmp_path, f"engine.python={ts_python}", "model=vllm-tiny-llama",
                        "model.architecture=LlamaForCausalLM", "workloads.gsp.scale=4")  # its 4K context
    assert extra["planned_page"] == {"disabled": 64, "branching": 64}, extra
    # 0.1.0: a radix scheduler build serves 64, a flat-KV one raises it; the plan cannot see which, so records none
    extra, _ = recorded(tmp_path, f"engine.python={fake_tokenspeed(tmp_path, '0.1.0')}")
    assert "planned_page" not in extra and set(extra["commands"]) == {"disabled", "branching"}, extra
    # nor where no model hybridbench knows names the architecture, or extra_args may rewrite the model's config
    for unknown in ("model.architecture=Qwen3ForCausalLM", "engine.extra_args=[--hf-overrides,{}]"):
        extra, _ = recorded(tmp_path, f"engine.python={ts_python}", unknown)
        assert "planned_page" not in extra, (unknown, extra)


def test_the_plan_pools_and_forecasts_at_the_page_served(ts_python: Path, tmp_path: Path) -> None:
    ts_010 = fake_tokenspeed(tmp_path, "0.1.0")
    composed = compose_run([*SMALL, f"engine.python={ts_python}", "engine.kv_tokens=20050"])
    pools = build_preview(composed, forecast=False).pools
    assert pools["page_size"] == 128, pools
    assert pools["page_size_set_by"].startswith("TokenSpeed 0.1.1's Qwen3.5 GDN (qwen_gdn) cache recipe serves "
                                                "128-token pages whatever --prefix-granularity says"), pools
    assert pools["kv_tokens"] == 20050 // 128 * 128 - 8, pools  # whole 128-token pages, not 64-token ones (20024)
    page = forecast_page(composed.cfg)
    assert (page.tokens, page.unknown) == (128, ""), page
    # The workload's longest request needs 10624 tokens: 10700 in 64-token pages holds it, in 128-token ones not.
    with pytest.raises(ConfigError, match=r"KV pool holds 10616 \(engine\.kv_tokens=10700, in whole 128-token pages"):
        build_preview(compose_run([*SMALL, f"engine.python={ts_python}", "engine.kv_tokens=10700"]), forecast=False)
    # 0.1.0: the page passed bounds the pool from above (a raised page is a multiple of it); the forecast says so
    assert build_preview(compose_run([*SMALL, f"engine.python={ts_010}", "engine.kv_tokens=10700"]),
                         forecast=False).pools["kv_tokens"] == 10680
    composed = compose_run([*SMALL, f"engine.python={ts_010}", "engine.kv_tokens=20050"])
    pools = build_preview(composed, forecast=False).pools
    assert pools["page_size"] == "sized by tokenspeed at start-up" and pools["kv_tokens"] == 20024, pools
    assert "tokenspeed-scheduler build" in pools["page_size_set_by"], pools
    page = forecast_page(composed.cfg)
    assert page.tokens == 64 and "tokenspeed-scheduler build" in page.unknown, page
    (warning,) = forecast_warnings({"trials": [], "page_size": 64, "page_unknown": page.unknown}, composed.cfg)
    assert "engine=tokenspeed serves is not known before it starts" in warning and "vLLM" not in warning, warning


def test_a_page_that_passes_no_flag_is_refused_before_the_plan_records_it(ts_python: Path) -> None:
    pools = build_preview(compose_run([*SMALL, f"engine.python={ts_python}", "model=vllm-tiny-llama",
                                       "model.architecture=LlamaForCausalLM", "workloads.gsp.scale=4"]),
                          forecast=False).pools
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
    """The plan says 128 (0.1.1's Qwen3.5 cache recipe, passed 64): a server whose scheduler says 128 is what was
    planned; one that said 64 (a recipe the plan does not know of) marks the verdict for that arm."""
    composed = compose_run([*SMALL, f"engine.python={ts_python}"])
    prepared = prepare_run(composed.cfg, tmp_path / "run", composed.resolved)
    assert isinstance(prepared.engine, ServerTrials) and isinstance(prepared.engine.engine, TokenSpeedEngine)
    engine = prepared.engine.engine
    for arm, page in (("disabled", 128), ("branching", 64)):
        log = tmp_path / f"server-{arm}.log"
        log.write_text(LINE_011.format(page) + "\n")
        # The arm's server is up: launch keeps it (no process is started) and reads what it logged at start-up.
        engine._server, engine._arm = SimpleNamespace(alive=lambda: True, log_path=log), arm  # type: ignore[assignment]
        engine.launch(composed.cfg, next(s for s in prepared.plan.arm_specs if s.name == arm))
    engine._server = None
    extra = prepared.engine.info().extra
    assert extra["served_page"] == {"disabled": 128, "branching": 64}
    assert block_mark(block_mismatches(extra)) == "served another block than planned: branching 64 tokens (planned 128)"

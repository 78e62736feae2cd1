"""``engine=tokenspeed``: ``ts serve`` (the smg gateway in front of TokenSpeed's gRPC engine), one server per arm.

What differs from the other server engines (docs/engines/tokenspeed.md): the installed version picks the flags and
the cold protocol (0.1.0's ``/flush_cache`` acknowledges and does nothing, so every trial gets a fresh server;
0.1.1's clears the cache and answers ``success: false`` while requests are in flight or blocks are pinned, so it
is retried until it says true); readiness is the gateway's ``/readiness`` (what ``ts serve`` itself waits for
before printing "ts serve ready"); hits come from ``usage.prompt_tokens_details.cached_tokens``.

The page: engine.page_size is always passed, but the page the release serves for the model
(hybridbench.engines.tokenspeed_page: 0.1.1's Qwen3.5 and Mamba2 cache recipes fix 128) is what the plan records per
arm as ``planned_page`` (none where it cannot be said: 0.1.0 on a GDN model), rounds a fixed KV pool to and forecasts
at; the one each server's scheduler says it runs at start-up (its "Scheduler config: block_size=N" on 0.1.0,
"prefix_granularity=N" on 0.1.1) is ``served_page``. Results mark a run where they differ
(hybridbench.results.served_block).
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.gpu_pool import fixed_gpu_kv_pool
from hybridbench.engines.kv_pool import KVPool
from hybridbench.engines.launchers import check_extra_args, installed_help
from hybridbench.engines.log_level import TOKENSPEED_LOG_READS
from hybridbench.engines.process import ServerProcess, free_port
from hybridbench.engines.server import FlushOutcome, ServerEngine, ServerSpec, SnapshotMark, installed_version
from hybridbench.engines.tokenspeed_cmd import (
    TokenSpeedVersion,
    tokenspeed_command,
    tokenspeed_help_argv,
    tokenspeed_version,
)
from hybridbench.engines.tokenspeed_page import TokenSpeedPage, planned_tokenspeed_page
from hybridbench.engines.traits import TOKENSPEED_STATES, EngineTraits
from hybridbench.errors import ConfigError
from hybridbench.plan.types import RunPlan
from hybridbench.records.schema import LOG_COUNTS_USAGE_HITS
from reference_impl.engine.arms import ArmSpec

__all__ = ["TokenSpeedEngine", "scheduler_page"]

# The scheduler's page as it logs its config once per rank (runtime/engine/event_loop.py of each release).
_SCHEDULER_PAGE = re.compile(rb"Scheduler config: (?:block_size|prefix_granularity)=(\d+)\b")


def scheduler_page(log_path: Path) -> int | None:
    """The page the server's scheduler says it runs (None: no such line, or ranks that disagree)."""
    try:
        pages = {int(m) for m in _SCHEDULER_PAGE.findall(log_path.read_bytes())}
    except OSError:
        return None
    return pages.pop() if len(pages) == 1 else None


class TokenSpeedEngine(ServerEngine):
    def __init__(self) -> None:
        self._ts: TokenSpeedVersion | None = None
        self._help: dict[str, str] = {}
        self._checked: set[tuple[str, ...]] = set()
        self._page_read: set[str] = set()  # arms whose server log was read for its scheduler page
        super().__init__(ServerSpec(
            name="tokenspeed", build=self._command, client="openai", flush_path="/flush_cache",
            package="tokenspeed", health_paths=("/readiness", "/health"), kv_pool=self._kv_pool,
            planned_page=lambda cfg: self._page(cfg).tokens,  # 0 (not recorded) where the config cannot say
            log_reads=TOKENSPEED_LOG_READS,  # its served page and the log side of the cache_hits cross-check
            # 0.1.0's --mamba-track-interval is read nowhere, and its scheduler checkpoints prefill forwards only
            # (docs/engines/tokenspeed.md: nothing is tracked during decode)
            traits=EngineTraits(protocols=frozenset({"openai"}), flushable=True, track_interval=False,
                                **TOKENSPEED_STATES)))

    def _command(self, cfg: RunCfg, arm: ArmSpec, port: int) -> list[str]:
        python = cfg.engine.python or sys.executable
        if self._ts is None:
            self._ts = tokenspeed_version(installed_version(python, "tokenspeed"))
        if python not in self._help:
            self._help[python] = installed_help(tokenspeed_help_argv(python), "tokenspeed", python)
        check_extra_args(tokenspeed_help_argv, "tokenspeed", python, cfg.engine.extra_args, self._checked)
        host = cfg.engine.host or "127.0.0.1"
        control, prometheus = (free_port(host), free_port(host)) if port else (0, 0)  # plan time: any number
        return tokenspeed_command(python=python, model=cfg.model, engine=cfg.engine, arm=arm, port=port,
                                  control_port=control, prometheus_port=prometheus, version=self._ts,
                                  help_text=self._help[python])

    def _page(self, cfg: RunCfg) -> TokenSpeedPage:
        """The page the release serves for the model: the flag's, or its cache recipe's (tokenspeed_page.py)."""
        return planned_tokenspeed_page(cfg, self._ts)

    def _kv_pool(self, cfg: RunCfg) -> KVPool | None:
        # An unknown page is a multiple of the one passed (0.1.0 raises in steps of it): engine.page_size's whole
        # pages bound the pool from above, so what they refuse cannot fit the served one either.
        page = self._page(cfg)
        if page.tokens and page.tokens != cfg.engine.page_size:
            return fixed_gpu_kv_pool(cfg, page.tokens, page.why)
        return fixed_gpu_kv_pool(cfg)

    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        super().validate(cfg, plan)
        assert self._ts is not None  # the build above resolved it
        self._check_chunk(cfg, plan)
        self._flush_absent = not self._ts.flush_works  # 0.1.0: a fresh server per trial is the only cold cache

    def _check_chunk(self, cfg: RunCfg, plan: RunPlan) -> None:
        """A prefill chunk holds a whole page of the one served (config/validate.py says why), not of the one passed:
        0.1.1's Qwen3.5 recipe serves 128 under a flag of 64. Where the page served is unknown the one passed is
        checked, the least it can be on 0.1.0 (a flat-KV build raises it in steps of it). And on 0.1.1 a cache-on
        server floors the chunk to its state grain (tokenspeed_page.py) while a disabled one keeps it: the arms
        would prefill in different chunks than the plan and record say."""
        page, asked, chunk = self._page(cfg), cfg.engine.page_size, cfg.engine.chunked_prefill_size
        if chunk >= (page.tokens or asked):
            self._check_grain(cfg, plan, page)
            return
        if page.tokens == asked:
            why = f"a page (engine.page_size={asked})"
        elif page.tokens:
            why = f"the page TokenSpeed serves for model {cfg.model.name}, {page.tokens} ({page.why})"
        else:
            why = (f"the page passed (engine.page_size={asked}; the one served is not known before it starts: "
                   f"{page.why})")
        raise ConfigError(f"engine.chunked_prefill_size {chunk} is smaller than {why}; a prefill chunk holds whole "
                          f"pages: set it to at least {page.tokens or asked}")

    def _check_grain(self, cfg: RunCfg, plan: RunPlan, page: TokenSpeedPage) -> None:
        chunk, grain = cfg.engine.chunked_prefill_size, page.state_grain
        cache_on = [spec.name for spec in plan.arm_specs if spec.cache_on]
        if not grain or not cache_on or chunk % grain == 0:
            return
        floor, release = chunk - chunk % grain, f"TokenSpeed {self._ts.version}" if self._ts else "TokenSpeed"
        raise ConfigError(f"engine.chunked_prefill_size {chunk} is not a multiple of {grain}, the recurrent-state "
                          f"checkpoint grain {release} serves model {cfg.model.name} with: with prefix caching on "
                          f"(arms {', '.join(cache_on)}) it floors the chunk to {floor} and with it off keeps {chunk}, "
                          f"so the plan and record would say a chunk those arms do not run: set it to a multiple of "
                          f"{grain} ({floor} or {floor + grain})")

    def launch(self, cfg: RunCfg, spec: ArmSpec) -> ServerProcess:
        server = super().launch(cfg, spec)
        # Its ranks log it before /readiness: read once per arm, found or not (0.1.0 restarts each trial into the same,
        # growing log, and a later start logs what the first did).
        if spec.name not in self._page_read:
            self._page_read.add(spec.name)
            if (page := scheduler_page(server.log_path)) is not None:
                self._served_page[spec.name] = page
            else:
                print(f"tokenspeed: arm {spec.name}'s server logged no single \"Scheduler config\" page: the page it "
                      "served is not recorded", file=sys.stderr, flush=True)
        return server

    def snapshot(self, server: ServerProcess, mark: SnapshotMark) -> dict[str, Any]:
        # The "#cached-token" log total and usage cached_tokens both count each request's first
        # extend_prefix_lens: the cache_hits check holds them equal (hybridbench.checks.log_hits).
        return {**super().snapshot(server, mark), LOG_COUNTS_USAGE_HITS: True}

    def _flush(self, server: ServerProcess, timeout_s: float = 60.0) -> FlushOutcome:
        """0.1.1's flush answers 200 with ``success: false`` while it cannot clear: only ``true`` is cold."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            req = server.auth.request(server.base_url, self.spec.flush_path, method="POST", data=b"")
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    body = json.loads(resp.read() or b"{}")
            except urllib.error.HTTPError as exc:
                if exc.code in (404, 405):
                    return "absent"
            except (urllib.error.URLError, OSError, ValueError):
                return "failed"
            else:
                if isinstance(body, dict) and body.get("success") is True:
                    return "flushed"
            time.sleep(0.2)
        return "failed"

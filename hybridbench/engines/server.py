"""Server engines (reference, sglang, vllm): a real process per arm, driven over HTTP.

Lifecycle per trial: make sure the arm's server runs (one server at a time; a different arm stops the
previous one), flush its cache (``/flush_cache``, retried while the server is busy; a server without a
flush endpoint is restarted instead) so every trial starts cold, drive the load, then check the server
is still alive and healthy. A server that dies or hangs ends the run with exit code 3; the records of
finished requests are kept.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import aiohttp

from hybridbench.config.redact import redact
from hybridbench.config.schema import RunCfg
from hybridbench.engines.base import EngineInfo, TrialContext
from hybridbench.engines.evictions import read_evictions
from hybridbench.engines.gpus import visible_gpus, wait_for_free_gpus
from hybridbench.engines.process import ServerProcess, free_port, port_in_use
from hybridbench.engines.server_logs import (
    CacheCounters,
    LogStats,
    cache_counters,
    parse_prometheus,
    startup_cache_impl,
)
from hybridbench.errors import EngineError
from hybridbench.load.client import ClientResult, generate_openai, generate_sglang
from hybridbench.load.driver import Completed, drive
from hybridbench.load.http import StreamPool
from hybridbench.load.progress import TrialProgress
from hybridbench.plan.build import effective_vocab
from hybridbench.plan.types import RunPlan
from hybridbench.probes.exact_hits import CachePredictor, predictor_config
from hybridbench.probes.kl_requests import KlProbe, probe_prompts
from hybridbench.records.kl import KlSample
from hybridbench.records.schema import Record
from reference_impl.engine.arms import ArmSpec
from workloads.arrival import ArrivalSchedule

__all__ = ["CommandBuilder", "ServerEngine"]

FlushOutcome = Literal["flushed", "absent", "failed"]

WATCH_INTERVAL_S = 5.0

# (cfg, arm, port) -> argv; raises ConfigError when the engine cannot express the arm.
CommandBuilder = Callable[[RunCfg, ArmSpec, int], list[str]]


def _installed_version(python: str, package: str) -> str:
    """``package``'s version as the engine's interpreter sees it ("" if unknown)."""
    if not package:
        return ""
    code = f"from importlib.metadata import version; print(version({package!r}))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


_NO_BUFFER_SKIP = "no_buffer keeps a state only at a request's end: no prefill or branch-point hit by design"


class ServerEngine:
    def __init__(
        self,
        name: str,
        build: CommandBuilder,
        *,
        api: str = "sglang",
        env_for: Callable[[ArmSpec], dict[str, str]] | None = None,
        flush_path: str = "/flush_cache",
        package: str = "",
    ) -> None:
        self.name = name
        self.build = build
        self.api = api  # "sglang" (native /generate) or "openai" (/v1/completions)
        self.env_for = env_for
        self.flush_path = flush_path
        self.package = package  # the Python distribution whose version goes into provenance
        self._version = ""
        self._reason: dict[str, str | None] = {"why": None}
        self._server: ServerProcess | None = None
        self._arm: str | None = None
        self._commands: dict[str, list[str]] = {}
        self._run_dir = Path(".")
        self._flush_absent = False  # the server has no flush endpoint: trials get fresh servers instead
        self._served = False  # the current server has run a trial since it started
        self._gpus: list[str] = []
        self._cache_impl: dict[str, str] = {}

    # ------------------------------------------------------------------ plan time
    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        self._run_dir = Path(plan.run_dir)
        self._version = _installed_version(cfg.engine.python or sys.executable, self.package)
        for spec in plan.arm_specs:
            self._commands[spec.name] = self.build(cfg, spec, 0)  # raises ConfigError naming the arm or flag

    # ------------------------------------------------------------------ lifecycle
    def _ensure(self, cfg: RunCfg, spec: ArmSpec) -> ServerProcess:
        arm = spec.name
        if self._server is not None and self._arm == arm and self._server.alive():
            return self._server
        self.close()
        if cfg.engine.port and port_in_use(cfg.engine.host, cfg.engine.port):
            raise EngineError(f"engine.port {cfg.engine.port} on {cfg.engine.host} is already in use")
        if self.name != "reference" and cfg.engine.gpu != "cpu":
            gpus = visible_gpus()
            if gpus is not None and gpus < cfg.engine.tp:
                raise EngineError(f"engine.tp={cfg.engine.tp} needs {cfg.engine.tp} GPUs; nvidia-smi lists {gpus}")
            self._gpus = wait_for_free_gpus(cfg.engine.tp) or self._gpus
        port = cfg.engine.port or free_port(cfg.engine.host)
        base = f"http://{cfg.engine.host}:{port}"
        env = self.env_for(spec) if self.env_for else None
        command = self.build(cfg, spec, port)
        self._commands[arm] = command  # provenance records what really ran
        server = ServerProcess(command, self._run_dir / "logs" / f"server-{arm}.log", base, env=env)
        server.start()
        self._server, self._arm, self._served = server, arm, False
        server.wait_ready(cfg.engine.startup_timeout_s)
        impl = startup_cache_impl(server.log_path)
        if impl:
            self._cache_impl[arm] = impl
        return server

    def _flush(self, server: ServerProcess, timeout_s: float = 60.0) -> FlushOutcome:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            req = urllib.request.Request(server.base_url + self.flush_path, method="POST", data=b"")
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    if resp.status == 200:
                        return "flushed"
            except urllib.error.HTTPError as exc:
                if exc.code in (404, 405):  # no such endpoint (vLLM without VLLM_SERVER_DEV_MODE=1)
                    return "absent"
                # otherwise refused while requests are in flight: retry
            except (urllib.error.URLError, OSError):
                return "failed"
            time.sleep(0.2)
        return "failed"

    def _cold_server(self, cfg: RunCfg, arm: ArmSpec) -> tuple[ServerProcess, str, str]:
        """A server with an empty cache: flushed, or (no flush endpoint) freshly started, as issue 7's
        protocol says. Returns the server, the records' cache state and how it was made cold."""
        server = self._ensure(cfg, arm)
        if not self._flush_absent:
            outcome = self._flush(server)
            if outcome == "flushed":
                return server, "cold-flushed", "flushed"
            if outcome == "failed":
                return server, "uncontrolled", "flush failed"
            self._flush_absent = True
            print(f"{self.name}: {self.flush_path} answered 404: a fresh server per trial keeps the cache cold",
                  file=sys.stderr, flush=True)
        if self._served:  # this server has cached a trial's traffic: only a new one is cold
            self.close()
            server = self._ensure(cfg, arm)
        return server, "cold-flushed", "restarted"

    # ------------------------------------------------------------------ trials
    def run_trial(self, cfg: RunCfg, ctx: TrialContext) -> dict[str, Any]:
        spec = ctx.plan.arm(ctx.trial.arm)
        server, state, how_cold = self._cold_server(cfg, spec)
        self._served = True
        if state == "cold-flushed" and cfg.load.prime:
            self._drive(cfg, server, ctx, lambda _done: None)  # priming pass: warms the cache, not recorded
            state = "primed"
        log_offset = server.log_path.stat().st_size if server.log_path.exists() else 0
        counters_before = self._scrape(server)
        evictions_before = read_evictions(server.base_url)
        progress = TrialProgress(len(ctx.rows), label=f"{ctx.trial.arm} r{ctx.trial.repeat}")
        predictor, why_not = self._predictor(server, spec, state, ctx.schedule)

        def on_done(done: Completed) -> None:
            r: ClientResult = done.result
            expected = None
            if predictor is not None:
                if r.status != "ok":
                    predictor.broken = predictor.broken or f"request {done.index} failed"
                expected = predictor.predict(done.prompt, r.output_ids, r.output_tokens)

            def rel(t: float | None) -> float | None:
                return None if t is None else t - done.t0

            progress.update(r.status == "ok")
            ctx.emit(Record(
                run_id=ctx.plan.fingerprint, trial_id=ctx.trial.trial_id, arm=ctx.trial.arm,
                workload=ctx.trial.workload, repeat=ctx.trial.repeat, request_index=done.index,
                session_id=done.row.session_id, turn_id=done.row.turn_id, scheduled_s=done.scheduled_s,
                sent_s=rel(r.sent), first_token_s=rel(r.first_token), end_s=rel(r.end),
                prompt_tokens=len(done.prompt), output_tokens=r.output_tokens, cached_tokens=r.cached_tokens,
                status=r.status, error=r.error, itl_ms=r.itl_ms, cache_state=state,  # type: ignore[arg-type]
                expected_cached_tokens=expected,
            ))

        with progress:  # shows the final counts even when the drive ends early
            self._drive(cfg, server, ctx, on_done)
        healthy = server.alive() and server.healthy(timeout_s=cfg.engine.health_timeout_s)
        if not healthy:
            server.wait_exit(2.0)  # a killed server can look alive for a moment: let it finish dying
        if not server.alive():
            raise EngineError(f"{self.name} server for arm {ctx.trial.arm} died during trial "
                              f"{ctx.trial.trial_id}: {server.log_tail()}")
        if not healthy:
            raise EngineError(f"{self.name} server for arm {ctx.trial.arm} hung during trial {ctx.trial.trial_id} "
                              f"(no health response within {cfg.engine.health_timeout_s:g} s)")
        snapshot: dict[str, Any] = {"crashes": 0, "cache_state": state, "cold_by": how_cold,
                                    **self._log_snapshot(server, log_offset)}
        if predictor is not None or why_not:
            snapshot["prediction"] = (predictor.broken if predictor is not None else why_not) or "exact"
        if predictor is not None:
            snapshot["prediction_semantics"] = predictor.core.config.semantics  # chosen by the reported version
        snapshot.update(read_evictions(server.base_url).since(evictions_before).snapshot())
        counters_after = self._scrape(server)
        if counters_before is not None and counters_after is not None:
            delta = counters_after.since(counters_before)  # the server's own counters for this trial
            snapshot.update(metrics_cached_tokens=delta.cached_tokens, metrics_prompt_tokens=delta.prompt_tokens)
        if "kl" in cfg.checks.enabled and ctx.emit_kl is not None:
            snapshot["kl_probe"] = self._probe_kl(cfg, server, ctx, spec, ctx.emit_kl)
        return snapshot

    def _predictor(self, server: ServerProcess, arm: ArmSpec, state: str,
                   schedule: ArrivalSchedule) -> tuple[CachePredictor | None, str]:
        """A reference-cache mirror when the trial is sequential and cold; else (None, why not or "")."""
        if not (schedule.closed and schedule.max_concurrency == 1 and state == "cold-flushed"):
            return None, ""  # concurrent hits depend on timing: there is no exact prediction to make
        if self.api != "sglang":
            return None, "the reference cache mirrors SGLang's semantics only"
        try:
            with urllib.request.urlopen(server.base_url + "/server_info", timeout=10) as resp:
                info = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return None, f"/server_info unavailable ({exc})"
        config = predictor_config(arm, info)
        return (None, config) if isinstance(config, str) else (CachePredictor(config), "")

    def _probe_kl(self, cfg: RunCfg, server: ServerProcess, ctx: TrialContext, spec: ArmSpec,
                  emit: Callable[[KlSample], None]) -> str:
        """After the measured traffic (never mixed with it): SGLang's KL method, one request at a time."""
        if not spec.cache_on:
            return "skipped: no cache to hit"
        c = cfg.checks
        prompts = probe_prompts([r.input_tokens for r in ctx.rows], c.kl_samples)
        identity = {"trial_id": ctx.trial.trial_id, "arm": ctx.trial.arm, "workload": ctx.trial.workload,
                    "repeat": ctx.trial.repeat}

        async def run() -> None:
            async with aiohttp.ClientSession() as session:
                probe = KlProbe(session, server.base_url, c.kl_max_new_tokens, c.kl_temperature,
                                effective_vocab(cfg), ctx.trial.seed, cfg.engine.track_interval,
                                cfg.engine.request_timeout_s, api=self.api, flush_path=self.flush_path,
                                model=cfg.model.hf_id)
                # SGLang's no_buffer keeps no mid-prompt state; vLLM's modes are block-aligned and can hit there.
                no_buffer = self.api == "sglang" and spec.strategy == "no_buffer"
                for variant in c.kl_variants:
                    skip = "" if variant == "decode" or not no_buffer else _NO_BUFFER_SKIP
                    for i, prompt in enumerate(prompts):
                        emit(await probe.sample(variant, i, prompt, skip=skip, **identity))  # type: ignore[arg-type]

        asyncio.run(run())
        if not (server.alive() and server.healthy(timeout_s=cfg.engine.health_timeout_s)):
            server.wait_exit(2.0)
            raise EngineError(f"{self.name} server for arm {ctx.trial.arm} died or hung during the KL probe of "
                              f"trial {ctx.trial.trial_id}: {server.log_tail()}")
        return f"{len(prompts)} prompt(s) x {len(c.kl_variants)} variant(s)"

    def _drive(self, cfg: RunCfg, server: ServerProcess, ctx: TrialContext,
               on_done: Callable[[Completed], None]) -> None:
        timeout = cfg.engine.request_timeout_s

        async def run() -> None:
            async with StreamPool(server.base_url) as pool:
                async def send(prompt: list[int], max_new: int) -> ClientResult:
                    if self.api == "openai":
                        return await generate_openai(pool, prompt, max_new, timeout, model=cfg.model.hf_id)
                    return await generate_sglang(pool, prompt, max_new, timeout)

                task = asyncio.ensure_future(drive(ctx.rows, ctx.schedule, send, on_done))
                watchdog = asyncio.ensure_future(self._watch(server, task, cfg.engine.health_timeout_s))
                try:
                    await task
                except asyncio.CancelledError:
                    if reason["why"] is None:
                        raise
                finally:
                    watchdog.cancel()

        reason: dict[str, str | None] = {"why": None}
        self._reason = reason
        asyncio.run(run())
        if reason["why"] is not None:
            raise EngineError(f"{self.name} server for arm {ctx.trial.arm} {reason['why']} during trial "
                              f"{ctx.trial.trial_id}: {server.log_tail()}")

    async def _watch(self, server: ServerProcess, task: asyncio.Future[None], health_timeout_s: float) -> None:
        """Stop driving a dead or hung server at once instead of timing out every remaining request."""
        strikes = 0
        while not task.done():
            await asyncio.sleep(WATCH_INTERVAL_S)
            if not server.alive():
                self._reason["why"] = "died"
            elif not await asyncio.to_thread(server.healthy, health_timeout_s):
                strikes += 1
                if strikes >= 2:
                    self._reason["why"] = f"hung (no health answer within {health_timeout_s:g} s, twice)"
            else:
                strikes = 0
            if self._reason["why"] is not None:
                task.cancel()
                return

    @staticmethod
    def _scrape(server: ServerProcess) -> CacheCounters | None:
        try:
            with urllib.request.urlopen(server.base_url + "/metrics", timeout=10) as resp:
                return cache_counters(parse_prometheus(resp.read().decode("utf-8", "replace")))
        except (urllib.error.URLError, OSError, ValueError):
            return None  # metrics not enabled on this server

    @staticmethod
    def _log_snapshot(server: ServerProcess, offset: int) -> dict[str, Any]:
        """Peaks and totals from the server's own "Prefill batch" / "Decode batch" lines of this trial."""
        try:
            with server.log_path.open("rb") as fh:
                fh.seek(offset)
                lines = fh.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return {}
        stats = LogStats().feed_all(lines)
        return {
            "log_prefill_batches": stats.prefill_batches,
            "log_cached_tokens": stats.cached_tokens,
            "log_new_tokens": stats.new_tokens,
            "peak_token_usage": stats.peak_token_usage,
            "peak_mamba_usage": stats.peak_mamba_usage,
            "max_running_req": stats.max_running_req,
            "server_failures": list(stats.failures),
        }

    def info(self) -> EngineInfo:
        command = tuple(redact(self._commands.get(self._arm or "", next(iter(self._commands.values()), []))))
        extra: dict[str, Any] = {"commands": {a: redact(c) for a, c in self._commands.items()}}
        if self._gpus:
            extra["gpus"] = list(self._gpus)  # what nvidia-smi named, beside the configured engine.gpu label
        if self._cache_impl:
            extra["cache_impl"] = dict(self._cache_impl)  # per arm, from the server's "Tree cache initialized" line
        return EngineInfo(name=self.name, version=self._version, command=command, extra=extra)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
            self._arm = None

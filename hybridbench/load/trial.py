"""The one trial runner for every server engine: (trial, client, trace rows) -> records, then probes.

Per trial: the engine makes its arm's server cold (flush or restart), an optional priming pass warms it
unrecorded, the load driver sends the rows through the engine's client while a watchdog stops driving a
dead or hung server at once, each completed request becomes a record through the one record
constructor, the engine snapshots its logs and metrics, and the planned probes run on the same server.
A server that dies or hangs ends the run with exit code 3; the records of finished requests are kept.

Nothing here knows which engine it drives: the engine's ServerSpec names its client protocol, flush
path and traits; the probes were matched against those traits at plan time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.base import EngineInfo, TrialContext
from hybridbench.engines.kv_pool import KVPool
from hybridbench.engines.process import ServerProcess
from hybridbench.engines.server import ServerEngine, ServerSpec
from hybridbench.engines.traits import EngineTraits
from hybridbench.errors import ConfigError, EngineError
from hybridbench.load import event_loop
from hybridbench.load.client import ClientResult, Generate, client_for
from hybridbench.load.driver import Completed, Vacate, drive
from hybridbench.load.http import StreamPool
from hybridbench.load.progress import TrialProgress
from hybridbench.plan.types import RunPlan
from hybridbench.probes.base import Exchange, ProbeContext
from hybridbench.records.build import RequestOutcome, trial_record
from hybridbench.records.schema import SAMPLES_WRITTEN, CacheState

__all__ = ["ServerTrials", "outcome", "vacate_call"]

WATCH_INTERVAL_S = 5.0


def outcome(done: Completed) -> RequestOutcome:
    """A completed request's facts, its times made relative to the trial start."""
    r: ClientResult = done.result

    def rel(t: float | None) -> float | None:
        return None if t is None else t - done.t0

    return RequestOutcome(
        index=done.index, session_id=done.row.session_id, turn_id=done.row.turn_id, scheduled_s=done.scheduled_s,
        sent_s=rel(r.sent), first_token_s=rel(r.first_token), end_s=rel(r.end), prompt_tokens=len(done.prompt),
        output_tokens=r.output_tokens, cached_tokens=r.cached_tokens, status=r.status,  # type: ignore[arg-type]
        error=r.error, itl_ms=tuple(r.itl_ms), modelled_times=r.modelled,
    )


def _no_stream(_payload: bytes, _now: float) -> bool:
    return False


def vacate_call(spec: ServerSpec, cfg: RunCfg, pool: StreamPool, timeout_s: float) -> Vacate | None:
    """The load driver's ``vacate`` for this run: ``POST spec.vacate_path`` when its servers wait in lockstep (the
    reference server judging a closed loop on its modelled clock), else none."""
    if spec.lockstep is None or not spec.lockstep(cfg):
        return None

    async def vacate() -> None:
        # Unsaid (a failed call), the server's lockstep waits out its bound for the successor instead.
        with contextlib.suppress(OSError, ValueError):
            await pool.post_sse(spec.vacate_path, b"{}", _no_stream, timeout_s)
    return vacate


class ServerTrials:
    """Runs trials on a server engine; what the harness (app.py) drives for every server engine."""

    def __init__(self, engine: ServerEngine) -> None:
        self.engine = engine
        self.name = engine.name
        try:  # a registry mistake, caught when the engine is made
            self.generate: Generate = client_for(engine.spec.client, return_token_ids=engine.spec.return_token_ids)
        except ValueError as exc:
            raise ConfigError(f"engine {engine.name}: {exc}") from None
        self._why: str | None = None

    @property
    def traits(self) -> EngineTraits:
        return self.engine.traits

    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        self.engine.validate(cfg, plan)

    def kv_pool(self, cfg: RunCfg) -> KVPool | None:
        return self.engine.kv_pool(cfg)

    def info(self) -> EngineInfo:
        return self.engine.info()

    def close(self) -> None:
        self.engine.close()

    # ------------------------------------------------------------------ one trial
    def run_trial(self, cfg: RunCfg, ctx: TrialContext) -> dict[str, Any]:
        trial = ctx.trial
        arm = ctx.plan.arm(trial.arm)
        cold = self.engine.cold_start(cfg, arm)
        server, state = cold.server, cold.cache_state
        if state == "cold-flushed" and cfg.load.prime:
            self._drive(cfg, server, ctx, lambda _done: None)  # priming pass: warms the cache, not recorded
            state = "primed"
        mark = self.engine.mark(server)
        progress = TrialProgress(len(ctx.rows), label=f"{trial.arm} r{trial.repeat}")
        exchanges: list[Exchange] = []
        cache_state: CacheState = state

        def on_done(done: Completed) -> None:
            r = done.result
            progress.update(r.status == "ok")
            ctx.emit(trial_record(ctx.plan.fingerprint, trial, outcome(done), cache_state))
            exchanges.append(Exchange(done.index, tuple(done.prompt), tuple(r.output_ids), r.output_tokens, r.status))

        with progress:  # shows the final counts even when the drive ends early
            self._drive(cfg, server, ctx, on_done)
        self.engine.check_alive(cfg, server, trial.arm, f"during trial {trial.trial_id}")
        snapshot: dict[str, Any] = {"crashes": 0, "cache_state": state, "cold_by": cold.how,
                                    **self.engine.snapshot(server, mark)}
        for planned in ctx.probes:
            probe = planned.probe
            if probe.needs.cache_on_arms and not arm.cache_on:
                snapshot[probe.snapshot_key] = "skipped: no cache to hit"
                continue
            spec = self.engine.spec
            written: list[Any] = []  # counted, so a re-scoring can tell a samples file that lost lines

            def emit(sample: Any, _emit: Callable[[Any], None] = planned.emit, _n: list[Any] = written) -> None:
                _emit(sample)
                _n.append(None)

            pctx = ProbeContext(cfg, trial, arm, ctx.rows, tuple(exchanges), state, server.base_url,
                                probe.needs.protocol(spec.client, spec.traits), spec.flush_path, spec.traits,
                                emit, Path(ctx.plan.run_dir), server.auth)
            found = probe.run(pctx)
            snapshot.update({probe.snapshot_key: found} if isinstance(found, str) else found)
            snapshot.setdefault(SAMPLES_WRITTEN, {})[probe.name] = len(written)
            self.engine.check_alive(cfg, server, trial.arm, f"during the {probe.name} probe of trial {trial.trial_id}")
        return snapshot

    # ------------------------------------------------------------------ the load, watched
    def _drive(self, cfg: RunCfg, server: ServerProcess, ctx: TrialContext,
               on_done: Callable[[Completed], None]) -> None:
        timeout = cfg.engine.request_timeout_s
        self._why = None

        async def run() -> None:
            async with StreamPool(server.base_url, server.auth.headers) as pool:
                async def send(prompt: list[int], max_new: int, answer_needed: bool) -> ClientResult:
                    return await self.generate(pool, prompt, max_new, timeout, model=cfg.model.hf_id,
                                               answer_needed=answer_needed)

                told = vacate_call(self.engine.spec, cfg, pool, timeout)
                task = asyncio.ensure_future(drive(ctx.rows, ctx.schedule, send, on_done, told))
                watchdog = asyncio.ensure_future(self._watch(server, task, cfg.engine.health_timeout_s))
                try:
                    await task
                except asyncio.CancelledError:
                    if self._why is None:
                        raise
                finally:
                    watchdog.cancel()

        event_loop.run(run())
        if self._why is not None:
            raise EngineError(f"{self.name} server for arm {ctx.trial.arm} {self._why} during trial "
                              f"{ctx.trial.trial_id}: {server.log_tail()}")

    async def _watch(self, server: ServerProcess, task: asyncio.Future[None], health_timeout_s: float) -> None:
        """Stop driving a dead or hung server at once instead of timing out every remaining request."""
        strikes = 0
        while not task.done():
            await asyncio.sleep(WATCH_INTERVAL_S)
            if not server.alive():
                self._why = "died"
            elif not await asyncio.to_thread(server.healthy, health_timeout_s):
                strikes += 1
                if strikes >= 2:
                    self._why = f"hung (no health answer within {health_timeout_s:g} s, twice)"
            else:
                strikes = 0
            if self._why is not None:
                task.cancel()
                return

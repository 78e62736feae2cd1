"""A server engine's lifecycle: build the command, launch, wait until ready, make the cache cold, snapshot
the server's own logs and metrics, stop. It drives no load and builds no records: the one trial runner
(hybridbench/load/trial.py) does that for every server engine, through the client its spec names.

One server at a time: a trial on a different arm stops the previous server. Cold start is a flush
(``/flush_cache``, retried while the server is busy); a server without a flush endpoint (a 404) is
restarted instead, so every trial still starts cold. What differs between engines is data, a
:class:`ServerSpec`: the command builder, the client protocol, the flush path, the traits probes need.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hybridbench.config.redact import redact
from hybridbench.config.schema import ModelCfg, RunCfg
from hybridbench.engines.base import EngineInfo
from hybridbench.engines.evictions import Evictions, read_evictions
from hybridbench.engines.gpus import visible_gpus, wait_for_free_gpus
from hybridbench.engines.kv_pool import KVPool
from hybridbench.engines.log_level import LogReads, log_level_refusal
from hybridbench.engines.process import ServerProcess, bindable, free_port, port_in_use
from hybridbench.engines.server_auth import ServerAuth
from hybridbench.engines.server_logs import (
    CacheCounters,
    LogStats,
    scrape_counters,
    startup_cache_impl,
)
from hybridbench.engines.traits import EngineTraits
from hybridbench.errors import ConfigError, EngineError
from hybridbench.plan.types import RunPlan
from hybridbench.records.schema import CacheState
from reference_impl.engine.arms import ArmSpec

__all__ = ["ColdStart", "CommandBuilder", "FlushOutcome", "ServerEngine", "ServerSpec", "SnapshotMark",
           "installed_version"]

FlushOutcome = Literal["flushed", "absent", "failed"]

# (cfg, arm, port) -> argv; raises ConfigError when the engine cannot express the arm.
CommandBuilder = Callable[[RunCfg, ArmSpec, int], list[str]]
# (the server's argv, the environment it inherits) -> the key it was given and where it wants it; raises ConfigError
# for a key hybridbench cannot send (hybridbench.engines.server_auth)
AuthReader = Callable[[Sequence[str], Mapping[str, str]], ServerAuth]


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """Everything that makes one server engine differ from another."""

    name: str
    build: CommandBuilder
    client: str  # the protocol the load speaks to it: a hybridbench.load.client.CLIENTS name
    traits: EngineTraits
    flush_path: str = "/flush_cache"  # "" = no flush endpoint: every trial gets a freshly started server
    # its /v1/completions answers `"return_token_ids": true` with the ids it generates (vLLM), so the openai client
    # asks and a session's next turn carries them; False where that is unknown (TokenSpeed: its next turns carry the
    # trace's recorded answer). SGLang's native client reads them from every answer unasked.
    return_token_ids: bool = False
    env_for: Callable[[ArmSpec], dict[str, str]] | None = None  # arm -> extra environment
    package: str = ""  # the Python distribution whose version goes into provenance
    gpus: bool = True  # runs on GPUs (unless engine.gpu=cpu): check nvidia-smi for free ones before launching
    health_paths: tuple[str, ...] = ("/health_generate", "/health")  # readiness and liveness: first found decides
    # the KV pool when the config fixes its size (the reference server's flags); None: sized at launch (GPUs)
    kv_pool: Callable[[RunCfg], KVPool | None] | None = None
    # whether a run's servers wait in lockstep for a closed loop's successors (the reference server's
    # --modelled-lockstep-ms); the client then says which finishes have none (POST vacate_path, load/driver.py)
    lockstep: Callable[[RunCfg], bool] | None = None
    vacate_path: str = "/lockstep/vacate"
    # (model, arm, installed version, engine.extra_args, engine.gpu, engine.page_size) -> why that release cannot run
    # the arm (on that GPU, on those pages) though its --help has the flags ("")
    refusal: Callable[[ModelCfg, ArmSpec, str, Sequence[object], str, int], str] | None = None
    # (engine.gpu, installed version) -> why that build cannot serve the run at all ("": it can), e.g. a CPU build
    # of the server behind a GPU run
    build_refusal: Callable[[str, str], str] | None = None
    # how many processes add into one unlabelled /metrics counter series (SGLang 0.5.9 and 0.5.16: its TP ranks, each
    # counting the same tokens; hybridbench.engines.evictions reads one rank's count)
    metrics_ranks: Callable[[RunCfg], int] | None = None
    # base URL, its key -> the block (page) the ready server reports it serves with (vLLM sizes its own:
    # vllm_page.py), or None; kept per arm in the record beside what the plan computed
    served_page: Callable[[str, ServerAuth], int | None] | None = None
    # cfg -> the block the plan computed for the servers (0: unknown until start-up), kept per arm beside served_page
    # so a run that served another block is marked (hybridbench.results.served_block)
    planned_page: Callable[[RunCfg], int] | None = None
    # the info-level lines hybridbench reads from the server's log: a log level (engine.extra_args) or logging config
    # (the inherited environment) that hides them is refused at plan time (hybridbench.engines.log_level)
    log_reads: LogReads | None = None
    # the key engine.extra_args (or the environment) gives the server: every request hybridbench sends carries it
    # where the server wants it; None: it takes none (the reference server refuses --api-key; TokenSpeed: server_auth)
    auth: AuthReader | None = None


@dataclass(frozen=True, slots=True)
class ColdStart:
    server: ServerProcess
    cache_state: CacheState  # what the trial's records say: cold-flushed, or uncontrolled when a flush failed
    how: str  # flushed | restarted | flush failed


@dataclass(frozen=True, slots=True)
class SnapshotMark:
    """Where the server's log and counters stood when the measured traffic began."""

    log_offset: int
    counters: CacheCounters | None
    evictions: Evictions
    log_line: int = 0  # lines before log_offset: a line range survives the log's scrub, a byte range may not


def installed_version(python: str, package: str) -> str:
    """``package``'s version as the engine's interpreter sees it ("" if unknown)."""
    if not package:
        return ""
    code = f"from importlib.metadata import version; print(version({package!r}))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


class ServerEngine:
    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self._version = ""
        self._server: ServerProcess | None = None
        self._arm: str | None = None
        self._commands: dict[str, list[str]] = {}
        self._run_dir = Path(".")
        self._flush_absent = not spec.flush_path  # no flush endpoint: trials get fresh servers instead
        self._served = False  # the current server has run a trial since it started
        self._gpus: list[str] = []
        self._metrics_ranks = 1
        self._cache_impl: dict[str, str] = {}
        self._served_page: dict[str, int] = {}
        self._planned_page: dict[str, int] = {}
        # Per log file: the bytes and lines already counted, so a mark reads only what was appended since.
        self._log_seen: dict[Path, tuple[int, int]] = {}

    @property
    def traits(self) -> EngineTraits:
        return self.spec.traits

    def build(self, cfg: RunCfg, arm: ArmSpec, port: int) -> list[str]:
        return self.spec.build(cfg, arm, port)

    # ------------------------------------------------------------------ plan time
    def validate(self, cfg: RunCfg, plan: RunPlan) -> None:
        self._run_dir = Path(plan.run_dir)
        if why := "an empty name" if not cfg.engine.host.strip() else bindable(cfg.engine.host):
            raise ConfigError(f"engine.host: the server cannot listen on {cfg.engine.host!r} ({why})")
        self._version = installed_version(cfg.engine.python or sys.executable, self.spec.package)
        if self.spec.build_refusal is not None and (why := self.spec.build_refusal(cfg.engine.gpu, self._version)):
            raise ConfigError(why)
        for spec in plan.arm_specs:
            refusal = self.spec.refusal
            if refusal is not None and (why := refusal(cfg.model, spec, self._version, cfg.engine.extra_args,
                                                       cfg.engine.gpu, cfg.engine.page_size)):
                raise ConfigError(why)
            env = {**os.environ, **(self.spec.env_for(spec) if self.spec.env_for else {})}  # what launch gives
            if self.spec.log_reads is not None and (
                    why := log_level_refusal(self.spec.log_reads, [str(a) for a in cfg.engine.extra_args], env)):
                raise ConfigError(why)
            self._commands[spec.name] = self.build(cfg, spec, 0)  # raises ConfigError naming the arm or flag
            self._auth(self._commands[spec.name], env)  # a key no request could carry: refused here
            if self.spec.planned_page is not None and (page := self.spec.planned_page(cfg)):
                self._planned_page[spec.name] = page

    def _auth(self, command: Sequence[str], env: Mapping[str, str]) -> ServerAuth:
        return self.spec.auth(command, env) if self.spec.auth is not None else ServerAuth()

    def kv_pool(self, cfg: RunCfg) -> KVPool | None:
        return self.spec.kv_pool(cfg) if self.spec.kv_pool is not None else None

    # ------------------------------------------------------------------ launch and ready
    def launch(self, cfg: RunCfg, spec: ArmSpec) -> ServerProcess:
        """The arm's server, ready to serve: the running one, or a new one (stopping any other arm's)."""
        arm = spec.name
        if self._server is not None and self._arm == arm and self._server.alive():
            return self._server
        self.close()
        if cfg.engine.port and port_in_use(cfg.engine.host, cfg.engine.port):
            raise EngineError(f"engine.port {cfg.engine.port} on {cfg.engine.host} is already in use")
        if self.spec.gpus and cfg.engine.gpu != "cpu":
            gpus = visible_gpus()
            if gpus is not None and gpus < cfg.engine.tp:
                raise EngineError(f"engine.tp={cfg.engine.tp} needs {cfg.engine.tp} GPUs; nvidia-smi lists {gpus}")
            self._gpus = wait_for_free_gpus(cfg.engine.tp) or self._gpus
        port = cfg.engine.port or free_port(cfg.engine.host)
        base = f"http://{cfg.engine.host}:{port}"
        env = self.spec.env_for(spec) if self.spec.env_for else None
        command = self.build(cfg, spec, port)
        self._commands[arm] = command  # provenance records what really ran
        auth = self._auth(command, {**os.environ, **(env or {})})
        server = ServerProcess(command, self._run_dir / "logs" / f"server-{arm}.log", base, env=env,
                               health_paths=self.spec.health_paths, auth=auth)
        server.start()
        self._server, self._arm, self._served = server, arm, False
        self._metrics_ranks = self.spec.metrics_ranks(cfg) if self.spec.metrics_ranks is not None else 1
        server.wait_ready(cfg.engine.startup_timeout_s)
        impl = startup_cache_impl(server.log_path)
        if impl:
            self._cache_impl[arm] = impl
        if self.spec.served_page is not None and (page := self.spec.served_page(server.base_url, server.auth)):
            self._served_page[arm] = page
        return server

    # ------------------------------------------------------------------ cold start
    def _flush(self, server: ServerProcess, timeout_s: float = 60.0) -> FlushOutcome:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            req = server.auth.request(server.base_url, self.spec.flush_path, method="POST", data=b"")
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

    def cold_start(self, cfg: RunCfg, arm: ArmSpec) -> ColdStart:
        """A server with an empty cache, about to serve a trial: flushed, or (no flush endpoint) freshly
        started, as issue 7's protocol says."""
        server = self.launch(cfg, arm)
        cold: ColdStart | None = None
        if not self._flush_absent:
            outcome = self._flush(server)
            if outcome == "flushed":
                cold = ColdStart(server, "cold-flushed", "flushed")
            elif outcome == "failed":
                cold = ColdStart(server, "uncontrolled", "flush failed")
            else:
                self._flush_absent = True
                print(f"{self.name}: {self.spec.flush_path} answered 404: a fresh server per trial keeps the cache "
                      "cold", file=sys.stderr, flush=True)
        if cold is None:
            if self._served:  # this server has cached a trial's traffic: only a new one is cold
                self.close()
                server = self.launch(cfg, arm)
            cold = ColdStart(server, "cold-flushed", "restarted")
        self._served = True
        return cold

    # ------------------------------------------------------------------ health
    def check_alive(self, cfg: RunCfg, server: ServerProcess, arm: str, during: str) -> None:
        """EngineError (exit 3) when the server died or stopped answering its health check."""
        healthy = server.alive() and server.healthy(timeout_s=cfg.engine.health_timeout_s)
        if not healthy:
            server.wait_exit(2.0)  # a killed server can look alive for a moment: let it finish dying
        if not server.alive():
            raise EngineError(f"{self.name} server for arm {arm} died {during}: {server.log_tail()}")
        if not healthy:
            # vLLM's API server outlives its dead engine and stops answering: what killed it is in the log.
            raise EngineError(f"{self.name} server for arm {arm} hung {during} "
                              f"(no health response within {cfg.engine.health_timeout_s:g} s): {server.log_tail()}")

    # ------------------------------------------------------------------ snapshot
    def mark(self, server: ServerProcess) -> SnapshotMark:
        offset, lines = self._log_seen.get(server.log_path, (0, 0))
        try:
            with server.log_path.open("rb") as fh:
                if fh.seek(0, 2) < offset:  # shorter than when last counted: not the file we counted
                    offset, lines = 0, 0
                fh.seek(offset)
                tail = fh.read()
        except OSError:
            tail = b""
        offset, lines = offset + len(tail), lines + tail.count(b"\n")
        self._log_seen[server.log_path] = (offset, lines)
        counters = scrape_counters(server.base_url, server.auth)  # None: metrics not enabled on this server
        return SnapshotMark(offset, counters, read_evictions(server.base_url, self._metrics_ranks, server.auth), lines)

    def snapshot(self, server: ServerProcess, mark: SnapshotMark) -> dict[str, Any]:
        """Since ``mark``: peaks and totals from the server's "Prefill batch" / "Decode batch" log lines, and
        its own /metrics cache counters and eviction counts."""
        out: dict[str, Any] = {}
        try:
            with server.log_path.open("rb") as fh:
                fh.seek(mark.log_offset)
                chunk = fh.read()
        except OSError:
            chunk = None
        if chunk is not None:
            # The trial's lines of the saved log, counted by "\n" as results.usage splits them: the dashboard
            # draws the server's usage over time from them.
            log_file = server.log_path.relative_to(self._run_dir) if server.log_path.is_relative_to(self._run_dir) \
                else server.log_path
            out.update(log_file=str(log_file), log_lines=[mark.log_line, mark.log_line + chunk.count(b"\n")])
            stats = LogStats().feed_all(chunk.decode("utf-8", "replace").splitlines())
            out.update(log_prefill_batches=stats.prefill_batches, log_cached_tokens=stats.cached_tokens,
                       log_new_tokens=stats.new_tokens, peak_token_usage=stats.peak_token_usage,
                       peak_mamba_usage=stats.peak_mamba_usage, max_running_req=stats.max_running_req,
                       server_failures=list(stats.failures))
        out.update(read_evictions(server.base_url, self._metrics_ranks, server.auth).since(mark.evictions).snapshot())
        after = scrape_counters(server.base_url, server.auth)
        if mark.counters is not None and after is not None:
            delta = after.since(mark.counters)  # the server's own counters for this trial
            known = delta.known  # counters that went backwards counted nothing knowable: None, never negative
            out.update(metrics_cached_tokens=delta.cached_tokens if known else None,
                       metrics_prompt_tokens=delta.prompt_tokens if known else None)
        return out

    # ------------------------------------------------------------------ provenance and stop
    def info(self) -> EngineInfo:
        command = tuple(redact(self._commands.get(self._arm or "", next(iter(self._commands.values()), []))))
        extra: dict[str, Any] = {"commands": {a: redact(c) for a, c in self._commands.items()}}
        if self._gpus:
            extra["gpus"] = list(self._gpus)  # what nvidia-smi named, beside the configured engine.gpu label
        if self._cache_impl:
            extra["cache_impl"] = dict(self._cache_impl)  # per arm, from the server's "Tree cache initialized" line
        if self._served_page:
            extra["served_page"] = dict(self._served_page)  # per arm, the block the server says it serves with
        if self._planned_page:
            extra["planned_page"] = dict(self._planned_page)  # per arm, the block the plan computed for it
        return EngineInfo(name=self.name, version=self._version, command=command, extra=extra)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
            self._arm = None

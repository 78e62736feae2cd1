"""What a post-trial probe is: what it needs from an engine, when it runs, what it is given, what it writes.

A probe runs after a trial's measured traffic, strictly after it (never mixed with what the trial
measured), on the same server. It writes its samples, one JSON line each, to ``<name>.jsonl`` in the run
dir; a check reads them from there, so re-scoring needs only the saved files. Which probes run is decided
at plan time: a probe is *wanted* by the configuration (usually: the check that reads it is enabled), and
a wanted probe the engine cannot serve is a ConfigError naming both (exit 2), never a silent skip.

Adding a probe: one module here with a class satisfying :class:`Probe`, one line in ``probes/registry.py``,
and the check that reads its samples.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hybridbench.config.schema import RunCfg
from hybridbench.engines.server_auth import NO_AUTH, ServerAuth
from hybridbench.engines.traits import EngineTraits
from hybridbench.errors import ConfigError
from hybridbench.plan.types import Trial
from reference_impl.engine.arms import ArmSpec
from workloads.trace import TraceRow

__all__ = ["Exchange", "JsonRow", "Probe", "ProbeContext", "ProbeNeeds", "read_samples", "samples_path"]


class JsonRow(Protocol):
    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ProbeNeeds:
    """What a probe requires of the engine; :meth:`unmet` says, in words, what a given engine lacks."""

    protocols: frozenset[str] = frozenset()  # it speaks these; the engine must answer one ({} = any server)
    flushable: bool = False  # it empties the cache itself between its requests
    greedy_deterministic: bool = False  # it compares greedy outputs across runs
    reference_semantics: bool = False  # it mirrors the server's cache with reference_impl
    cache_on_arms: bool = False  # it only means something where there is a cache: cache-off arms are skipped

    def unmet(self, traits: EngineTraits) -> list[str]:
        if not traits.protocols:
            return ["a live server to send requests to"]
        out = []
        if self.protocols and not self.protocols & traits.protocols:
            out.append(f"a server answering the {' or '.join(sorted(self.protocols))} protocol")
        if self.flushable and not traits.flushable:
            out.append("a server that flushes its cache on request")
        if self.greedy_deterministic and not traits.greedy_deterministic:
            out.append("deterministic greedy decoding")
        if self.reference_semantics and not traits.reference_semantics:
            out.append("a cache with SGLang's semantics (what reference_impl mirrors)")
        return out

    def protocol(self, client: str, traits: EngineTraits) -> str:
        """The protocol the probe talks: the engine's own load client when the probe speaks it."""
        if not self.protocols or client in self.protocols:
            return client
        return sorted(self.protocols & traits.protocols)[0]


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request of the trial as the server saw it (in completion order)."""

    index: int  # the row's index in the trace
    prompt: tuple[int, ...]  # what was really sent (a session's later turns carry the server's own outputs)
    output_ids: tuple[int, ...]
    output_tokens: int
    status: str  # a Record status


@dataclass(frozen=True, slots=True)
class ProbeContext:
    cfg: RunCfg
    trial: Trial
    arm: ArmSpec  # the trial's arm, as the plan parsed it
    rows: Sequence[TraceRow]
    exchanges: Sequence[Exchange]
    cache_state: str  # how the trial started (a Record cache_state)
    base_url: str
    protocol: str  # a CLIENTS name, chosen by ProbeNeeds.protocol
    flush_path: str  # "" when the server cannot flush
    traits: EngineTraits
    emit: Callable[[JsonRow], None]  # appends one sample to <probe>.jsonl
    run_dir: Path  # where a probe keeps files beyond its samples (the accuracy probe: evalscope's outputs)
    auth: ServerAuth = NO_AUTH  # the server's key: every request a probe sends carries it where the server wants it

    @property
    def identity(self) -> dict[str, Any]:
        """The fields that tie a sample to its trial."""
        t = self.trial
        return {"trial_id": t.trial_id, "arm": t.arm, "workload": t.workload, "repeat": t.repeat}


class Probe(Protocol):
    name: str  # the registry key; samples go to <name>.jsonl
    needs: ProbeNeeds
    snapshot_key: str  # the trial's server snapshot gets the probe's one-line outcome under this key

    def wanted(self, cfg: RunCfg) -> str:
        """Why this run needs the probe (e.g. "checks.enabled has kl"), or "" when it does not."""
        ...

    def run(self, ctx: ProbeContext) -> str | dict[str, Any]:
        """Probe the server after a trial, emitting samples; return a one-line outcome (kept under
        ``snapshot_key``) or several snapshot entries. A failed request is a sample's error, not an exception;
        raising EngineError says the server itself failed."""
        ...

    def sample_from_json(self, obj: dict[str, Any]) -> Any:
        """One saved sample, typed (what its check reads)."""
        ...


def samples_path(run_dir: Path, probe: str) -> Path:
    return run_dir / f"{probe}.jsonl"


def read_samples(path: Path, parse: Callable[[dict[str, Any]], Any]) -> Iterator[Any]:
    """A probe's saved samples; a run that did not run the probe has no file and yields nothing."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield parse(json.loads(line))
            except (json.JSONDecodeError, TypeError, KeyError) as exc:
                raise ConfigError(f"{path}:{lineno}: not a {path.stem} sample ({exc})") from None

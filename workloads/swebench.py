"""swebench: agent trajectories with long, growing contexts and SWE-agent observation collapsing.

Built as Marconi built its SWEBench traces (arXiv 2411.19379): a trajectory is rounds of
(observation, action); the request of turn t sends rounds 0..t-1 (observation + action) and observation
t, and records action t as its output. Only observation 0 (system prompt + task) and the last
``keep_observations`` (5) observations are kept: from turn 6 on, each turn drops the observation of
round t-5, so it shares the previous turn's sequence only up to that observation and branches there.
A session ends at ``max_turns`` turns or at the first input over ``max_input`` tokens. Session i starts
at ``i / sps`` s; each later turn follows after a Poisson(``art``) s think time (integer seconds).

Sources: ``--path`` to SWE-agent ``.traj`` / OpenHands-style files (one file, or a directory whose
sorted files are taken in order) tokenized per message, or to a ready trace JSONL (e.g. SegLen's
``swebench_sps=10_art=5_nums=100.jsonl``), which is replayed unchanged. Without ``--path``: a
**synthetic** generator (labelled in the metadata), whose lengths are our calibration to Marconi's
description (≤ 50 turns, ≤ 32K-token inputs, P95 input near 24.5K); see ``SyntheticShape``.
"""

from __future__ import annotations

import heapq
import math
import random
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError, require
from workloads.limits import MAX_STREAMED_TOKENS, check_expected, check_sessions, check_size, check_start_span
from workloads.params import param
from workloads.sampling import clipped_lognormal, distinct_tokens, poisson, random_token_array
from workloads.text_tokens import Tokenizer, make_tokenizer
from workloads.token_ids import TokenIds
from workloads.trace import TraceRow, TraceStream
from workloads.trace_file import open_trace_file
from workloads.trajectories import Round, load_trajectory

__all__ = [
    "PRESETS",
    "SwebenchParams",
    "SwebenchSource",
    "SyntheticShape",
    "TokenRound",
    "build",
    "generate_swebench",
    "kept_observations",
    "turn_input",
]

_TRAJECTORY_SUFFIXES = (".traj", ".json")


@dataclass(frozen=True, slots=True)
class SwebenchParams:
    num_sessions: int = param(100, "sessions (trajectories)")
    sps: float = param(10.0, "sessions started per second")
    art: float = param(5.0, "mean think time between turns, s (Poisson)")
    max_turns: int = param(50, "turns per session at most")
    max_input: int = param(32768, "end a session at an input over this")
    keep_observations: int = param(5, "observations kept uncollapsed")

    def validate(self) -> None:
        require(self.num_sessions >= 1, f"num_sessions must be >= 1, got {self.num_sessions}")
        require(math.isfinite(self.sps) and self.sps > 0, f"sps must be a positive number, got {self.sps}")
        check_start_span(self.num_sessions, self.sps)
        art_ok = math.isfinite(self.art) and 0 <= self.art <= 500
        require(art_ok, f"art must be in [0, 500] s, got {self.art}")
        require(self.max_turns >= 1, f"max_turns must be >= 1, got {self.max_turns}")
        require(self.max_input >= 1, f"max_input must be >= 1, got {self.max_input}")
        require(self.keep_observations >= 1, f"keep_observations must be >= 1, got {self.keep_observations}")


@dataclass(frozen=True, slots=True)
class SyntheticShape:
    """Length model of the synthetic generator (means in tokens; log-normal with the given sigma).

    Our calibration, not published numbers: a shared agent system prompt (identical across sessions, as
    SWE-agent's), a per-task issue, short actions and heavy-tailed tool outputs. With the defaults the
    seglen preset (seed 42) has 34.5 turns per session, mean input 12.9K, P95 23.1K, max 32.5K tokens
    (Marconi's TTFT figures imply a P95 near 24.5K), and an ideal hit rate of 47%.
    """

    shared_prefix_len: int = 1500
    task_mean: float = 600.0
    task_sigma: float = 0.8
    action_mean: float = 250.0
    action_sigma: float = 0.7
    observation_mean: float = 1500.0
    observation_sigma: float = 1.2
    max_segment: int = 16000
    turns_mean: float = 40.0
    turns_sigma: float = 0.4


PRESETS: dict[str, SwebenchParams] = {
    # SegLen's swebench_sps=10_art=5_nums=100 (Marconi's SWEBench grid point).
    "seglen": SwebenchParams(num_sessions=100, sps=10.0, art=5.0),
}


@dataclass(frozen=True, slots=True)
class TokenRound:
    observation: array[int]
    action: array[int]


def kept_observations(turn: int, keep: int) -> list[int]:
    """Rounds whose observation turn ``turn`` sends: round 0 and the last ``keep`` (``turn`` included)."""
    return [i for i in range(turn + 1) if i == 0 or i > turn - keep]


def turn_input(rounds: Sequence[TokenRound], turn: int, keep: int) -> array[int]:
    kept = set(kept_observations(turn, keep))
    out: array[int] = array("I")
    for i in range(turn):
        if i in kept:
            out += rounds[i].observation
        out += rounds[i].action
    out += rounds[turn].observation
    return out


def _input_len(rounds: Sequence[TokenRound], turn: int, keep: int) -> int:
    kept = set(kept_observations(turn, keep))
    n = sum(len(rounds[i].action) for i in range(turn))
    return n + sum(len(rounds[i].observation) for i in kept)


def expected_synthetic_tokens(params: SwebenchParams, shape: SyntheticShape) -> tuple[float, float]:
    """Tokens one synthetic session draws and sends, expected from the shape's means (turns at their mean): what
    refuses a too-large request before the first draw. Turn t sends the first observation, t actions and the last
    ``keep_observations`` observations; a session stops at max_turns or at the first input over max_input."""
    turns = min(shape.turns_mean, params.max_turns)
    first = shape.shared_prefix_len + shape.task_mean
    drawn = first + shape.action_mean + (turns - 1) * (shape.action_mean + shape.observation_mean)
    sent, t = 0.0, 0
    while t < turns:
        sent_input = first + t * shape.action_mean + min(t, params.keep_observations) * shape.observation_mean
        if sent_input > params.max_input:
            break
        sent, t = sent + sent_input + shape.action_mean, t + 1
    return drawn, sent


def _synthetic_sessions(
    params: SwebenchParams, shape: SyntheticShape, vocab_size: int, rng: random.Random
) -> list[list[TokenRound]]:
    shared = random_token_array(rng, shape.shared_prefix_len, vocab_size)
    firsts = distinct_tokens(rng, params.num_sessions, vocab_size, "synthetic sessions")
    if vocab_size < 2:
        raise WorkloadError("vocab size must be >= 2 so collapsed observations can diverge")
    sessions = []
    for sid in range(params.num_sessions):
        n_rounds = clipped_lognormal(rng, shape.turns_mean, shape.turns_sigma, 1, params.max_turns)
        task_len = clipped_lognormal(rng, shape.task_mean, shape.task_sigma, 1, shape.max_segment)
        task = array("I", (firsts[sid],)) + random_token_array(rng, task_len - 1, vocab_size)
        rounds = []
        for r in range(n_rounds):
            act_len = clipped_lognormal(rng, shape.action_mean, shape.action_sigma, 1, shape.max_segment)
            action = random_token_array(rng, act_len, vocab_size)
            if r == 0:
                obs = shared + task
            else:
                mean, sigma = shape.observation_mean, shape.observation_sigma
                obs_len = clipped_lognormal(rng, mean, sigma, 1, shape.max_segment)
                obs = random_token_array(rng, obs_len, vocab_size)
                if obs[0] == action[0]:  # dropping this observation must change the next token
                    obs[0] = (obs[0] + 1) % vocab_size
            rounds.append(TokenRound(obs, action))
        sessions.append(rounds)
    return sessions


def _tokenize_rounds(rounds: list[Round], tokenizer: Tokenizer) -> list[TokenRound]:
    def join(texts: tuple[str, ...]) -> array[int]:
        out: array[int] = array("I")
        for text in texts:  # per message, as Marconi tokenizes
            out.extend(tokenizer.encode(text))
        return out

    return [TokenRound(join(r.observation), join(r.action)) for r in rounds if r.action]


def _trajectory_files(path: Path, limit: int) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _TRAJECTORY_SUFFIXES)
        if not files:
            raise WorkloadError(f"{path}: no .traj or .json trajectory files in this directory")
        return files[:limit]
    if not path.exists():
        raise WorkloadError(f"{path}: no such file or directory")
    return [path]


def _rows(sessions: Sequence[Sequence[TokenRound]], params: SwebenchParams, rng: random.Random) -> Iterator[TraceRow]:
    """Rows sorted by ``ts`` (ties: session, turn); tokens are materialized one row at a time."""
    plan: list[tuple[float, int, int]] = []
    tokens = 0
    for sid, rounds in enumerate(sessions):
        ts = sid / params.sps
        for tid in range(min(len(rounds), params.max_turns)):
            size = _input_len(rounds, tid, params.keep_observations)
            if size > params.max_input:
                break
            if tid > 0:
                ts += poisson(rng, params.art)
            plan.append((ts, sid, tid))
            tokens += size + len(rounds[tid].action)
    check_size(len(plan), tokens, "the sessions' turns", "num_sessions, max_turns and max_input (rows are built one "
               "at a time)", MAX_STREAMED_TOKENS)
    heapq.heapify(plan)
    while plan:
        ts, sid, tid = heapq.heappop(plan)
        rounds = sessions[sid]
        inputs = turn_input(rounds, tid, params.keep_observations)
        yield TraceRow(sid, tid, float(ts), TokenIds.from_uint32(inputs), TokenIds.from_uint32(rounds[tid].action))


def generate_swebench(
    params: SwebenchParams,
    vocab_size: int,
    seed: int,
    *,
    path: str | None = None,
    tokenizer: str | None = None,
    shape: SyntheticShape | None = None,
    preset: str | None = None,
) -> TraceStream:
    params.validate()
    require(0 < vocab_size <= 2**32, f"vocab size must be in [1, 2**32], got {vocab_size}")
    meta: dict[str, Any] = {"generator": "swebench", "preset": preset, "params": asdict(params), "seed": seed}
    if path is not None and Path(path).suffix == ".jsonl":
        require(tokenizer is None, "--tokenizer does not apply to a trace .jsonl (its rows are token ids)")
        stream = open_trace_file(path, generator="swebench")  # SegLen/Marconi trace: rows unchanged
        return TraceStream(stream.rows, {**stream.metadata, "vocab_size": vocab_size})
    rng = random.Random(seed)
    if path is None:
        require(tokenizer is None, "--tokenizer needs trajectory text: give --path")
        check_sessions(params.num_sessions)
        shape = shape or SyntheticShape()
        drawn, sent = expected_synthetic_tokens(params, shape)
        where = f"num_sessions={params.num_sessions:,}, max_turns={params.max_turns}, max_input={params.max_input}"
        check_expected(params.num_sessions * drawn, f"{where}: the synthetic sessions would draw")
        check_expected(params.num_sessions * sent, f"{where}: their turns would send", MAX_STREAMED_TOKENS)
        sessions = _synthetic_sessions(params, shape, vocab_size, rng)
        source = "synthetic: calibrated to Marconi's SWEBench traces"
        meta.update(synthetic=True, source=source, shape=asdict(shape))
    else:
        tok = make_tokenizer(tokenizer, vocab_size)
        files = _trajectory_files(Path(path), params.num_sessions)
        sessions = [_tokenize_rounds(load_trajectory(f), tok) for f in files]
        meta.update(synthetic=False, source=str(path), files=[f.name for f in files], tokenizer=tok.name)
    meta["vocab_size"] = vocab_size
    return TraceStream(_rows(sessions, params, rng), meta)


@dataclass(frozen=True, slots=True)
class SwebenchSource:
    """Where the trajectories come from (not part of the trace's parameters)."""

    path: str | None = param(None, ".traj/OpenHands file or dir, or a trace .jsonl (replayed as is)")
    tokenizer: str | None = param(None, "transformers tokenizer name or path (default: hash-words)")


def build(params: SwebenchParams, source: SwebenchSource, vocab_size: int, seed: int,
          preset: str | None) -> TraceStream:
    """The registry's entry point (``workloads.registry``)."""
    return generate_swebench(params, vocab_size, seed, path=source.path, tokenizer=source.tokenizer, preset=preset)

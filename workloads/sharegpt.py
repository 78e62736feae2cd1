"""sharegpt: multi-turn chat sessions, low prefix reuse (the regression check of the seeds).

Sources, in order of preference:

* ``--path FILE``: a ShareGPT JSON list (``[{"id": ..., "conversations": [{"from": "human"|"gpt", "value":
  text}, ...]}, ...]``, e.g. ``ShareGPT_V3_unfiltered_cleaned_split.json``), text tokenized per message;
* ``--dataset NAME``: the same records through the optional ``datasets`` package;
* neither: a **synthetic** stand-in following published ShareGPT statistics (labelled ``synthetic`` in
  the metadata; ``workloads.stats`` prints the label).

Sessions are built as in Marconi (arXiv 2411.19379): turn t's input is every earlier (user,
assistant) pair + user message t, its output is assistant message t; a session stops at the first turn
whose input exceeds ``max_context`` tokens; session i starts at ``i / sps`` s and each later turn
follows after the user's typing time (words / (90 words per minute)).

``single_turn`` is SGLang bench_serving's ``--dataset-name sharegpt`` instead: each conversation's first
user message alone is one request (its reply's length is the output, or ``output_len`` when set, as
``--sharegpt-output-len``), so almost nothing is shared — the seglen PR's regression load, "~1% prefix hit".
"""

from __future__ import annotations

import importlib
import json
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError, require
from workloads.limits import MAX_TOKENS, check_expected, check_sessions, check_size, check_start_span
from workloads.params import param
from workloads.sampling import clipped_lognormal, random_tokens
from workloads.text_tokens import Tokenizer, make_tokenizer
from workloads.trace import TraceRow, TraceStream

__all__ = [
    "SHAREGPT_STATS",
    "ChatTurn",
    "ShareGptParams",
    "ShareGptSource",
    "build",
    "expected_synthetic_tokens",
    "generate_sharegpt",
    "parse_conversations",
    "synthetic_sessions",
]

WORDS_PER_SECOND = 90 / 60  # Marconi's typing model

# Published ShareGPT statistics: 94,145 conversations, 330,239 turns, 3.51 turns per conversation
# (ShareChat, arXiv 2512.17843, Table 1); tokens per user prompt 94.5 ± 626.4 and per response
# 348.5 ± 269.9 (LMSYS-Chat-1M paper, Table 1, Llama tokenizer; to re-check against the paper). Lengths
# are log-normal with that mean and standard deviation; turn counts are 1 + geometric with mean 3.51.
SHAREGPT_STATS: dict[str, float] = {
    "mean_turns": 3.51,
    "user_mean": 94.5,
    "user_std": 626.4,
    "assistant_mean": 348.5,
    "assistant_std": 269.9,
}
_USER_ROLES = {"human", "user"}
_ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """One user message and the assistant reply, as token ids; ``words`` drives the typing time."""

    user: tuple[int, ...]
    assistant: tuple[int, ...]
    words: int


@dataclass(frozen=True, slots=True)
class ShareGptParams:
    num_sessions: int = param(100, "sessions")
    min_turns: int = param(1, "drop conversations with fewer turns")
    max_turns: int = param(1000, "truncate sessions to this many turns")
    max_context: int = param(32768, "end a session at an input over this")
    sps: float = param(1.0, "sessions started per second")
    shuffle: bool = param(False, "shuffle conversations (seeded)")
    single_turn: bool = param(False, "bench_serving's sharegpt: each conversation's first user message alone")
    # 0 = the reply's length
    output_len: int = param(0, "every output this many tokens (--sharegpt-output-len); 0: the reply's length")

    def validate(self) -> None:
        require(self.output_len >= 0, f"output_len must be >= 0, got {self.output_len}")
        require(self.num_sessions >= 1, f"num_sessions must be >= 1, got {self.num_sessions}")
        require(self.min_turns >= 1, f"min_turns must be >= 1, got {self.min_turns}")
        require(self.max_turns >= self.min_turns, f"max_turns {self.max_turns} < min_turns {self.min_turns}")
        require(self.max_context >= 1, f"max_context must be >= 1, got {self.max_context}")
        require(math.isfinite(self.sps) and self.sps > 0, f"sps must be a positive number, got {self.sps}")
        check_start_span(self.num_sessions, self.sps)
        require(self.output_len <= MAX_TOKENS, f"output_len must be <= {MAX_TOKENS:,}, got {self.output_len:,}")


# Marconi's ShareGPT traces: >= 20 messages (10 rounds), first 100 conversations, 32K context.
PRESETS: dict[str, ShareGptParams] = {"marconi": ShareGptParams(num_sessions=100, min_turns=10)}


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WorkloadError(f"{where}: 'value' must be a string, got {type(value).__name__}")
    return value


def parse_conversations(record: Any, where: str) -> list[tuple[str, str]]:
    """(user text, assistant text) pairs of one ShareGPT record; system text joins the next user turn."""
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        raise WorkloadError(f"{where}: expected an object with a 'conversations' list")
    pairs: list[tuple[str, str]] = []
    user: list[str] = []
    reply: list[str] = []
    for j, msg in enumerate(record["conversations"]):
        at = f"{where} message {j}"
        if not isinstance(msg, dict) or not isinstance(msg.get("from"), str):
            raise WorkloadError(f"{at}: expected an object with a string 'from'")
        role, text = msg["from"].lower(), _text(msg.get("value"), at)
        if role in _ASSISTANT_ROLES:
            if user:  # leading assistant messages (no user turn yet) are dropped
                reply.append(text)
        elif role in _USER_ROLES or role == "system":
            if reply:
                pairs.append(("\n".join(user), "\n".join(reply)))
                user, reply = [], []
            user.append(text)
        else:
            raise WorkloadError(f"{at}: unknown role {msg['from']!r}")
    if user and reply:
        pairs.append(("\n".join(user), "\n".join(reply)))
    return pairs


def _saved_to_disk(folder: Path) -> bool:
    """A folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` (its own metadata files)."""
    return folder.is_dir() and ((folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file())


def _load_records(path: str | None, dataset: str | None, split: str) -> Iterable[Any]:
    if path is not None:
        p = Path(path)
        try:
            with p.open(encoding="utf-8") as fh:
                data = json.load(fh)
        except OSError as exc:
            raise WorkloadError(f"{p}: cannot read ShareGPT file ({exc.strerror or exc})") from None
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too deep
            raise WorkloadError(f"{p}: not a ShareGPT JSON file ({type(exc).__name__}: {exc})") from None
        if not isinstance(data, list):
            kind = type(data).__name__
            raise WorkloadError(f"{p}: a ShareGPT file is a JSON list of conversations, got {kind}")
        return data
    assert dataset is not None
    try:
        datasets: Any = importlib.import_module("datasets")
    except ImportError:
        raise WorkloadError(f"--dataset {dataset} needs the optional 'datasets' package; or use --path") from None
    try:
        if _saved_to_disk(Path(dataset)):  # datasets' save_to_disk folder: load_dataset cannot read it
            saved = datasets.load_from_disk(dataset)
            return list(saved[split] if isinstance(saved, datasets.DatasetDict) else saved)
        return list(datasets.load_dataset(dataset, split=split))
    except Exception as exc:  # network, auth and schema errors all end the run the same way
        raise WorkloadError(f"cannot load dataset {dataset!r} split {split!r}: {exc}") from None


def tokenized_sessions(
    records: Iterable[Any], tokenizer: Tokenizer, params: ShareGptParams, source: str, rng: random.Random
) -> list[list[ChatTurn]]:
    """The first ``num_sessions`` records with at least ``min_turns`` turns, tokenized per message."""
    indexed = list(enumerate(records))
    if params.shuffle:
        rng.shuffle(indexed)
    sessions: list[list[ChatTurn]] = []
    for i, record in indexed:
        pairs = parse_conversations(record, f"{source}: conversation {i}")
        if len(pairs) < params.min_turns:
            continue
        pairs = pairs[: params.max_turns]
        sessions.append([ChatTurn(tokenizer.encode(u), tokenizer.encode(a), u.count(" ")) for u, a in pairs])
        if len(sessions) == params.num_sessions:
            break
    if not sessions:
        raise WorkloadError(f"{source}: no conversation has >= {params.min_turns} user/assistant turns")
    return sessions


def synthetic_sessions(
    params: ShareGptParams, vocab_size: int, rng: random.Random, stats: dict[str, float] = SHAREGPT_STATS
) -> list[list[ChatTurn]]:
    """Sessions drawn from ``stats``; turn counts are conditioned on ``>= min_turns`` (memoryless)."""
    p = 1.0 / stats["mean_turns"]  # 1 + Geometric(p) has mean 1/p
    user_sigma = math.sqrt(math.log1p((stats["user_std"] / stats["user_mean"]) ** 2))
    asst_sigma = math.sqrt(math.log1p((stats["assistant_std"] / stats["assistant_mean"]) ** 2))
    sessions: list[list[ChatTurn]] = []
    for _ in range(params.num_sessions):
        extra = math.floor(math.log(1.0 - rng.random()) / math.log(1.0 - p)) if p < 1.0 else 0
        n_turns = min(params.min_turns + extra, params.max_turns)
        turns = []
        for _t in range(n_turns):
            u_len = clipped_lognormal(rng, stats["user_mean"], user_sigma, 1, 8192)
            a_len = clipped_lognormal(rng, stats["assistant_mean"], asst_sigma, 1, 4096)
            user = random_tokens(rng, u_len, vocab_size)
            turns.append(ChatTurn(user, random_tokens(rng, a_len, vocab_size), round(0.75 * u_len)))
        sessions.append(turns)
    return sessions


def expected_synthetic_tokens(params: ShareGptParams, stats: dict[str, float] = SHAREGPT_STATS) -> tuple[float, float]:
    """Tokens one synthetic session draws and sends, expected from the statistics' means: what refuses a too-large
    request before the first draw (drawing runs at about a million tokens a second, and every turn re-sends the
    conversation, so what is sent grows with the square of the turns kept)."""
    q = 1.0 - 1.0 / stats["mean_turns"]  # turns = min(min_turns + Geometric, max_turns), P(extra >= j) = q**j
    span = params.max_turns - params.min_turns
    turns = params.min_turns + (q * (1.0 - q**span) / (1.0 - q) if q > 0 else 0.0)
    user, drawn_reply = stats["user_mean"], stats["assistant_mean"]
    reply = params.output_len or drawn_reply
    # Turn k's input is k user messages and k - 1 replies; a session stops at the first over max_context.
    kept = math.floor((params.max_context + reply) / (user + reply))
    if params.single_turn:
        kept = min(kept, 1)

    def sent(m: int) -> float:  # turns 1..m, each input plus its reply: (user + reply) * k
        return (user + reply) * m * (m + 1) / 2

    total, n, left = 0.0, params.min_turns, 1.0
    while left > 1e-12 and n < min(params.max_turns, kept):
        share = left * (1.0 - q)  # P(turns == n)
        total, left, n = total + share * sent(n), left - share, n + 1
    total += left * sent(min(n, kept))
    return turns * (user + drawn_reply), total


def _fixed_output(turn: ChatTurn, output_len: int) -> ChatTurn:
    if not output_len:
        return turn
    reply = (turn.assistant * (output_len // max(1, len(turn.assistant)) + 1))[:output_len] or (0,) * output_len
    return replace(turn, assistant=reply)


def session_rows(sessions: Sequence[Sequence[ChatTurn]], params: ShareGptParams) -> Iterator[TraceRow]:
    """Marconi's multi-turn rows (or bench_serving's first turns alone), sorted by ``ts`` (ties: session,
    then turn)."""
    _check_sent(sessions, params)
    rows: list[TraceRow] = []
    for sid, whole in enumerate(sessions):
        turns = [_fixed_output(t, params.output_len) for t in (whole[:1] if params.single_turn else whole)]
        history: tuple[int, ...] = ()
        ts = sid / params.sps
        for tid, turn in enumerate(turns):
            inputs = history + turn.user
            if len(inputs) > params.max_context:
                break
            if tid > 0:
                ts += turn.words / WORDS_PER_SECOND
            rows.append(TraceRow(sid, tid, ts, inputs, turn.assistant))
            history = inputs + turn.assistant
    rows.sort(key=lambda r: (r.ts, int(r.session_id), r.turn_id))
    return iter(rows)


def _check_sent(sessions: Sequence[Sequence[ChatTurn]], params: ShareGptParams) -> None:
    """The rows' exact count and tokens, from the turns' lengths, before any row is built (rows hold their whole
    input: a file's long conversations multiply)."""
    requests = tokens = 0
    for whole in sessions:
        history = 0
        for turn in whole[:1] if params.single_turn else whole:
            reply = params.output_len or len(turn.assistant)
            if history + len(turn.user) > params.max_context:
                break
            requests, tokens = requests + 1, tokens + history + len(turn.user) + reply
            history += len(turn.user) + reply
    check_size(requests, tokens, "the sessions' turns", "num_sessions, max_turns and max_context (every turn "
               "re-sends the conversation)")


def generate_sharegpt(
    params: ShareGptParams,
    vocab_size: int,
    seed: int,
    *,
    path: str | None = None,
    dataset: str | None = None,
    split: str = "train",
    tokenizer: str | None = None,
    preset: str | None = None,
) -> TraceStream:
    params.validate()
    require(vocab_size >= 1, f"vocab size must be >= 1, got {vocab_size}")
    require(path is None or dataset is None, "give either --path or --dataset, not both")
    rng = random.Random(seed)
    meta: dict[str, Any] = {"generator": "sharegpt", "preset": preset, "params": asdict(params), "seed": seed}
    if path is None and dataset is None:
        require(tokenizer is None, "--tokenizer needs text: give --path or --dataset")
        check_sessions(params.num_sessions)
        check_size(params.num_sessions * params.min_turns, 0, "num_sessions * min_turns (synthetic turns)", "")
        drawn, sent = expected_synthetic_tokens(params)
        where = (f"num_sessions={params.num_sessions:,}, min_turns={params.min_turns}, max_turns={params.max_turns}, "
                 f"max_context={params.max_context}")
        check_expected(params.num_sessions * drawn, f"{where}: the synthetic sessions would draw")
        check_expected(params.num_sessions * sent, f"{where}: their turns would send (each re-sends the conversation)")
        sessions = synthetic_sessions(params, vocab_size, rng)
        meta.update(synthetic=True, source="synthetic: published ShareGPT statistics", stats=SHAREGPT_STATS)
    else:
        tok = make_tokenizer(tokenizer, vocab_size)
        source = path if path is not None else f"datasets:{dataset}[{split}]"
        sessions = tokenized_sessions(_load_records(path, dataset, split), tok, params, str(source), rng)
        meta.update(synthetic=False, source=str(source), tokenizer=tok.name)
    meta["vocab_size"] = vocab_size
    return TraceStream(session_rows(sessions, params), meta)


@dataclass(frozen=True, slots=True)
class ShareGptSource:
    """Where the conversations come from (not part of the trace's parameters)."""

    path: str | None = param(None, "ShareGPT JSON file (conversations of from/value)")
    dataset: str | None = param(None, "dataset name for the optional 'datasets' package")
    split: str = param("train", "dataset split")
    tokenizer: str | None = param(None, "transformers tokenizer name or path (default: hash-words)")


def build(params: ShareGptParams, source: ShareGptSource, vocab_size: int, seed: int,
          preset: str | None) -> TraceStream:
    """The registry's entry point (``workloads.registry``)."""
    return generate_sharegpt(params, vocab_size, seed, path=source.path, dataset=source.dataset, split=source.split,
                             tokenizer=source.tokenizer, preset=preset)

"""Generate a workload trace.

    python -m workloads.generate {gsp,sharegpt,swebench,random,trace} [options] \\
        --vocab-size V --seed S -o TRACE.jsonl

Writes one trace (workloads/README.md) atomically: a metadata line (generator, parameters, seed, vocab size,
``synthetic``) and one row per request. The same arguments and seed give a byte-identical file.
``--scale F`` applies ``workloads.scale`` to the result, then ``--keep-sessions K`` keeps the first K sessions,
whole (``workloads.sessions``). Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from workloads.cli import OneLineArgumentParser, run_cli
from workloads.errors import WorkloadError, require
from workloads.registry import WORKLOADS, get_workload
from workloads.sampling import MAX_VOCAB
from workloads.scale import scale_stream
from workloads.sessions import keep_first_sessions
from workloads.token_ids import largest_id
from workloads.trace import TraceRow, TraceStream, write_trace

__all__ = ["build_parser", "check_shape", "checked_rows", "generate_trace", "main", "shaped"]


def checked_rows(rows: Iterable[TraceRow], vocab_size: int) -> Iterator[TraceRow]:
    """Pass rows through, failing on the first token id at or above ``vocab_size``."""
    for i, row in enumerate(rows):
        for key, toks in (("input_tokens", row.input_tokens), ("output_tokens", row.output_tokens)):
            # largest_id reads the compact buffer: max() made a Python int per id (a seventh of seglen's forecast)
            if toks and (top := largest_id(toks)) >= vocab_size:
                raise WorkloadError(
                    f"row {i} (session {row.session_id!r}, turn {row.turn_id}): {key} holds id {top}"
                    f" >= --vocab-size {vocab_size}"
                )
        yield row


def build_parser() -> OneLineArgumentParser:
    parser = OneLineArgumentParser(prog="python -m workloads.generate", description="Generate a workload trace.")
    sub = parser.add_subparsers(dest="workload", required=True, metavar="WORKLOAD")
    for w in WORKLOADS.values():
        p = sub.add_parser(w.name, help=w.summary, description=w.summary)
        w.add_arguments(p)
        p.add_argument("--vocab-size", type=int, required=True, help="token ids are drawn below this")
        p.add_argument("--seed", type=int, default=42, help="RNG seed (default 42, as SGLang)")
        p.add_argument("-o", "--output", required=True, help="trace JSONL to write (atomically)")
        p.add_argument("--scale", type=int, help="shrink lengths and counts by this integer factor")
        p.add_argument("--keep-sessions", type=int, default=0,
                       help="keep only the first K sessions, whole, after scaling (default 0: all)")
    return parser


def shaped(stream: TraceStream, vocab: int, scale: int | None, keep_sessions: int = 0) -> TraceStream:
    """The generator's stream as the run sends it: scaled, cut to its first ``keep_sessions`` sessions, id-checked."""
    if scale is not None and keep_sessions:
        return _scaled_then_kept(stream, vocab, scale, keep_sessions)
    if scale is not None:
        stream = scale_stream(stream, scale, vocab)
    if keep_sessions:
        stream = keep_first_sessions(stream, keep_sessions)
    return TraceStream(checked_rows(stream.rows, vocab), stream.metadata)


def _scaled_then_kept(stream: TraceStream, vocab: int, scale: int, keep_sessions: int) -> TraceStream:
    """``keep_first_sessions(scale_stream(stream, scale, vocab), keep_sessions)``, the same rows and metadata, with
    only the kept rows' lengths scaled: the cut reads every row's session but no tokens, and a row's scaled tokens
    are its own (seglen's SWE-bench load scaled whole to keep its first two sessions)."""
    kept = keep_first_sessions(scale_stream(stream, scale, vocab, lengths=False), keep_sessions)
    rows = scale_stream(TraceStream(kept.rows, {}), scale, vocab, counts=False).rows
    history = kept.metadata["scale"]
    metadata = {**kept.metadata, "scale": [*history[:-1], {**history[-1], "lengths": True}]}
    return TraceStream(checked_rows(rows, vocab), metadata)


def _write(stream: TraceStream, vocab: int, scale: int | None, output: str, keep_sessions: int = 0) -> None:
    stream = shaped(stream, vocab, scale, keep_sessions)
    try:
        write_trace(output, stream.rows, stream.metadata)
    except OSError as exc:
        raise WorkloadError(f"{output}: cannot write the trace ({exc.strerror or exc})") from None


def check_shape(vocab_size: int, keep_sessions: int) -> None:
    """WorkloadError (one line) for a vocab size or session cut no trace can be shaped to."""
    require(1 <= vocab_size <= MAX_VOCAB, f"vocab size must be in [1, 2**32], got {vocab_size}")
    require(keep_sessions >= 0, f"keep_sessions must be >= 0 (0: every session), got {keep_sessions}")


def generate_trace(workload: str, values: Mapping[str, object], *, vocab_size: int, seed: int, output: str,
                   preset: str | None = None, scale: int | None = None, keep_sessions: int = 0) -> None:
    """What ``main`` does for a command line, for a typed caller: ``values`` maps parameter names (the
    generator's declarations, ``workloads.params``) to values. Bad input raises WorkloadError (one line)."""
    check_shape(vocab_size, keep_sessions)
    _write(get_workload(workload).make(values, vocab_size, seed, preset=preset), vocab_size, scale, output,
           keep_sessions)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    vocab: int = args.vocab_size
    require(1 <= vocab <= MAX_VOCAB, f"--vocab-size must be in [1, 2**32], got {vocab}")
    require(args.keep_sessions >= 0, f"--keep-sessions must be >= 0 (0: every session), got {args.keep_sessions}")
    _write(WORKLOADS[args.workload].from_args(args, vocab, args.seed), vocab, args.scale, args.output,
           args.keep_sessions)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m workloads.generate"))

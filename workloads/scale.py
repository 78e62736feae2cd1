"""scale: shrink a trace's lengths and counts by a factor, keeping its sharing structure.

Needed to run GPU-sized loads on the CPU reference engine. With factor f:

* **lengths**: each request's input + output is cut into blocks of f tokens and each block becomes one
  token, the hash of the *whole prefix* up to the block's end (a hash chain). Two sequences that share
  their first L tokens therefore share exactly their first floor(L / f) scaled tokens and differ right
  after (up to hash collisions, probability 1/vocab per token): the radix-tree shape, branch points and
  multi-turn append chains survive, scaled by 1/f. Inputs keep ceil(len / f) >= 1 tokens, outputs at
  least one token when they had any;
* **counts**: of the sharing units (gsp ``group`` when rows carry one, else sessions) in order of first
  appearance, every f-th is kept (ceil(n / f) units, whole: every turn of a kept session stays).

The transform is recorded in the trace metadata under ``scale`` (a list, so repeated scaling composes).

CLI: ``python -m workloads.scale IN.jsonl -o OUT.jsonl --factor F [--vocab-size V]
[--what lengths|counts|both]``
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from workloads.cli import OneLineArgumentParser, run_cli
from workloads.errors import WorkloadError, require
from workloads.prefix_tree import pack_tokens
from workloads.sampling import MAX_VOCAB
from workloads.trace import TraceRow, TraceStream, iter_trace, write_trace

__all__ = ["main", "scale_sequence", "scale_stream"]


def scale_sequence(
    tokens: Sequence[int], n_input: int, factor: int, vocab_size: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(scaled input, scaled output) of ``tokens`` = input + output; the input is ``n_input`` tokens."""
    packed = pack_tokens(tokens)
    step = 4 * factor
    # The chain is sequential; only the hashing stays in the loop. Each 8-byte digest is read as a little-endian
    # uint64 and reduced modulo the vocab by numpy, all at once (exact: both below 2**64). Per block, a Python int
    # and a modulo cost as much as the hash (a CPU run's seglen loads: 4M blocks).
    blake2b, digests = hashlib.blake2b, list[bytes]()
    append = digests.append
    h = b""
    for start in range(0, len(packed), step):
        h = blake2b(h + packed[start : start + step], digest_size=8).digest()
        append(h)
    n_in = -(-n_input // factor)
    if len(tokens) > n_input and len(digests) == n_in:  # keep a non-empty output non-empty
        append(blake2b(h + b"output", digest_size=8).digest())
    ids = np.frombuffer(b"".join(digests), "<u8") % np.uint64(vocab_size)
    out: list[int] = ids.tolist()
    return tuple(out[:n_in]), tuple(out[n_in:])


def _unit(row: TraceRow) -> tuple[str, Any]:
    group = row.extra.get("group")
    if isinstance(group, (int, str)) and not isinstance(group, bool):
        return ("group", group)
    return ("session", row.session_id)


def scale_stream(
    stream: TraceStream, factor: int, vocab_size: int, lengths: bool = True, counts: bool = True
) -> TraceStream:
    """The scaled trace; rows stay in their order and keep ids, ``ts`` and extra fields."""
    require(isinstance(factor, int) and factor >= 1, f"scale factor must be an integer >= 1, got {factor}")
    require(isinstance(vocab_size, int) and not isinstance(vocab_size, bool) and 1 <= vocab_size <= MAX_VOCAB,
            f"vocab size must be an integer in [1, 2**32], got {vocab_size!r}")

    def rows(source: Iterable[TraceRow]) -> Iterator[TraceRow]:
        rank: dict[tuple[str, Any], int] = {}
        for row in source:
            if counts:
                unit = _unit(row)
                if rank.setdefault(unit, len(rank)) % factor:
                    continue
            if not lengths:
                yield row
                continue
            seq = row.input_tokens + row.output_tokens
            inputs, outputs = scale_sequence(seq, row.num_input_tokens, factor, vocab_size)
            yield TraceRow(row.session_id, row.turn_id, row.ts, inputs, outputs, row.extra)

    record = {"factor": factor, "lengths": lengths, "counts": counts, "count_unit": "gsp group, else session"}
    previous = stream.metadata.get("scale")
    history = [*previous, record] if isinstance(previous, list) else [record]
    return TraceStream(rows(stream.rows), {**stream.metadata, "scale": history, "vocab_size": vocab_size})


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m workloads.scale", description="shrink a trace by a factor")
    parser.add_argument("trace", help="input trace JSONL")
    parser.add_argument("-o", "--output", required=True, help="output trace JSONL (written atomically)")
    parser.add_argument("--factor", type=int, required=True, help="integer shrink factor >= 1")
    parser.add_argument(
        "--vocab-size",
        type=int,
        help="token ids of the scaled trace stay below this (default: the trace metadata's vocab_size)",
    )
    parser.add_argument("--what", choices=["both", "lengths", "counts"], default="both")
    args = parser.parse_args(argv)
    items = iter_trace(args.trace)
    first = next(items, None)
    require(first is not None, f"{args.trace}: the trace has no rows")
    meta: dict[str, Any] = first if isinstance(first, dict) else {}
    if not isinstance(first, TraceRow):
        first = next(items, None)
    if not isinstance(first, TraceRow):  # a metadata line alone was scaled to a trace every reader refuses, exit 0
        raise WorkloadError(f"{args.trace}: the trace has no rows")
    head = [first]
    vocab = args.vocab_size if args.vocab_size is not None else meta.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool):
        raise WorkloadError(f"{args.trace}: no vocab_size in the trace metadata; pass --vocab-size")
    where = "--vocab-size" if args.vocab_size is not None else f"{args.trace}: the metadata's vocab_size"
    require(1 <= vocab <= MAX_VOCAB, f"{where} must be in [1, 2**32], got {vocab}")
    rows = (item for item in itertools.chain(head, items) if isinstance(item, TraceRow))
    lengths, counts = args.what != "counts", args.what != "lengths"
    scaled = scale_stream(TraceStream(rows, meta), args.factor, vocab, lengths=lengths, counts=counts)
    write_trace(args.output, scaled.rows, scaled.metadata)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m workloads.scale"))

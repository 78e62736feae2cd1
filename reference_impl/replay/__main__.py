"""``python -m reference_impl.replay TRACE.jsonl --policy P --capacity-bytes N``: hit rates of a policy.

Exit codes: 0 done; 2 bad input (missing or malformed trace, unknown policy or model, bad number),
reported as one line on stderr.
"""

from __future__ import annotations

import os

# The replay does no linear algebra, but numpy (the trace reader's id parser) starts OpenBLAS with a worker thread
# per core, whose start-up and idle spinning cost this command a tenth of a CPU second. Set before numpy loads; a
# value the user exported is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from reference_impl.engine.arms import SEGLEN_EFF_WEIGHT_MAX
from reference_impl.models import MODELS, get_model
from reference_impl.policies.registry import POLICIES, make_replay_cache
from reference_impl.replay.api import ReplayConfig
from reference_impl.replay.run import ReplayResult, replay_rows
from workloads.closed_stdout import quiet_on_closed_stdout
from workloads.trace import TraceError, read_trace

EXIT_USAGE = 2
MARCONI_TREES = {"marconi", "sglang_plus", "vllm_plus"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _positive_bytes(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"capacity {text!r} is not a number") from None
    if not (0 < value < float("inf")):  # also rejects NaN
        raise argparse.ArgumentTypeError(f"capacity must be a positive number of bytes, got {text}")
    return int(value)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _policy_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if "" in names and text.strip():  # 'lru,,seglen' or 'lru,': an empty name was dropped silently
        raise argparse.ArgumentTypeError(f"empty policy name in {text!r} (a comma-separated list of names)")
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"a policy listed more than once in {text!r}")
    names = [n for n in names if n]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {', '.join(unknown) or repr(text)} (choose from {', '.join(POLICIES)})"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m reference_impl.replay", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("trace", help="JSONL trace (hybridbench or Marconi format)")
    p.add_argument(
        "--policy", required=True, type=_policy_list, help=f"one or a comma-separated list of: {', '.join(POLICIES)}"
    )
    p.add_argument("--capacity-bytes", required=True, type=_positive_bytes, help="cache budget, e.g. 4e10")
    p.add_argument("--model", default="marconi-7b", choices=sorted(MODELS))
    p.add_argument("--strategy", default="no_buffer", choices=["no_buffer", "extra_buffer", "extra_buffer_lazy"])
    p.add_argument("--page-size", type=_positive_int, default=1)
    p.add_argument("--eff-weight", type=_non_negative_float, default=None, help="seglen weight or Marconi alpha")
    p.add_argument("--marconi-mode", default="faithful", choices=["faithful", "corrected"])
    p.add_argument("--bootstrap-multiplier", type=_positive_int, default=5)
    p.add_argument("--chunked-prefill-size", type=_positive_int, default=8192)
    p.add_argument("--track-interval", type=_positive_int, default=256)
    p.add_argument("--host-capacity-bytes", type=_positive_bytes, default=None, help="host (L2) tier budget")
    p.add_argument("--json", action="store_true", help="print one JSON object per policy, a line each")
    return p


def _render(result: ReplayResult) -> str:
    rows: list[tuple[str, str]] = [
        ("policy", result.policy),
        ("requests", str(result.num_requests)),
        ("input tokens", str(result.input_tokens)),
        ("token hit rate", f"{result.token_hit_rate:.4%}"),
        ("request hit rate", f"{result.request_hit_rate:.4%}"),
        ("FLOPs saved", f"{result.flops_saved:.4e}"),
        ("states admitted", str(result.states_admitted)),
        ("states evicted", str(result.states_evicted)),
        ("elapsed", f"{result.elapsed_s:.3f} s"),
        *((k.replace("_", " "), f"{v:g}") for k, v in result.notes.items()),
    ]
    return "\n".join(f"{label:<24}{value}" for label, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if "seglen" in args.policy and args.eff_weight is not None and args.eff_weight > SEGLEN_EFF_WEIGHT_MAX:
        print(f"error: --eff-weight must be in [0, {SEGLEN_EFF_WEIGHT_MAX:g}] for seglen (its replay-length term's "
              f"weight against recency), got {args.eff_weight:g}", file=sys.stderr)
        return EXIT_USAGE
    # Flags only some policies read, given to none of those listed: the replay went on without them (exit 0).
    for flag, given, readers in (("--eff-weight", args.eff_weight is not None, {"seglen", "marconi"}),
                                 ("--marconi-mode", args.marconi_mode != "faithful", {"marconi", "sglang_plus"}),
                                 ("--bootstrap-multiplier", args.bootstrap_multiplier != 5, {"marconi"})):
        if given and not readers & set(args.policy):
            print(f"error: {flag} is read by {' and '.join(sorted(readers))} only; --policy lists "
                  f"{','.join(args.policy)}", file=sys.stderr)
            return EXIT_USAGE
    if args.strategy == "no_buffer" and args.page_size != 1 and {"lru", "seglen"} & set(args.policy):
        print("error: strategy no_buffer requires --page-size 1 (as SGLang asserts)", file=sys.stderr)
        return EXIT_USAGE
    try:
        # Marconi's trees hold ids as 4-byte items (reference_impl/marconi/tree.py): a larger id is refused at its
        # file:line, as an id past a model's vocabulary is, not met as an OverflowError mid-replay.
        limit = None
        if MARCONI_TREES & set(args.policy):
            from reference_impl.marconi.tree import TOKEN_BYTES  # noqa: PLC0415 - imported by those policies only

            limit = 1 << (8 * TOKEN_BYTES)
        trace = read_trace(args.trace, limit)
        config = ReplayConfig(
            capacity_bytes=args.capacity_bytes,
            model=get_model(args.model),
            strategy=args.strategy,
            page_size=args.page_size,
            eff_weight=args.eff_weight,
            marconi_mode=args.marconi_mode,
            bootstrap_multiplier=args.bootstrap_multiplier,
            chunked_prefill_size=args.chunked_prefill_size,
            track_interval=args.track_interval,
            host_capacity_bytes=args.host_capacity_bytes or 0,
        )
        caches = [(name, make_replay_cache(name, config)) for name in args.policy]
    except (TraceError, ValueError, KeyError) as exc:
        msg = exc.args[0] if exc.args else str(exc)
        print(f"error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    blocks = []
    for name, cache in caches:
        result = replay_rows(name, trace.rows, cache, config.model)
        blocks.append(json.dumps(result.to_json(), sort_keys=True) if args.json else _render(result))
    print(("\n" if args.json else "\n\n").join(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_stdout(main))

"""Marconi's own simulator as one command: ``python benchmarks/marconi_replay.py TRACE --policy P --capacity-bytes C``.

The other side of ``benchmarks/marconi_whole_commands.py``: a process that loads the trace from its file the way
Marconi's driver does (``policy_exploration.load_request_trace``: ``list(file)``, ``json.loads`` per line) and
replays it through Marconi's classes (marconi = their policy version 2 with α tuning, sglang_plus = version 1,
vllm_plus = their vLLM+ class), as ``policy_exploration.run_trace_with_config`` does. It prints the token hit rate
in the lines ``python -m reference_impl.replay`` prints, so the two outputs compare line by line.

Marconi's code (github.com/ruipeterpan/marconi, CC BY-NC) is never vendored: ``--marconi-dir`` / ``MARCONI_DIR``
names a checkout, and the interpreter running this file needs Marconi's imports (numpy, scipy, transformers).
This file imports nothing of hybridbench, so that process pays only for Marconi's own imports.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from whole_command import file, folder, positive  # a sibling, standard library only like this script

POLICIES = ("marconi", "sglang_plus", "vllm_plus")
METADATA_KEY = "__trace_metadata__"  # hybridbench's first line; Marconi's own traces have none


def marconi_tree(marconi_dir: Path, policy: str, capacity: float) -> Any:
    """One of Marconi's radix trees, configured as its driver configures it for ``policy``."""
    if str(marconi_dir) not in sys.path:
        sys.path.insert(0, str(marconi_dir))
    config_tuner = importlib.import_module("config_tuner")
    radix_cache_hybrid = importlib.import_module("radix_cache_hybrid")
    radix_cache_vllm = importlib.import_module("radix_cache_vllm")

    # Marconi's tuner breaks exact α ties by worker completion order; make that the submission (ascending α)
    # order, i.e. the smallest α wins, the rule our tuner documents, so the two sides can be compared exactly.
    setattr(config_tuner, "as_completed", list)  # noqa: B010 - patching a module we do not type
    if policy == "vllm_plus":
        return radix_cache_vllm.RadixCache(capacity_bytes=capacity, block_size=32, use_logical_ts=True)
    version = {"marconi": 2, "sglang_plus": 1}[policy]
    return radix_cache_hybrid.RadixCache(
        capacity_bytes=capacity, evict_policy_version=version, eff_weight=0, bootstrap_multiplier=5, use_logical_ts=True
    )


def load_request_trace(path: Path) -> list[dict[str, Any]]:
    """Marconi's loader (``policy_exploration.load_request_trace``), skipping hybridbench's metadata line."""
    with path.open() as fh:
        lines = list(fh)
    return [obj for line in lines if METADATA_KEY not in (obj := json.loads(line))]


def replay(tree: Any, requests: Sequence[dict[str, Any]]) -> None:
    """``run_trace_with_config``'s loop; Marconi's progress prints (tuning rounds) are kept off stdout."""
    with contextlib.redirect_stdout(io.StringIO()):
        for r in requests:
            tree.match_prefix(r["input_tokens"])
            tree.insert(
                token_ids=r["input_tokens"] + r["output_tokens"],
                state_at_leaf=r["session_id"],
                state_at_branchoff=r["session_id"],
            )


def render(policy: str, requests: int, input_tokens: int, reused: int, alpha: str) -> str:
    """The lines of ``python -m reference_impl.replay``'s output that both sides have, in its layout."""
    rows = [("policy", policy), ("requests", str(requests)), ("input tokens", str(input_tokens)),
            ("token hit rate", f"{reused / input_tokens:.4%}")]
    if alpha:
        rows.append(("alpha", alpha))
    return "\n".join(f"{label:<24}{value}" for label, value in rows)


class _Parser(argparse.ArgumentParser):
    """hybridbench.errors.OneLineParser's rule (one line, exit 2), restated: Marconi's interpreter runs this script,
    without hybridbench to import."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    # Marconi's vLLM+ recurses once per 32-token block; its driver raises the limit to 1500 for 32K-token inputs.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1500))
    ap = _Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=file)
    ap.add_argument("--policy", required=True, choices=POLICIES)
    ap.add_argument("--capacity-bytes", required=True, type=positive)
    ap.add_argument("--marconi-dir", type=folder, default=os.environ.get("MARCONI_DIR"))
    args = ap.parse_args(argv)
    if args.marconi_dir is None:
        ap.error("set --marconi-dir or MARCONI_DIR")
    tree = marconi_tree(args.marconi_dir, args.policy, args.capacity_bytes)
    requests = load_request_trace(args.trace)
    replay(tree, requests)
    # request_history rows are (hit?, input length, reused length), one per match_prefix
    history = tree.request_history
    # α as ours prints it (``f"{v:g}"``): Marconi's grid holds 0 and 1.0 alike
    alpha = f"{float(tree.eff_weight):g}" if args.policy == "marconi" else ""
    print(render(args.policy, len(history), sum(x[1] for x in history), sum(x[2] for x in history), alpha))
    return 0


if __name__ == "__main__":
    sys.exit(main())

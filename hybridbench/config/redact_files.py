"""Secrets hidden in files the harness did not write itself: server logs (the server quotes its command line when
it refuses a flag) and Hydra's multirun.yaml (the sweep's overrides, verbatim). What hybridbench writes is
scrubbed before writing (config.redact.scrub_obj); these are rewritten after the fact, in place."""

from __future__ import annotations

import os
from pathlib import Path

from hybridbench.config.redact import scrub

__all__ = ["scrub_file", "scrub_tree"]

# Bounded: a multi-gigabyte server log is rewritten in pieces, never read whole.
_BLOCK = 1 << 20


def scrub_file(path: Path, secrets: frozenset[str]) -> None:
    if not secrets or not path.is_file():
        return
    longest = max(len(s) for s in secrets)
    tmp = path.with_name(f".{path.name}.scrub")
    try:
        with path.open("r", encoding="utf-8", errors="surrogateescape", newline="") as src, \
                tmp.open("w", encoding="utf-8", errors="surrogateescape", newline="") as dst:
            carry = ""
            while block := src.read(_BLOCK):
                text = scrub(carry + block, secrets)
                # Keep a tail that could hold the start of a secret split across two blocks.
                cut = max(len(text) - longest, 0)
                dst.write(text[:cut])
                carry = text[cut:]
            dst.write(scrub(carry, secrets))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def scrub_tree(root: Path, secrets: frozenset[str]) -> None:
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            scrub_file(path, secrets)

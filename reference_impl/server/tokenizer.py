"""A trivial built-in tokenizer: UTF-8 bytes are tokens 0-255; every other id prints as ``<id>``."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["decode", "encode", "token_bytes"]


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(ids: Sequence[int]) -> str:
    out: list[str] = []
    run = bytearray()
    for i in ids:
        if 0 <= i < 256:
            run.append(i)
            continue
        if run:
            out.append(run.decode("utf-8", errors="replace"))
            run.clear()
        out.append(f"<{i}>")
    if run:
        out.append(run.decode("utf-8", errors="replace"))
    return "".join(out)


def token_bytes(token: int) -> bytes | None:
    """A token's raw bytes: its byte for 0-255; None for the ``<id>`` tokens, which have no byte form (as a
    byte-level BPE tokenizer's special tokens)."""
    return bytes([token]) if 0 <= token < 256 else None

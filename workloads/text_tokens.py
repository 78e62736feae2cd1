"""Text -> token ids for the loaders that read text (ShareGPT JSON, agent trajectories).

Two tokenizers, chosen by the user:

* ``HFTokenizer`` wraps a ``transformers`` tokenizer (``--tokenizer NAME_OR_PATH``); ``transformers``
  is optional and imported only then;
* ``HashWordTokenizer`` (the default) needs nothing: each word or punctuation mark becomes one id,
  ``blake2b(piece) mod vocab_size``. Equal text gives equal ids, so prefix structure is exact; lengths
  are approximate (about 0.75 of a BPE tokenizer's count for English). The trace metadata names it.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from typing import Any, Protocol

from workloads.errors import WorkloadError, require

__all__ = ["HFTokenizer", "HashWordTokenizer", "Tokenizer", "make_tokenizer"]

_PIECE = re.compile(r"\w+|[^\w\s]")


class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...

    def encode(self, text: str) -> tuple[int, ...]: ...


class HashWordTokenizer:
    """Deterministic word-level ids below ``vocab_size``; no dependency, no download."""

    def __init__(self, vocab_size: int) -> None:
        require(vocab_size >= 1, f"vocab size must be >= 1, got {vocab_size}")
        self._vocab_size = vocab_size
        self._memo: dict[str, int] = {}

    @property
    def name(self) -> str:
        return "hash-words (approximate lengths)"

    def _id(self, piece: str) -> int:
        tok = self._memo.get(piece)
        if tok is None:
            digest = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            tok = int.from_bytes(digest, "little") % self._vocab_size
            self._memo[piece] = tok
        return tok

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(self._id(piece) for piece in _PIECE.findall(text))


class HFTokenizer:
    """A ``transformers`` tokenizer; ids at or above ``vocab_size`` are an error, not wrapped."""

    def __init__(self, name_or_path: str, vocab_size: int) -> None:
        try:
            transformers: Any = importlib.import_module("transformers")
        except ImportError:
            raise WorkloadError(
                f"--tokenizer {name_or_path} needs the optional 'transformers' package (pip install it)"
            ) from None
        try:
            self._tok: Any = transformers.AutoTokenizer.from_pretrained(name_or_path)
        except Exception as exc:  # transformers raises many types (OSError, ValueError, HF hub errors)
            raise WorkloadError(f"cannot load tokenizer {name_or_path!r}: {exc}") from None
        self._name = name_or_path
        self._vocab_size = vocab_size

    @property
    def name(self) -> str:
        return self._name

    def encode(self, text: str) -> tuple[int, ...]:
        ids = tuple(int(i) for i in self._tok.encode(text, add_special_tokens=False))
        if ids and max(ids) >= self._vocab_size:
            raise WorkloadError(f"tokenizer {self._name!r} produced id {max(ids)} >= --vocab-size {self._vocab_size}")
        return ids


def make_tokenizer(name_or_path: str | None, vocab_size: int) -> Tokenizer:
    return HFTokenizer(name_or_path, vocab_size) if name_or_path else HashWordTokenizer(vocab_size)

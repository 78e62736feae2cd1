"""The accuracy probe's question sets: which folders, and their shape (questions, prompt lengths) read at plan time.

evalscope reads a local folder's ``test.jsonl`` (and gsm8k's ``train.jsonl``, whose first four rows are the
examples every gsm8k prompt starts with: evalscope's 4-shot default, unshuffled). The plan reads the same files
once: a line evalscope could not use is refused here, naming file:line, before a server starts; and the forecast
(hybridbench/preview/accuracy_forecast.py) sizes each pass from the questions' count and lengths.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from hybridbench.config.schema import RunCfg
from hybridbench.errors import ConfigError

__all__ = ["CHARS_PER_TOKEN", "SHIPPED", "DatasetShape", "dataset_shapes", "resolve_datasets"]

_ROOT = Path(__file__).resolve().parents[2]  # the checkout: data/ lives beside the packages
SHIPPED = {"gsm8k": _ROOT / "data" / "accuracy" / "gsm8k-mini", "aime25": _ROOT / "data" / "accuracy" / "aime25-mini"}

# The field evalscope 1.14.1 reads each question from (its benchmarks/gsm8k/gsm8k_adapter.py and
# benchmarks/aime/aime_adapter.py), how many of train.jsonl's first rows it prepends as examples, and the characters
# its prompt template adds.
_QUESTION_FIELD = {"gsm8k": "question", "aime25": "problem"}
# gsm8k's adapter also splits every asked row's answer (record['answer'].split('####')): a row without one fails the
# pass; aime's takes answer or solution, either or none.
_ANSWER_FIELD = {"gsm8k": "answer"}
_SHOTS = {"gsm8k": 4, "aime25": 0}
_TEMPLATE_CHARS = {"gsm8k": 160, "aime25": 130}
# No tokenizer at plan time: English BPE runs ~4 characters a token, but Qwen's tokenizers write each digit as its
# own token and math text is digit-heavy, so 3 over-estimates a little; a pass's time is its decode's anyway.
CHARS_PER_TOKEN = 3.0


@dataclass(frozen=True, slots=True)
class DatasetShape:
    """One question set as a pass sends it: every prompt is ``shared_tokens`` of examples, then its question."""

    name: str
    folder: str
    questions: int  # asked in one pass (checks.accuracy_limit applied)
    shared_tokens: int  # the few-shot examples every prompt starts with (estimated)
    question_tokens: int  # the mean question with the template's words (estimated)


def resolve_datasets(cfg: RunCfg) -> dict[str, Path]:
    """checks.accuracy_datasets (name -> local folder with test.jsonl), or the shipped mini sets when empty."""
    given = cfg.checks.accuracy_datasets
    if not given:
        return dict(SHIPPED)
    out = {}
    for name, folder in given.items():
        if name not in SHIPPED:
            raise ConfigError(f"checks.accuracy_datasets.{name}: unknown dataset; choose from {', '.join(SHIPPED)}")
        path = Path(folder).expanduser().resolve()
        if not (path / "test.jsonl").is_file():
            raise ConfigError(f"checks.accuracy_datasets.{name}: {path}/test.jsonl does not exist "
                              f"(a folder in evalscope's local format: docs/guides/experiments/accuracy.md)")
        out[name] = path
    return out


def _texts(path: Path, field: str, limit: int | None) -> list[str]:
    """``field`` of each row up to ``limit``, in order; ConfigError naming file:line for a row evalscope could not
    read. evalscope 1.14.1 reads the whole file before its limit (``jsonl_to_list``: UTF-8 with or without a BOM,
    blank lines skipped, any other line a JSON object or the pass fails), so every line is checked."""
    out: list[str] = []
    try:
        with path.open(encoding="utf-8-sig") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise ConfigError(f"{path}:{number}: not a JSON line") from None
                if limit is not None and len(out) >= limit and isinstance(row, dict):
                    continue  # past the limit: read, not asked
                text = row.get(field) if isinstance(row, dict) else None
                if not isinstance(text, str) or not text.strip():
                    raise ConfigError(f"{path}:{number}: no {field!r} text (evalscope reads it from every row it asks)")
                out.append(text)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    return out


def _tokens(chars: float) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def dataset_shapes(cfg: RunCfg) -> tuple[DatasetShape, ...]:
    """Each question set's shape, read from its files; ConfigError (exit 2) for a file evalscope could not use."""
    limit = cfg.checks.accuracy_limit or None
    shapes = []
    for name, folder in sorted(resolve_datasets(cfg).items()):
        questions = _texts(folder / "test.jsonl", _QUESTION_FIELD[name], limit)
        if not questions:
            raise ConfigError(f"{folder / 'test.jsonl'}: no questions")
        if answer := _ANSWER_FIELD.get(name):
            _texts(folder / "test.jsonl", answer, limit)
        shared = 0
        if _SHOTS[name]:
            train = folder / "train.jsonl"
            if not train.is_file():
                raise ConfigError(f"checks.accuracy_datasets.{name}: {train} does not exist (evalscope takes its "
                                  f"{_SHOTS[name]} examples from it)")
            shots = _texts(train, "question", _SHOTS[name])
            answers = _texts(train, "answer", _SHOTS[name])
            if len(shots) < _SHOTS[name]:
                raise ConfigError(f"{train}: {len(shots)} rows; evalscope takes {_SHOTS[name]} examples from it")
            shared = _tokens(sum(len(q) + len(a) for q, a in zip(shots, answers, strict=True)))
        mean_chars = sum(len(q) for q in questions) / len(questions) + _TEMPLATE_CHARS[name]
        shapes.append(DatasetShape(name, str(folder), len(questions), shared, _tokens(mean_chars)))
    return tuple(shapes)

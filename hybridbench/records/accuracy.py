"""The accuracy probe's samples: one per question per pass, plus one summary row per pass.

A cache-on arm answers the question set twice after a flush: ``cold`` (hits only where questions share a
prefix, e.g. gsm8k's few-shot examples, and where the strategy keeps a state there) and ``warm`` (every
prompt again: whole-prompt hits). The cache-off arm answers once (``cold``). The ``accuracy`` check pairs
every pass with the cache-off arm's answers, question by question, from this file alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from hybridbench.records.typed import checked_fields

__all__ = ["ACCURACY_PASSES", "ACCURACY_SAMPLES", "AccuracySample", "Mode", "accuracy_sample_from_json"]

ACCURACY_SAMPLES = "accuracy.jsonl"  # the probe registry name + .jsonl (probes.base.samples_path)
Pass = Literal["cold", "warm"]
ACCURACY_PASSES: tuple[Pass, ...] = ("cold", "warm")
# exact: the engine decodes greedily and deterministically (the reference engine), so every answer text
# must be equal; paired: GPU kernels are not bitwise deterministic, so flips are judged statistically.
Mode = Literal["exact", "paired"]


@dataclass(frozen=True, slots=True)
class AccuracySample:
    trial_id: str
    arm: str
    workload: str
    repeat: int
    pass_: Pass
    mode: Mode
    dataset: str = ""  # "" on a pass's summary row
    index: int = -1  # the question's index in its dataset's test.jsonl; -1 on a summary row
    prediction: str = ""  # the model's whole answer
    extracted: str = ""  # the answer evalscope extracted from it
    target: str = ""
    correct: bool = False
    # summary row only: prompt tokens the server served from its cache during this pass (None: unmeasured)
    cached_tokens: int | None = None
    prompt_tokens: int | None = None
    error: str = ""  # non-empty on a summary row: the pass failed (evalscope's one line)
    wall_s: float | None = None  # summary row only: how long the pass took, evalscope's start to exit

    @property
    def question(self) -> str:
        return f"{self.dataset}/{self.index}"

    @property
    def summary(self) -> bool:
        return self.index < 0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass"] = out.pop("pass_")
        return out


_FIELDS = {f.name for f in fields(AccuracySample)}


def accuracy_sample_from_json(obj: dict[str, Any]) -> AccuracySample:
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
    data = {("pass_" if k == "pass" else k): v for k, v in obj.items()}
    return AccuracySample(**checked_fields(AccuracySample, data, _FIELDS))

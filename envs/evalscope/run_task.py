"""Run one evalscope task against a live server and write its per-question answers as JSONL.

Runs with the evalscope env's python (envs/evalscope/build.sh), never the harness's: it imports only
evalscope and the standard library. Input: a JSON file (argv[1]) with
``api_url, model, datasets {name: local_path}, limit, max_tokens, batch_size, work_dir, answers``.
Output: ``answers`` gets one line per question, ``{"dataset", "index", "prediction", "extracted",
"target", "correct"}``; evalscope's own predictions/, reviews/ and reports/ stay under ``work_dir``.
Offline: datasets load from local folders only (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE are forced on).
Exit 2 with one line on stderr for a bad config; 1 when evalscope fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# Before evalscope (and datasets/modelscope under it) is imported: nothing may reach a hub.
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "MODELSCOPE_OFFLINE"):
    os.environ[_var] = "1"

# gsm8k's default subset is "main"; a plain folder with test.jsonl is the "default" subset. gsm8k is
# 4-shot by default, its shots read from train.jsonl beside test.jsonl: every prompt then starts with
# the same examples, which is the shared prefix a prefix cache reuses.
SUBSETS = {"gsm8k": ["default"], "aime25": ["default"]}


def _fail(msg: str, code: int) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(code)


def _load_config(path: str) -> dict[str, Any]:
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        _fail(f"{path}: {exc}", 2)
    need = {"api_url", "model", "datasets", "max_tokens", "batch_size", "work_dir", "answers"}
    missing = sorted(need - set(cfg))
    if missing:
        _fail(f"{path}: missing key(s) {', '.join(missing)}", 2)
    for name, folder in cfg["datasets"].items():
        if name not in SUBSETS:
            _fail(f"{path}: dataset {name!r} is not one of {', '.join(SUBSETS)}", 2)
        if not (Path(folder) / "test.jsonl").is_file():
            _fail(f"{path}: dataset {name}: {folder}/test.jsonl does not exist", 2)
    return dict(cfg)


def _answers(work_dir: Path, dataset: str) -> list[dict[str, Any]]:
    rows = []
    # reviews/<model>/<dataset>_<subset>.jsonl; a model name with a "/" nests one level deeper
    for review in sorted((work_dir / "reviews").rglob(f"{dataset}_*.jsonl")):
        for line in review.read_text().splitlines():
            r = json.loads(line)
            score = r["sample_score"]["score"]
            value = score.get("value") or {}
            main = score.get("main_score_name") or "accuracy"
            rows.append({
                "dataset": dataset,
                "index": int(r["index"]),
                "prediction": score.get("prediction") or "",
                "extracted": score.get("extracted_prediction") or "",
                "target": r.get("target"),
                "correct": float(value.get(main, 0.0)) >= 1.0,
            })
    return sorted(rows, key=lambda row: row["index"])


def main() -> None:
    if len(sys.argv) != 2:
        _fail("usage: run_task.py CONFIG.json", 2)
    cfg = _load_config(sys.argv[1])
    from evalscope import TaskConfig, run_task  # noqa: PLC0415 - seconds to import: a bad config fails first
    from evalscope.constants import EvalType  # noqa: PLC0415

    work_dir = Path(cfg["work_dir"])
    names = sorted(cfg["datasets"])
    dataset_args: dict[str, Any] = {
        name: {"local_path": cfg["datasets"][name], "subset_list": SUBSETS[name]} for name in names
    }
    task = TaskConfig(
        # The server's key (its --api-key) comes by the environment, so that no file holds it
        model=cfg["model"], api_url=cfg["api_url"], api_key=os.environ.get("HYBRIDBENCH_SERVER_API_KEY") or "EMPTY",
        eval_type=EvalType.OPENAI_API, datasets=names, dataset_args=dataset_args,
        generation_config={"max_tokens": int(cfg["max_tokens"]), "temperature": 0.0},
        eval_batch_size=int(cfg["batch_size"]), limit=cfg.get("limit"), work_dir=str(work_dir), no_timestamp=True,
    )
    try:
        run_task(task_cfg=task)
    except Exception as exc:  # evalscope's own failure: report it in one line, keep what it wrote
        _fail(f"evalscope failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", 1)
    rows = [row for name in names for row in _answers(work_dir, name)]
    if not rows:
        _fail(f"evalscope wrote no reviews under {work_dir}/reviews", 1)
    tmp = Path(f"{cfg['answers']}.tmp.{os.getpid()}")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(cfg["answers"])


if __name__ == "__main__":
    main()

"""The ``accuracy`` probe: evalscope answers a question set against the live server, cache off and cache on.

After an arm's last trial, evalscope (its own virtualenv, envs/evalscope/build.sh; run as a subprocess,
offline, datasets from local folders only) asks every question over the server's OpenAI chat API at
temperature 0. A cache-on arm answers twice after a flush, ``cold`` then ``warm`` (the second pass hits
whole prompts, the only hits a ``no_buffer`` arm can get); the cache-off arm once. Every answer is one
sample in accuracy.jsonl, and each pass adds a summary row with the prompt tokens the server served from
its cache meanwhile (its /metrics counters). evalscope's own predictions, reviews and reports are kept
under ``accuracy/<arm>/<pass>/`` in the run dir. ``checks/accuracy.py`` judges the samples.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.server_logs import scrape_counters
from hybridbench.errors import ConfigError, EngineError
from hybridbench.probes.accuracy_data import dataset_shapes, resolve_datasets
from hybridbench.probes.base import ProbeContext, ProbeNeeds
from hybridbench.records.accuracy import AccuracySample, Mode, accuracy_sample_from_json

__all__ = ["EVALSCOPE_ENV_HINT", "Accuracy", "default_python", "evalscope_script"]

_ROOT = Path(__file__).resolve().parents[2]  # the checkout: envs/ and data/ live beside the packages
EVALSCOPE_ENV_HINT = "build it with: bash envs/evalscope/build.sh"
API_KEY_ENV = "HYBRIDBENCH_SERVER_API_KEY"  # run_task.py reads the server's key from here


def default_python() -> Path:
    return Path.home() / ".cache" / "hybridbench" / "evalscope-1.14.1" / "bin" / "python"


def evalscope_script() -> Path:
    return _ROOT / "envs" / "evalscope" / "run_task.py"


def _python(cfg: RunCfg) -> Path:
    return Path(cfg.checks.accuracy_python).expanduser() if cfg.checks.accuracy_python else default_python()


def _flush(ctx: ProbeContext) -> None:
    req = ctx.auth.request(ctx.base_url, ctx.flush_path, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise EngineError(f"flush before the accuracy probe failed: {exc}") from None


def _mode(setting: str, bitwise: bool) -> Mode:
    if setting == "exact":
        return "exact"
    if setting == "paired":
        return "paired"
    return "exact" if bitwise else "paired"


def _last_trial_of_arm(ctx: ProbeContext) -> bool:
    """Trials run repeat by repeat, each arm's workloads together: an arm's last is its last repeat's last."""
    return ctx.trial.repeat == ctx.cfg.repeats - 1 and ctx.trial.workload == list(ctx.cfg.workloads)[-1]


class Accuracy:
    name = "accuracy"
    snapshot_key = "accuracy_probe"
    # Every server this harness launches answers /v1/chat/completions next to its OpenAI completions API.
    needs = ProbeNeeds(protocols=frozenset({"openai"}))

    def wanted(self, cfg: RunCfg) -> str:
        if "accuracy" not in cfg.checks.enabled:
            return ""
        if cfg.checks.accuracy_mode not in ("auto", "exact", "paired"):
            raise ConfigError(f"checks.accuracy_mode must be auto, exact or paired, got {cfg.checks.accuracy_mode!r}")
        dataset_shapes(cfg)  # plan time: a bad folder or question line is exit 2 before any server starts
        python = _python(cfg)
        if not python.is_file():
            raise ConfigError(f"checks.accuracy_python: {python} does not exist; {EVALSCOPE_ENV_HINT}")
        return "checks.enabled has accuracy"

    def sample_from_json(self, obj: dict[str, Any]) -> AccuracySample:
        return accuracy_sample_from_json(obj)

    def run(self, ctx: ProbeContext) -> str:
        if not _last_trial_of_arm(ctx):
            return "runs after the arm's last trial"
        mode = _mode(ctx.cfg.checks.accuracy_mode, ctx.traits.bitwise_reproducible)
        passes = ("cold", "warm") if ctx.arm.cache_on else ("cold",)
        if ctx.flush_path:
            _flush(ctx)
        done = []
        for pass_ in passes:
            done.append(self._pass(ctx, pass_, mode))
        return "; ".join(done)

    def _pass(self, ctx: ProbeContext, pass_: str, mode: Mode) -> str:
        c = ctx.cfg.checks
        work = ctx.run_dir / "accuracy" / ctx.trial.arm / pass_
        work.mkdir(parents=True, exist_ok=True)
        answers = work / "answers.jsonl"
        task = {"api_url": ctx.base_url + "/v1", "model": ctx.cfg.model.hf_id,
                "datasets": {k: str(v) for k, v in resolve_datasets(ctx.cfg).items()},
                "max_tokens": c.accuracy_max_tokens, "batch_size": c.accuracy_batch_size,
                "limit": c.accuracy_limit or None, "work_dir": str(work / "evalscope"), "answers": str(answers)}
        (work / "task.json").write_text(json.dumps(task, indent=1))
        ident: dict[str, Any] = {**ctx.identity, "pass_": pass_, "mode": mode}
        before = scrape_counters(ctx.base_url, ctx.auth)
        started = time.monotonic()
        try:
            # The server's key goes by the environment, never into task.json (evalscope masks it in what it writes)
            key = ctx.auth.bearer("/v1/chat/completions")
            proc = subprocess.run([str(_python(ctx.cfg)), str(evalscope_script()), str(work / "task.json")],
                                  capture_output=True, text=True, timeout=c.accuracy_timeout_s, check=False,
                                  env={**os.environ, API_KEY_ENV: key} if key else None)
        except subprocess.TimeoutExpired:
            proc = None
        wall_s = time.monotonic() - started  # beside the forecast's bound for the pass (report: forecast vs measured)
        (work / "evalscope.log").write_text("" if proc is None else proc.stdout + proc.stderr)
        after = scrape_counters(ctx.base_url, ctx.auth)
        if proc is None or proc.returncode != 0 or not answers.is_file():
            lines = [] if proc is None else [ln for ln in proc.stderr.splitlines() if ln.strip()]
            why = (f"evalscope timed out after {c.accuracy_timeout_s:g} s" if proc is None else
                   lines[-1] if lines else f"evalscope exited {proc.returncode}")
            ctx.emit(AccuracySample(**ident, error=why, wall_s=wall_s))
            return f"{pass_}: failed ({why})"
        rows = [json.loads(line) for line in answers.read_text().splitlines() if line.strip()]
        for r in rows:
            ctx.emit(AccuracySample(**ident, dataset=r["dataset"], index=int(r["index"]),
                                    prediction=str(r["prediction"]), extracted=str(r["extracted"]),
                                    target=json.dumps(r["target"]), correct=bool(r["correct"])))
        delta = after.since(before) if before is not None and after is not None else None
        ctx.emit(AccuracySample(**ident, cached_tokens=None if delta is None else int(delta.cached_tokens),
                                prompt_tokens=None if delta is None else int(delta.prompt_tokens), wall_s=wall_s))
        correct = sum(bool(r["correct"]) for r in rows)
        hits = "" if delta is None else f", {int(delta.cached_tokens)} cached prompt tokens"
        return f"{pass_}: {correct}/{len(rows)} correct{hits}"

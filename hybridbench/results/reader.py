"""Read a run directory back into ``hybridbench.results.types``: ``read_run(path)``.

Every file is checked as it is read: a missing or malformed file, a wrong type under a key, or a schema
version newer than this hybridbench's is a ConfigError (exit 2) naming the file (and line, for JSONL) —
one line, never a traceback. Bundles written before a key existed (``published``, ``infrastructure_error``,
``client_delay_flagged`` in summaries) read with that key empty.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hybridbench.checks.base import CheckResult
from hybridbench.errors import ConfigError
from hybridbench.records.accuracy import ACCURACY_SAMPLES, accuracy_sample_from_json
from hybridbench.records.coverage import TRIAL_STATES
from hybridbench.records.exact_hits import EXACT_HITS_SAMPLES, exact_hit_sample_from_json
from hybridbench.records.kl import KlSample, kl_sample_from_json
from hybridbench.records.schema import SAMPLES_WRITTEN, Record, record_from_json
from hybridbench.results.safe_io import (
    MAX_LINES_BYTES,
    normalise_time,
    open_regular,
    read_json_bounded,
    read_lines_bounded,
)
from hybridbench.results.trace_digest import METADATA_LINE, recorded_digest
from hybridbench.results.types import (
    Bundle,
    EngineBuildInfo,
    IndexEntry,
    PlannedTrial,
    PlannedWorkload,
    Provenance,
    Run,
    SavedPlan,
    TrialResult,
    TrialRun,
)
from hybridbench.results.versions import check_version

__all__ = ["KL_SAMPLES", "read_bundle", "read_index", "read_json_object", "read_kl_samples", "read_plan",
           "read_records", "read_run"]

KL_SAMPLES = "kl.jsonl"


class _Fields:
    """Typed access to one JSON object, each failure naming the file and the key."""

    def __init__(self, where: str, obj: object, kind: str) -> None:
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: not {kind} (expected a JSON object, got {type(obj).__name__})")
        self.where, self.obj, self.kind = where, obj, kind

    def _get(self, key: str, kinds: tuple[type, ...], default: Any) -> Any:
        if key not in self.obj:
            if default is _REQUIRED:
                raise ConfigError(f"{self.where}: not {self.kind} (missing key {key!r})")
            return default
        value = self.obj[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(f"{self.where}: not {self.kind} ({key} must be {names}, got {type(value).__name__})")
        return value

    def text(self, key: str, default: Any = None) -> str:
        return str(self._get(key, (str,), _REQUIRED if default is None else default))

    def integer(self, key: str, default: int | None = None) -> int:
        return int(self._get(key, (int,), _REQUIRED if default is None else default))

    def optional_integer(self, key: str) -> int | None:
        value = self._get(key, (int, type(None)), None)
        return None if value is None else int(value)

    def flag(self, key: str, default: bool) -> bool:
        return bool(self._get(key, (bool,), default))

    def array(self, key: str, default: Any = None) -> list[Any]:
        return list(self._get(key, (list,), _REQUIRED if default is None else default))

    def mapping(self, key: str, default: Any = None) -> dict[str, Any]:
        return dict(self._get(key, (dict,), _REQUIRED if default is None else default))

    def at(self, key: str, index: int | None = None) -> str:
        return f"{self.where}: {key}" + (f"[{index}]" if index is not None else "")

    def sub(self, key: str, index: int | None, obj: object) -> _Fields:
        return _Fields(self.at(key, index), obj, self.kind)


_REQUIRED = object()


def read_json_object(path: Path) -> dict[str, Any]:
    """A bounded read (``safe_io``): a regular file inside its directory, bounded in size and depth."""
    data = read_json_bounded(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def _jsonl(path: Path, what: str) -> Iterator[tuple[str, Any]]:
    return read_lines_bounded(path, what)


def read_plan(path: Path) -> SavedPlan:
    f = _Fields(str(path), read_json_object(path), "a hybridbench plan")
    version = check_version(path, "plan", f.obj.get("schema_version"))
    workloads = []
    for i, w in enumerate(f.array("workloads")):
        wf = f.sub("workloads", i, w)
        workloads.append(PlannedWorkload(wf.text("name"), wf.text("kind", ""), wf.integer("seed", 0),
                                         wf.text("trace_path", ""), tuple(str(a) for a in wf.array("argv", [])),
                                         recorded_digest(wf.text("trace_sha256", ""), wf.where)))
    trials: list[PlannedTrial] = []
    seen: dict[tuple[str, str, int], str] = {}
    for i, t in enumerate(f.array("trials")):
        tf = f.sub("trials", i, t)
        trial = PlannedTrial(tf.integer("index"), tf.text("arm"), tf.text("workload"), tf.integer("repeat"),
                             tf.integer("seed", 0))
        # A plan lists each (workload, arm, repeat) once: listed twice, one trial's records counted as two
        # repeats, and a one-repeat comparison decided on a zero-width interval.
        if (first := seen.setdefault((trial.workload, trial.arm, trial.repeat), trial.trial_id)) != trial.trial_id \
                or any(p.trial_id == trial.trial_id for p in trials):
            raise ConfigError(f"{tf.where}: trial {trial.trial_id} repeats {first} (workload {trial.workload}, arm "
                              f"{trial.arm}, repeat {trial.repeat}): a plan lists each trial once")
        trials.append(trial)
    arms = tuple(str(a) for a in f.array("arms"))
    return SavedPlan(version, f.text("name", path.parent.name), f.text("engine"), arms,
                     f.text("baseline_arm", arms[0] if arms else ""), tuple(workloads), tuple(trials),
                     f.mapping("config", {}), f.text("fingerprint", ""))


def _check(f: _Fields) -> CheckResult:
    where = f.where
    status = f.text("status")
    if status not in ("pass", "fail", "skip", "inconclusive"):
        raise ConfigError(f"{where}: status {status!r} is not pass, fail, skip or inconclusive")
    observed = f.obj.get("observed")
    if observed is not None and (not isinstance(observed, (int, float)) or isinstance(observed, bool)):
        raise ConfigError(f"{where}: observed must be a number or null")
    numbers: dict[str, float | None] = {}
    for key in ("estimate", "low", "high", "limit", "mde"):  # an interval judgement's (absent in older bundles)
        v = f.obj.get(key)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
            raise ConfigError(f"{where}: {key} must be a number or null")
        numbers[key] = None if v is None else float(v)
    needed = f.obj.get("repeats_needed")
    if needed is not None and (not isinstance(needed, int) or isinstance(needed, bool)):
        raise ConfigError(f"{where}: repeats_needed must be an integer or null")
    return CheckResult(f.text("check"), f.text("workload"), f.text("arm"), status,  # type: ignore[arg-type]
                       None if observed is None else float(observed), f.text("expected", ""), f.text("detail", ""),
                       **numbers, repeats_needed=needed)


def _provenance(f: _Fields) -> Provenance:
    e = f.sub("engine", None, f.obj.get("engine", {}))
    engine = EngineBuildInfo(e.text("name", ""), str(e.obj.get("version") or ""),
                             tuple(str(a) for a in e.array("command", [])), e.mapping("extra", {}))
    pr = f.obj.get("pr_number")
    host = f.mapping("machine", {})
    model, cores = host.get("cpu"), host.get("cores")
    # Both or nothing: a model without its core count (or the reverse) does not say the same machine
    cpu = (f"{model}, {cores} cores" if isinstance(model, str) and model and isinstance(cores, int)
           and not isinstance(cores, bool) else "")
    return Provenance(f.text("git_sha", ""), f.flag("git_dirty", False), None if pr in (None, "") else str(pr),
                      f.text("hybridbench_version", ""), engine, f.text("plan_fingerprint", ""),
                      f.mapping("config", {}), f.text("command", ""), cpu)


def _run_id(raw: Mapping[str, Any]) -> str:
    """The id the harness wrote at the run's end; a bundle from before that gets one from its first content
    (``rescored`` and what a re-scoring rewrites left out): a copied run keeps it, so it is counted once."""
    own = raw.get("run_id")
    if isinstance(own, str) and own:
        return own
    got = raw.get("provenance")
    prov: Mapping[str, Any] = got if isinstance(got, dict) else {}
    first = {**{k: raw.get(k) for k in ("name", "run_dir", "created", "arms")},
             **{k: prov.get(k) for k in ("git_sha", "plan_fingerprint", "engine", "host")}}
    return "c" + hashlib.sha256(json.dumps(first, sort_keys=True, default=str).encode()).hexdigest()[:31]


def _snapshot(tf: _Fields) -> dict[str, Any]:
    """A trial's server snapshot, its keys that checks count typed: ``"crashes": null`` crashed rescore, and a
    ``server_failures`` that was a string, not a list, was not read at all (survival passed)."""
    sf = tf.sub("server", None, tf.mapping("server", {}))
    if sf.integer("crashes", 0) < 0:
        raise ConfigError(f"{sf.where}: not {sf.kind} (crashes must be >= 0, got {sf.obj['crashes']})")
    for key in ("log_cached_tokens", "log_prefill_batches"):
        sf.optional_integer(key)
    if sf.obj.get("infrastructure_error") is not None:
        sf.text("infrastructure_error")
    failures = sf.obj.get("server_failures", [])
    if not isinstance(failures, list) or not all(isinstance(x, str) for x in failures):
        raise ConfigError(f"{sf.where}: not {sf.kind} (server_failures must be a list of strings, got "
                          f"{type(failures).__name__})")
    return sf.obj


def read_bundle(path: Path) -> Bundle:
    raw = read_json_object(path)
    f = _Fields(str(path), raw, "a hybridbench bundle")
    version = check_version(path, "bundle", raw.get("schema_version"))
    trials: list[TrialResult] = []
    for i, t in enumerate(f.array("trials")):
        tf = f.sub("trials", i, t)
        server = _snapshot(tf)
        state = tf.text("state", "engine died" if server.get("infrastructure_error") else "ran")
        if state not in TRIAL_STATES:
            raise ConfigError(f"{tf.where}: state {state!r} is not one of {', '.join(TRIAL_STATES)}")
        trial_id = tf.text("trial_id")
        # Listed twice (a merged or hand-edited bundle), a re-scoring took the trial's state from one entry and its
        # server from the other, and compare read the first: a crashed trial could pass beside its clean twin.
        if any(r.trial_id == trial_id for r in trials):
            raise ConfigError(f"{tf.where}: trial {trial_id!r} is listed twice: a bundle lists each trial once")
        trials.append(TrialResult(trial_id, tf.text("arm"), tf.text("workload"), tf.integer("repeat"),
                                  tf.mapping("summary", {}), server, state, tf.optional_integer("planned_requests"),
                                  tf.optional_integer("recorded_requests"), tf.optional_integer("duplicated_records"),
                                  tf.text("detail", "")))
    aggregates: dict[str, dict[str, Mapping[str, Any]]] = {}
    for workload, by_arm in f.mapping("aggregates", {}).items():
        af = f.sub(f"aggregates.{workload}", None, by_arm)
        aggregates[workload] = {arm: af.mapping(arm) for arm in af.obj}
    checks = tuple(_check(f.sub("checks", i, c)) for i, c in enumerate(f.array("checks", [])))
    published = tuple(f.sub("published", i, p).obj for i, p in enumerate(f.array("published", [])))
    rescored = raw.get("rescored")
    return Bundle(
        schema_version=version,
        name=f.text("name", path.parent.name),
        created=normalise_time(f.text("created", ""), str(path)),
        modelled=f.flag("modelled", False),
        arms=tuple(str(a) for a in f.array("arms", [])),
        baseline_arm=f.text("baseline_arm", ""),
        trials=tuple(trials),
        aggregates=aggregates,
        checks=checks,
        verdict=f.text("verdict", ""),
        provenance=_provenance(f.sub("provenance", None, raw.get("provenance", {}))),
        infrastructure_error=f.text("infrastructure_error", ""),
        published=published,
        rescored=rescored if isinstance(rescored, dict) else None,
        run_id=_run_id(raw),
        raw=raw,
    )


def read_records(path: Path, plan: SavedPlan | None = None) -> Iterator[Record]:
    """The records of ``path``; with ``plan``, each must be of that run and one of its trials as planned (records
    copied in from another run were scored as this run's, on its model and GPUs)."""
    planned = {t.trial_id: t for t in plan.trials} if plan is not None else {}
    for where, obj in _jsonl(path, "records"):
        if isinstance(obj, dict):
            check_version(where, "record", obj.get("schema_version"))
        try:
            rec = record_from_json(obj)
        except TypeError as exc:
            raise ConfigError(f"{where}: not a record ({exc})") from None
        if plan is not None:
            if plan.fingerprint and rec.run_id != plan.fingerprint:  # a hand-made plan may have none
                raise ConfigError(f"{where}: a record of another run (run_id {rec.run_id!r}; this run's plan.json "
                                  f"fingerprint is {plan.fingerprint!r}); not read")
            t = planned.get(rec.trial_id)
            if t is None or (rec.arm, rec.workload, rec.repeat) != (t.arm, t.workload, t.repeat):
                raise ConfigError(f"{where}: trial {rec.trial_id!r} ({rec.arm}, {rec.workload}, repeat {rec.repeat}) "
                                  "is not a trial of this run's plan.json; not read")
        yield rec


def read_kl_samples(path: Path) -> Iterator[KlSample]:
    """The kl probe's samples; a run without the probe has no file and yields nothing."""
    if not path.exists():
        return
    for where, obj in _jsonl(path, "a KL sample"):
        try:
            yield kl_sample_from_json(obj)
        except TypeError as exc:
            raise ConfigError(f"{where}: not a KL sample ({exc})") from None


# Probe name -> its samples file and parser (the kl probe's are read_kl_samples' above).
_PROBE_SAMPLES: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    "exact_hits": (EXACT_HITS_SAMPLES, exact_hit_sample_from_json),
    "accuracy": (ACCURACY_SAMPLES, accuracy_sample_from_json),
}


def read_probe_samples(path: Path) -> dict[str, tuple[Any, ...]]:
    """The saved samples of every probe that ran in the run at ``path`` (a probe that did not run: absent)."""
    out: dict[str, tuple[Any, ...]] = {}
    for name, (file, parse) in _PROBE_SAMPLES.items():
        if not (path / file).exists():
            continue
        samples = []
        for where, obj in _jsonl(path / file, f"a {name} sample"):
            try:
                samples.append(parse(obj))
            except TypeError as exc:
                raise ConfigError(f"{where}: not a {name} sample ({exc})") from None
        out[name] = tuple(samples)
    return out




def _trace_rows(trace: Path) -> int | None:
    """How many requests the workload's trace holds (one per non-blank line but its metadata line), when the run
    still has it."""
    if not trace.exists():
        return None
    try:
        with open_regular(trace, trace.parent.parent, limit=MAX_LINES_BYTES) as fh:
            # the generator's first line is its metadata, not a request: counted, it made a whole trial "lose" one
            return sum(1 for line in fh if line.strip() and not line.lstrip().startswith(METADATA_LINE))
    except (ConfigError, OSError):
        return None


def read_run(path: Path) -> Run:
    """The run in ``path``: plan.json and records.jsonl must be there; bundle.json and probe samples may not."""
    if not path.is_dir():
        raise ConfigError(f"{path}: not a run directory")
    plan = read_plan(path / "plan.json")
    bundle_path = path / "bundle.json"
    bundle = read_bundle(bundle_path) if bundle_path.exists() else None
    # Every bundle names the plan it scored: another run's (a killed run synced over an earlier one) is not this one's.
    scored = bundle.provenance.plan_fingerprint if bundle is not None else ""
    if plan.fingerprint and scored not in ("", plan.fingerprint):
        raise ConfigError(f"{bundle_path}: another run's bundle (plan_fingerprint {scored!r}; plan.json's fingerprint "
                          f"is {plan.fingerprint!r}); not read")
    by_trial: dict[str, list[Record]] = {}
    for rec in read_records(path / "records.jsonl", plan):
        by_trial.setdefault(rec.trial_id, []).append(rec)
    rows = {w.name: _trace_rows(path / "traces" / Path(w.trace_path or f"{w.name}.jsonl").name)
            for w in plan.workloads}
    trials = []
    for t in plan.trials:
        result = bundle.trial(t.trial_id) if bundle is not None else None
        recs = by_trial.get(t.trial_id, [])
        state = result.state if result is not None else "ran"
        # A trial that ran left records, a recorded failure or a state saying it was cut short; one with
        # none of these counts as missing.
        if recs or (result is not None and result.infrastructure_error) or state not in ("ran", "not run"):
            planned = result.planned_requests if result is not None else None
            traced = rows.get(t.workload)
            if planned is not None and traced is not None and planned < traced:
                # the harness counts the trace it sent: a smaller count hid the requests a trial lost
                raise ConfigError(f"{bundle_path}: trial {t.trial_id}: planned_requests {planned}, but its workload's "
                                  f"trace holds {traced} requests; not read")
            # A larger count is the trace's rows plus its metadata line, as rescore wrote it for a while (fb25310 to
            # 2dd5731): the trace decides.
            trials.append(TrialRun(t, tuple(recs), result, traced if traced is not None else planned))
    kl_samples, probe_samples = tuple(read_kl_samples(path / KL_SAMPLES)), read_probe_samples(path)
    if bundle is not None:
        known = {"kl": kl_samples, **{name: probe_samples.get(name, ()) for name in _PROBE_SAMPLES}}
        _check_samples_whole(path, bundle, known)
    return Run(path, plan, bundle, tuple(trials), kl_samples, probe_samples)


def _check_samples_whole(path: Path, bundle: Bundle, samples: Mapping[str, Sequence[Any]]) -> None:
    """Every trial's probe samples, as many as the bundle says the probe wrote: a samples file cut short or lost
    would otherwise leave its check without samples (a skip) and the run a pass."""
    held: dict[tuple[str, str], int] = {}
    for name, rows in samples.items():
        for s in rows:
            held[(name, s.trial_id)] = held.get((name, s.trial_id), 0) + 1
    for t in bundle.trials:
        written = t.server.get(SAMPLES_WRITTEN)
        for name, n in (written.items() if isinstance(written, dict) else ()):
            have = held.get((name, t.trial_id), 0)
            if name in samples and isinstance(n, int) and have != n:  # a probe this reader has no parser for: unread
                raise ConfigError(f"{path / f'{name}.jsonl'}: holds {have} of the {n} {name} sample(s) trial "
                                  f"{t.trial_id} wrote (bundle.json {SAMPLES_WRITTEN}): the file lost lines or gained "
                                  "some")


def read_index(path: Path) -> tuple[IndexEntry, ...]:
    """index.jsonl's lines in the order they were written (a run replaced with overwrite=true, or re-scored,
    appears again: its last line is the current one)."""
    out = []
    for where, obj in _jsonl(path, "an index line"):
        f = _Fields(where, obj, "an index line")
        pr = f.obj.get("pr_number")
        out.append(IndexEntry(
            Path(f.text("run_dir")), str(f.obj.get("name") or ""), str(f.obj.get("created") or ""),
            str(f.obj.get("verdict") or ""), f.obj.get("modelled") is True,
            tuple(str(a) for a in f.obj.get("arms") or ()), str(f.obj.get("engine") or ""),
            str(f.obj.get("engine_version") or ""), str(f.obj.get("git_sha") or ""),
            None if pr in (None, "") else str(pr), str(f.obj.get("plan_fingerprint") or ""),
            tuple(str(c) for c in f.array("failed_checks", [])), str(f.obj.get("rescored") or ""),
        ))
    return tuple(out)

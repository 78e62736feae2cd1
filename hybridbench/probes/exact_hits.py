"""Sequential mode: what the reference cache says every request's ``cached_tokens`` must be.

With one request in flight at a time after a flush, a prefix cache's hits are a pure function of the
requests before (their prompts *and* the tokens the server generated) and of a handful of settings:
strategy, eviction policy, page size, chunk size, track interval, pool sizes. reference_impl is an
exact model of SGLang's cache for those, so in this mode each record carries the reference's
prediction and the ``cache_hits`` check demands equality (docs/reference/checks.md): a real server that caches
less (or more) than SGLang's semantics say shows up request by request, not as a blurred hit rate.

The settings come from the running server's own ``/server_info`` (SGLang's server args plus
``max_total_num_tokens``), the cache semantics from the ``version`` it reports (``semantics_for``: the
releases ``reference_impl.radix.tree.SGLANG_SEMANTICS`` reproduces), the strategy and policy from the
arm. Arms the reference cannot mirror request by request — a host tier (its write-back timing is
asynchronous) or a policy only a real build has — get no prediction, and the check says so.

As a probe (``exact_hits``) it runs after the trial, replaying what the server saw (prompts sent, tokens
it generated, in completion order — with one request in flight, the order it served them) and writes one
sample per predicted request to exact_hits.jsonl; the ``cache_hits`` check compares them with the records.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.probes.base import ProbeContext, ProbeNeeds
from hybridbench.records.exact_hits import ExactHitSample, exact_hit_sample_from_json
from reference_impl.engine.arms import NOT_ON_REFERENCE, ArmSpec
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import Batch, EngineCore
from reference_impl.engine.simulator import simulate
from reference_impl.models import MODELS
from reference_impl.radix.tree import SGLANG_SEMANTICS
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.trace import TraceRow

__all__ = ["SEMANTICS_BY_RELEASE", "CachePredictor", "ExactHits", "predictor_config", "semantics_for"]

_SEQUENTIAL = LoadSpec("closed", max_concurrency=1)
# Without a reported pool size (SGLang derives it from GPU memory), a sequential load that fits in memory
# never evicts: a pool this large makes the prediction assume exactly that.
_UNBOUNDED = 1 << 30


class _NoTime:
    """Order is all a sequential prediction needs: every step takes no time."""

    def batch_seconds(self, batch: Batch) -> float:
        return 0.0

    def frontend_seconds(self, prompt_tokens: int) -> float:
        return 0.0

    def host_transfer_seconds(self, tokens: int, states: int) -> float:
        return 0.0


def _int(info: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = info.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


# Every SGLang release from the oldest proven one on -> the proven semantics whose mirrored code it equals (None:
# its code differs from every proven release's). Written from the output of benchmarks/sglang_semantics_by_release.py
# (kept in benchmarks/sglang_semantics_by_release.txt): each release in between changed the cache's own code
# (match/insert/lock, caching a request, the scheduler's tracking), so none is predicted. A new release gets a row
# when that script has been run on it.
SEMANTICS_BY_RELEASE: dict[str, str | None] = {
    "0.5.9": "0.5.9",
    "0.5.10": None, "0.5.10.post1": None, "0.5.11": None, "0.5.12": None, "0.5.12.post1": None, "0.5.13": None,
    "0.5.13.post1": None, "0.5.14": None, "0.5.15": None, "0.5.15.post1": None,
    "0.5.16": "0.5.16",
    "0.5.17": None, "0.5.18": None, "0.5.19": None, "0.5.20": None, "0.5.21": None, "0.5.22": None,
    "0.5.23": "0.5.23",
}
# release[.postN][{a|b|rc}N][.devN][+local]: "0.5.16", "0.5.23.post1.dev12+gabc", "0.5.24rc1", "v0.6.0"
_PEP440 = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?((?:a|b|rc)\d+)?(?:\.dev\d+)?(?:\+[\w.]*)?$")


def _order(text: str) -> tuple[tuple[int, int, int, int], bool] | None:
    """(release, post) of a version and whether it is a build before that (dev or pre-release)."""
    match = _PEP440.match(text)
    if match is None:
        return None
    major, minor, patch, post = (int(g or 0) for g in match.groups()[:4])
    return (major, minor, patch, post), bool(match.group(5)) or ".dev" in text


def _release_key(release: str) -> tuple[int, int, int, int]:
    parsed = _order(release)
    assert parsed is not None and not parsed[1], release  # the table lists final releases only
    return parsed[0]


_LISTED = sorted((_release_key(r), sem) for r, sem in SEMANTICS_BY_RELEASE.items())


def semantics_for(version: object) -> str | None:
    """Which proven SGLang cache semantics mirror a server reporting ``version`` (None: none proven).

    Up to the newest listed release, only a listed release itself (a ``+local`` suffix aside) gets
    ``SEMANTICS_BY_RELEASE``'s answer: a pre-release, a dev build or an unlisted post release there (0.5.10rc0,
    0.5.17.dev3, 0.5.16.post1) was never compared, so it gets no prediction, as a listed release whose mirrored code
    differs from every proven one does. Past the newest listed release everything keeps the newest's semantics,
    dev/PR builds on it above all (0.5.23.post1.dev12+gabc or, by SGLang's default version scheme,
    0.5.24.dev12+gabc): a cache change under test must show as a divergence, request by request. A new release's
    code is not known yet, but most of it is usually the newest's, and "no prediction" would switch the exact check
    off for every user of it until it is proven (benchmarks/sglang_semantics_by_release.py then gives it a row). The
    reference server (``reference-*``) implements the newest.
    """
    text = str(version or "")
    if text.startswith("reference"):
        return SGLANG_SEMANTICS[-1]
    parsed = _order(text)
    if parsed is None:
        return None
    key, before = parsed
    newest, newest_semantics = _LISTED[-1]
    if key > newest:
        return newest_semantics
    return None if before else dict(_LISTED).get(key)


def served_chunk(cfg: RunCfg) -> int:
    """The served model's mamba cache chunk (/server_info does not report it): the model's, on a real server; 64 on
    the reference server, whose tiny model's tree uses 64 whatever model the run names for its figures."""
    known = MODELS.get(cfg.model.name)
    return known.mamba_chunk_size if known is not None and cfg.engine.name != "reference" else 64


def predictor_config(spec: ArmSpec, info: dict[str, Any], *, mamba_chunk_size: int = 64) -> EngineConfig | str:
    """The reference configuration of a running server, or why there is none."""
    semantics = semantics_for(info.get("version"))
    if semantics is None:
        return (f"no cache semantics proven for SGLang {info.get('version')!r} "
                f"(proven: {', '.join(SGLANG_SEMANTICS)})")
    if spec.policy in NOT_ON_REFERENCE:
        return f"the reference cache cannot mirror arm {spec.name!r} ({NOT_ON_REFERENCE[spec.policy]})"
    if spec.host_tier:
        return "a host tier's asynchronous write-back is not mirrored request by request"
    states = dict(info.get("internal_states", [{}])[0]) if info.get("internal_states") else {}
    kv = _int(info, "max_total_num_tokens", "max_total_tokens")
    if kv is None:
        return "/server_info reports no max_total_num_tokens"
    # The reference server with TokenSpeed's semantics says so in its flags (--cache-semantics).
    tokenspeed = info.get("cache_semantics") == "tokenspeed" and spec.strategy == "extra_buffer"
    try:
        return EngineConfig(
            kv_tokens=kv,
            state_slots=_int(info, "max_mamba_cache_size") or _int(states, "mamba_pool_size") or _UNBOUNDED,
            cache="tokenspeed" if tokenspeed else spec.strategy,
            policy=spec.policy,
            page_size=_int(info, "page_size") or 1,
            chunked_prefill_size=_int(info, "chunked_prefill_size") or 8192,
            track_interval=_int(info, "mamba_track_interval") or 256,
            overlap=not info.get("disable_overlap_schedule", False),
            semantics=semantics,
            mamba_chunk_size=mamba_chunk_size,  # /server_info does not report it: the model's
        )
    except ValueError as exc:  # a configuration the engine refuses (TokenSpeed's cache with a non-LRU arm)
        return str(exc)


class CachePredictor:
    def __init__(self, config: EngineConfig) -> None:
        self.core = EngineCore(config)
        self.broken = ""  # set once a request cannot be mirrored: later predictions would be guesses

    def predict(self, prompt: Sequence[int], output_ids: Sequence[int], output_tokens: int) -> int | None:
        """Mirror one completed request; its predicted ``cached_tokens`` (None once mirroring broke)."""
        if self.broken:
            return None
        if len(output_ids) != output_tokens:
            self.broken = "the server did not return its output token ids"
            return None
        row = TraceRow(0, 0, 0.0, tuple(prompt), tuple(output_ids))
        try:
            (rec,) = simulate([row], self.core, _NoTime(), arrival_schedule([row], _SEQUENTIAL)).records
        except Exception as exc:  # a failing mirror must never cost the measurement itself
            self.broken = f"the reference cache failed to mirror a request ({type(exc).__name__}: {exc})"
            return None
        if rec.status != "ok":
            self.broken = f"the reference cache rejected a request the server served ({rec.error})"
            return None
        return rec.cached_tokens


class ExactHits:
    name = "exact_hits"
    snapshot_key = "prediction"
    # Any live server: an engine whose cache does not follow SGLang's semantics (vLLM) gets no prediction, said in
    # its trial snapshot, and cache_hits keeps its hit-rate floor there; refusing the run would take sequential
    # hit-rate runs away from every engine but SGLang's.
    needs = ProbeNeeds()

    def wanted(self, cfg: RunCfg) -> str:
        load = cfg.load
        if "cache_hits" in cfg.checks.enabled and load.kind == "closed" and load.max_concurrency == 1 \
                and not load.prime:  # concurrent hits depend on timing: there is no exact prediction to make
            return "checks.enabled has cache_hits and the load is sequential (closed, load.max_concurrency=1)"
        return ""

    def sample_from_json(self, obj: dict[str, Any]) -> ExactHitSample:
        return exact_hit_sample_from_json(obj)

    def run(self, ctx: ProbeContext) -> str | dict[str, Any]:
        if not ctx.traits.reference_semantics or "sglang" not in ctx.traits.protocols:
            return "no prediction: this engine's cache does not follow SGLang's semantics (what reference_impl mirrors)"
        if ctx.cache_state != "cold-flushed":
            return f"no prediction: the trial started {ctx.cache_state}, not cold"
        try:
            with urllib.request.urlopen(ctx.auth.request(ctx.base_url, "/server_info"), timeout=10) as resp:
                info = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return f"/server_info unavailable ({exc})"
        config = predictor_config(ctx.arm, info, mamba_chunk_size=served_chunk(ctx.cfg))
        if isinstance(config, str):
            return config
        predictor = CachePredictor(config)
        for ex in ctx.exchanges:
            if ex.status != "ok":
                predictor.broken = predictor.broken or f"request {ex.index} failed"
            expected = predictor.predict(ex.prompt, ex.output_ids, ex.output_tokens)
            if expected is not None:
                ctx.emit(ExactHitSample(**ctx.identity, request_index=ex.index, expected_cached_tokens=expected))
        # The semantics were chosen by the version the server reported: kept beside the verdict.
        return {self.snapshot_key: predictor.broken or "exact", "prediction_semantics": config.semantics}

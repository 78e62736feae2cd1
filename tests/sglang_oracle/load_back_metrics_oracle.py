"""What SGLang's ``/metrics`` says about host (L2) load-back and device eviction, rendered by the release's own code.

Runs INSIDE an SGLang venv built by ``build_env.sh``, never in the repo's environment; ``prometheus_client``
(which SGLang's radix-cache path does not import, so build_env.sh leaves it out) must be importable, e.g. from
the vLLM CPU venv's site-packages on ``PYTHONPATH``:

    ~/.cache/hybridbench/sglang-0.5.23/bin/python tests/sglang_oracle/load_back_metrics_oracle.py [DIR] < in.json

(``DIR``, if given, goes on ``sys.path`` where ``PYTHONPATH`` would put it: one holding ``prometheus_client``.)

stdin: ``{"tp": n, "scenarios": {name: [phase, ...]}}``; a phase is what every TP rank's cache does before the
next scrape: ``{"evicted": tokens, "load_back": {pool: tokens}}`` (either may be absent). A scenario may instead be
``{"tp": n, "dp": groups, "phases": [{"groups": [phase, ...]}, ...]}``: a server with ``--enable-dp-attention``,
whose TP ranks form ``groups`` data-parallel attention groups, each counting its own requests (the ranks of one
group the same tokens). stdout: one JSON line ``{"version", "tp", "scenarios": {name: [exposition, ...]}}``: the
``/metrics`` text after server start (nothing counted yet) and after each phase.

SGLang's code used, per release (file:line in ``sglang/srt``):

- 0.5.9: ``RadixCacheMetricsCollector`` (metrics/collector.py:1515; ``sglang:evicted_tokens_total`` :1581,
  ``sglang:load_back_tokens_total`` :1594) with the labels ``BasePrefixCache.init_metrics_collector`` gives it
  (mem_cache/base_prefix_cache.py:121-128: ``cache_type`` only); load-back counted in
  ``HiRadixCache.load_back`` (mem_cache/hiradix_cache.py:926).
- 0.5.16: the same collector (observability/metrics_collector.py:1860; the counters at :1930 and :1943), the same
  labels (mem_cache/base_prefix_cache.py:218-230); counted in ``HiMambaRadixCache`` (mem_cache/
  hi_mamba_radix_cache.py:457) once the TP ranks agree on the finished loads (an all-reduce MIN, :440-446).
- 0.5.23: the collector (observability/metrics_collector.py:2435; ``evicted_tokens_total`` :2535,
  ``load_back_tokens_total`` :2553, labelled by ``pool`` and documented "Every TP rank reports the same logical
  count under its own rank labels; read one rank rather than summing ranks") with the rank labels of
  ``radix_cache_metric_labels`` (:2416, no DP attention); counted per pool in ``UnifiedRadixCache``
  (mem_cache/unified_radix_cache.py:3569-3574) from the ack's ``num_tokens_by_pool``
  (mem_cache/hybrid_cache/hybrid_cache_controller.py:953: the KV anchor pool ``kv`` plus e.g. ``mamba``).

Every TP rank is a process of its own, as SGLang's schedulers are, so ``prometheus_client``'s multiprocess mode
merges their series exactly as SGLang's ``/metrics`` route does (utils/common.py: ``MultiProcessCollector`` over
``PROMETHEUS_MULTIPROC_DIR``, text format 0.0.4). Stand-in: the parallel state 0.5.23's labels read
(``tp_rank``, ``pp_rank``) is a namespace, not a process group.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import tempfile
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any

CACHE_TYPE = {"0.5.9": "HiRadixCache", "0.5.16": "HiMambaRadixCache"}  # the class that counts load-back there


def _collector_cls() -> Any:
    try:
        from sglang.srt.observability.metrics_collector import RadixCacheMetricsCollector
    except ImportError:  # 0.5.9
        from sglang.srt.metrics.collector import RadixCacheMetricsCollector
    return RadixCacheMetricsCollector


def _labels(release: str, rank: int, tp: int, dp: int) -> dict[str, Any]:
    if release in CACHE_TYPE:
        return {"cache_type": CACHE_TYPE[release]}
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info
    from sglang.srt.observability.metrics_collector import radix_cache_metric_labels

    # The rank's place in its DP attention group, as 0.5.23's scheduler computes it (layers/dp_attention.py:445).
    attn_tp_rank, _, attn_dp_rank, _ = compute_dp_attention_world_info(rank, tp, dp)
    parallel = SimpleNamespace(tp_rank=rank, pp_rank=0, attn_tp_rank=attn_tp_rank, attn_dp_rank=attn_dp_rank)
    return dict(radix_cache_metric_labels("UnifiedRadixCache", parallel, dp > 1))


def _rank(release: str, rank: int, tp: int, dp: int, conn: Any) -> None:
    """One TP rank's cache: counts what its group's ranks count, with the calls each release's call sites make."""
    collector = _collector_cls()(labels=_labels(release, rank, tp, dp))
    group = rank // (tp // dp)  # ranks are laid out group by group (layers/dp_attention.py: tp is fastest)
    conn.send("ready")
    while (phase := conn.recv()) is not None:
        phase = phase["groups"][group] if "groups" in phase else phase
        if phase.get("evicted"):  # BasePrefixCache.update_eviction_metrics, every release
            collector.observe_eviction_duration(0.002)
            collector.increment_eviction_num_tokens(phase["evicted"])
        loaded = phase.get("load_back") or {}
        if release == "0.5.9" and loaded.get("kv"):  # hiradix_cache.py:922-926
            collector.observe_load_back_duration(0.003)
            collector.increment_load_back_num_tokens(loaded["kv"])
        elif release in CACHE_TYPE and loaded.get("kv"):  # hi_mamba_radix_cache.py:456-457 (timing off)
            collector.increment_load_back_num_tokens(loaded["kv"])
        elif release not in CACHE_TYPE and loaded:  # unified_radix_cache.py:3568-3574 (timing off)
            for pool, tokens in loaded.items():
                collector.increment_load_back_num_tokens(num_tokens=tokens, pool=pool)
            collector.increment_load_back_num_bytes(sum(loaded.values()) * 1024)
        conn.send("done")


def _render() -> str:
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry).decode()


def scenario(release: str, tp: int, phases: list[dict[str, Any]], dp: int = 1) -> list[str]:
    """A fresh server's expositions: after start, then after each phase."""
    metrics_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    for name in os.listdir(metrics_dir):  # the previous scenario's server is gone, and its counts with it
        os.remove(os.path.join(metrics_dir, name))
    ctx = mp.get_context("fork")  # a process per rank: its own pid, hence its own metric files
    pipes, procs = [], []
    for rank in range(tp):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_rank, args=(release, rank, tp, dp, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    for p in pipes:
        assert p.recv() == "ready"
    out = [_render()]
    for phase in phases:
        for p in pipes:
            p.send(phase)
        for p in pipes:
            assert p.recv() == "done"
        out.append(_render())
    for p in pipes:
        p.send(None)
    for proc in procs:
        proc.join(60)
    return out


def main() -> None:
    if sys.argv[1:]:  # a folder holding prometheus_client, where PYTHONPATH would put it (the warm server's
        sys.path.insert(1, sys.argv[1])  # environment is the other oracles': it cannot carry one)
    # prometheus_client picks its value class when imported: it must not have been, by the warm server's imports
    assert "prometheus_client" not in sys.modules, "prometheus_client imported before PROMETHEUS_MULTIPROC_DIR is set"
    request = json.load(sys.stdin)
    release = version("sglang")
    tp = int(request["tp"])
    with tempfile.TemporaryDirectory(prefix="sglang-metrics-") as metrics_dir:
        # Before prometheus_client is imported: it picks its multiprocess value class then.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        _collector_cls()  # imported once, before the ranks fork: each would take ~30 s to import it again
        reply_fd = os.dup(1)
        os.dup2(2, 1)  # whatever SGLang prints goes to stderr; the reply keeps the real stdout
        result = {name: scenario(release, int(given["tp"]), given["phases"], int(given["dp"]))
                  if isinstance(given, dict) else scenario(release, tp, given)
                  for name, given in request["scenarios"].items()}
    with os.fdopen(reply_fd, "w") as reply:
        reply.write(json.dumps({"version": release, "tp": tp, "scenarios": result}) + "\n")


if __name__ == "__main__":
    main()

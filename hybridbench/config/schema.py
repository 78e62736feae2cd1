"""The run configuration's schema: dataclasses Hydra composes YAML onto (typos fail at compose time).

Schemas stay mutable (Hydra needs that to merge group options); the plan freezes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MODELLED_ENGINES",
    "MODELLED_TIMING_ENGINES",
    "SERVING_ENGINES",
    "TIMINGS",
    "ArmCfg",
    "ChecksCfg",
    "DataCfg",
    "EngineCfg",
    "L2ArmCfg",
    "LoadCfg",
    "MarconiArmCfg",
    "ModelCfg",
    "NoiseCfg",
    "PublishedCfg",
    "RunCfg",
    "SeglenArmCfg",
    "SizingCfg",
    "WorkloadCfg",
]


@dataclass
class EngineCfg:
    name: str = "sim"  # sim | reference | sglang | vllm
    # The GPU kind the run is planned, forecast and judged for: a100, b200, b300, gb200, h100 or h200, or cpu / none
    # (no GPU). Read case-blind (H100 is h100, recorded as h100); another kind plans with a warning (no forecast).
    gpu: str = "h100"
    tp: int = 1
    # interpreter for server engines ("" = this one); lets a PR build run beside main's. sim and replay run in the
    # harness's process and refuse it.
    python: str = ""
    host: str = "127.0.0.1"
    port: int = 0  # 0 = pick a free port
    startup_timeout_s: float = 600.0
    request_timeout_s: float = 600.0
    # A server that misses two health checks in a row while a trial runs is hung (exit 3). /health_generate
    # runs a real generation: on a loaded GPU server it can take seconds.
    health_timeout_s: float = 30.0
    chunked_prefill_size: int = 8192
    mem_fraction_static: float = 0.85
    max_mamba_cache_size: int = 0  # 0 = from memory
    kv_tokens: int = 0  # 0 = from memory
    capacity_bytes: float = 0.0  # the replay engine's cache budget in bytes, as Marconi sizes its caches
    page_size: int = 1
    track_interval: int = 256
    # flags appended to the server's command line (they win over a built flag of the same name); sim and replay
    # start no server and refuse them
    extra_args: list[str] = field(default_factory=list)
    # What a CPU engine can carry: every workload is shrunk by this factor more (lengths and groups or
    # sessions, sharing kept), and token ids stay below max_vocab (0 = the model's vocabulary). Refused on a GPU
    # server (sglang, vllm, tokenspeed unless engine.gpu=cpu): a smaller load there is workloads.<name>.scale.
    workload_scale: int = 1
    max_vocab: int = 0
    # The kl check's threshold for this engine's numerics: SGLang's kits use 0.002-0.005 on bf16/fp8 GPUs.
    kl_threshold: float = 0.003
    # Whose cache the reference server mirrors: "sglang" or "tokenspeed" (TokenSpeed's radix-era cache, PR #162:
    # docs/engines/tokenspeed.md); engine=reference only.
    cache_semantics: str = "sglang"
    # The clock the ttft, throughput and prefill_overhead checks judge: "wall" (the client's), or "modelled" (the
    # reference server's cost-model time of each request, reported beside the wall clock; engine=reference only,
    # where two shared CPU cores make wall time too noisy to decide: docs/guides/verdicts.md).
    timing: str = "wall"
    # The reference server's planted prefill slowdown, per arm (arm name -> fraction: 0.25 adds 25% to the time of
    # every prefill that arm's server computes, wall and modelled); engine=reference only. +experiment=noise
    # sets it for its second copy from noise.planted_slowdown.
    prefill_slowdown: dict[str, float] = field(default_factory=dict)


TIMINGS = ("wall", "modelled")
MODELLED_TIMING_ENGINES = ("reference",)
# Engines whose records come from a model (times, and for replay the cache too), not a running server: they run
# in the harness's own process and start nothing.
MODELLED_ENGINES = frozenset({"sim", "replay"})
SERVING_ENGINES = frozenset({"sglang", "vllm", "tokenspeed"})  # engines that serve model.hf_id's weights on GPUs


@dataclass
class NoiseCfg:
    """+experiment=noise: the A/A run's planted regression (0 = a true A/A)."""

    planted_slowdown: float = 0.0


@dataclass
class SeglenArmCfg:
    eff_weight: float = 0.85  # --seglen-eff-weight: PR #22172's example value (SGLang's source, https://github.com/sgl-project/sglang)


@dataclass
class MarconiArmCfg:
    eff_weight: float | None = None  # --marconi-eff-weight; None = the PR's autotuner picks it (PR #21862)


@dataclass
class L2ArmCfg:
    hicache_ratio: float = 2.0  # --hicache-ratio: host pools as a multiple of the device pools (SGLang's default)
    hicache_write_policy: str = "write_through"  # SGLang's default; what its mamba HiCache KL tests use
    # What SGLang's own mamba HiCache tests run with (SGLang's source; SGLang's defaults are kernel/page_first);
    # "" = do not pass the flag, leaving the server's default. A pair SGLang would switch at start-up is refused:
    # kernel with page_first_direct (it runs direct), direct with page_first (it runs page_first_direct).
    hicache_io_backend: str = "direct"
    hicache_mem_layout: str = "page_first_direct"
    host_tier_gb: float = 0.0  # vLLM --kv-offloading-size GiB; 0 = not set (vLLM's l2 arm then needs it)


@dataclass
class ArmCfg:
    """The knobs of the arms that have any (conf/arm/), the same on every engine: ``arm.seglen.eff_weight``
    becomes SGLang's ``--seglen-eff-weight``, the reference server's flag of that name and the simulator's
    policy weight; ``-m arm.seglen.eff_weight=0.5,0.85`` sweeps it. Which arms run is ``arms``."""

    seglen: SeglenArmCfg = field(default_factory=SeglenArmCfg)
    marconi: MarconiArmCfg = field(default_factory=MarconiArmCfg)
    l2: L2ArmCfg = field(default_factory=L2ArmCfg)


@dataclass
class ModelCfg:
    name: str = "qwen3-next-80b-a3b"  # reference_impl.models name (byte and FLOP facts)
    hf_id: str = "Qwen/Qwen3-Next-80B-A3B-Instruct"  # what real servers load
    # config.json's architectures[0], the class the server loads: an engine that has no such class is refused at
    # plan time, and so is "" on sglang, vllm and tokenspeed (fine on reference, sim, replay: they load no checkpoint)
    architecture: str = ""
    vocab_size: int = 151936
    # Has recurrent (Mamba / gated-delta) layers. False for a dense model served as a baseline: vLLM 0.32.0's
    # engine dies on the first request when given --mamba-cache-mode for a model without mamba layers.
    hybrid: bool = True
    # SGLang's --quantization name for the weights ("" = the checkpoint's dtype): fp8, w8a8_fp8. The simulator
    # models one-byte weights and fp8 GEMMs; SGLang, vLLM and TokenSpeed get --quantization.
    quantization: str = ""
    # SGLang's --mamba-ssm-dtype (float32 | bfloat16 | float16): the dtype of the temporal (SSM) state in the state
    # pool; "" = the server's default for the model (float32 for every model here, reference_impl.models). The
    # simulator and the replayer count the state's bytes in it, SGLang and vLLM (--mamba-ssm-cache-dtype) get the
    # flag; the CPU reference server and TokenSpeed cannot set it and refuse it at plan time.
    mamba_ssm_dtype: str = ""
    # The longest prompt + answer the checkpoint's server takes: config.json's max_position_embeddings (text_config's
    # for Qwen3.5), which SGLang, vLLM and TokenSpeed take as their context length when none is given
    # (hybridbench/engines/context_length.py); a request past it is refused by the server. 0 = unknown, not checked.
    context_length: int = 0
    # config.json's num_attention_heads (text_config's for Qwen3.5). Every GPU server splits these head counts over
    # engine.tp and stops at start-up on a tp that does not split one, so the plan refuses it
    # (hybridbench/engines/tp_split.py). 0 here and below = no such layer, or unknown: not checked.
    attention_heads: int = 0
    kv_heads: int = 0  # config.json's num_key_value_heads: split over engine.tp, or copied when fewer
    linear_key_heads: int = 0  # config.json's linear_num_key_heads (gated delta net layers): split over engine.tp
    linear_value_heads: int = 0  # config.json's linear_num_value_heads: split over engine.tp
    mamba_heads: int = 0  # config.json's mamba_num_heads (Mamba2 layers): split over engine.tp
    mamba_groups: int = 0  # config.json's n_groups (Mamba2 layers): split over engine.tp (SGLang, vLLM: or 1)


@dataclass
class WorkloadCfg:
    kind: str = "gsp"  # a workloads.registry name
    preset: str = ""
    scale: int = 1  # shrink lengths and counts (workloads.scale) for CPU-sized runs
    params: dict[str, Any] = field(default_factory=dict)  # generator options, e.g. {num_groups: 4}
    # This workload's Poisson rate (bench_serving's --request-rate per dataset): 0 = load.request_rate. Only a
    # poisson load has a rate; the seglen PR sent its SWE-bench traces at 10 and its other loads at 8.
    request_rate: float = 0.0
    # A sentence the report sets under this workload's heading: what a reader must know to read its rows (e.g.
    # why its policy comparison cannot evict on this engine).
    note: str = ""
    # What this load tests: the checks that judge it ([] = every enabled check). A check left out gives a skip
    # row saying why, never a verdict: the seglen PR's ShareGPT first turns are its TTFT and throughput regression
    # load; they evict nothing on GPU pools, so an eviction verdict there could only ever be inconclusive.
    judged_by: list[str] = field(default_factory=list)
    # Send only the first K sessions of this load, whole (0 = all; workloads/sessions.py): where a seed's full load
    # cannot fit the experiment's GPU budget (sizing.budget_min). The trace is drawn in full, then cut, so the kept
    # sessions are the full load's; the plan and the report say "the first K of N sessions".
    keep_sessions: int = 0


@dataclass
class LoadCfg:
    kind: str = "closed"  # closed | poisson | trace
    max_concurrency: int = 5
    request_rate: float = 0.0
    slowdown: float = 1.0
    prime: bool = False  # replay the trial's requests once, unrecorded, after the flush: records say "primed"


@dataclass
class ChecksCfg:
    enabled: list[str] = field(default_factory=lambda: ["survival", "ttft", "throughput", "cache_hits"])
    # "" = the first arm; or, when a cache-off arm follows the only cache-on one (arms=[branching,disabled]), that
    # cache-off arm (several cache-on arms before a cache-off one: refused, say which)
    baseline_arm: str = ""
    # pass when the whole CI of the relative TTFT change is at or below this, fail when wholly above, else inconclusive
    ttft_regression: float = 0.10
    throughput_regression: float = 0.10  # likewise for the relative drop of request throughput
    min_token_hit_rate: float = 0.0  # cache_hits floor for cache-on arms on shared-prefix workloads
    bootstrap_samples: int = 1000
    confidence: float = 0.95
    # The kl check's probe (hybridbench/probes/kl_requests.py), run after each trial of a cache-on arm.
    kl_samples: int = 4  # prompts per variant
    kl_variants: list[str] = field(default_factory=lambda: ["prefill", "decode", "branch"])
    kl_max_new_tokens: int = 16
    kl_temperature: float = 1.0  # SGLang's unified-radix KL kit samples at temperature 1
    kl_min_hit_fraction: float = 0.5  # SGLang asserts that more than half of the samples hit
    # prefill_overhead: radix-on input throughput / radix-off (the disabled arm) must stay above this.
    min_prefill_throughput_ratio: float = 0.85
    # The accuracy probe (hybridbench/probes/accuracy.py): evalscope in its own env against the live server.
    accuracy_python: str = ""  # "" = ~/.cache/hybridbench/evalscope-1.14.1/bin/python (envs/evalscope/build.sh)
    accuracy_datasets: dict[str, str] = field(default_factory=dict)  # gsm8k/aime25 -> local folder; {} = shipped
    accuracy_limit: int = 0  # questions per dataset; 0 = all
    # GPU values (a gsm8k chain of thought runs to a few hundred tokens; SGLang's gsm8k harness asks 64 at a time,
    # --parallel): the CPU family sets 48 and 4 for the reference engine (conf/sizing/all/cpu.yaml)
    accuracy_max_tokens: int = 1024
    accuracy_batch_size: int = 64  # evalscope's concurrent requests
    accuracy_timeout_s: float = 1800.0  # one pass of evalscope
    # exact (every answer equal) | paired (McNemar) | auto: exact where the engine is bitwise reproducible
    accuracy_mode: str = "auto"
    accuracy_alpha: float = 0.05  # GPU verdict: McNemar's exact one-sided p below this ...
    accuracy_tolerance: float = 0.01  # ... and an accuracy drop above this fails


@dataclass
class PublishedCfg:
    """One result a seed published, set beside this run in the report ("published vs this run").

    With ``baseline_arm``: ``value`` is the relative change of ``metric`` from ``baseline_arm`` to ``arm``
    (-0.295 = 29.5% lower). Without: ``value`` is ``arm``'s absolute ``metric``. Comparable only on the same
    engine, model and workload scale (``workloads.W.scale`` x ``engine.workload_scale``) as the source."""

    metric: str = ""  # a summary key of the bundle's aggregates: mean_ttft_ms, request_throughput, ...
    workload: str = ""  # this experiment's workload that stands for the published load
    arm: str = ""
    baseline_arm: str = ""
    value: float = 0.0
    source: str = ""  # where it was published: seed, PR, issue
    engine: str = "sglang"
    hardware: str = ""
    model: str = ""  # a reference_impl.models name, as model.name
    scale: int = 1  # the published run's workload scale (1: full size)
    # The published run's setup, where the source states it ("" / 0: unstated, not compared): engine.gpu, engine.tp,
    # model.quantization ("none": the checkpoint's dtype), and its arrivals: "closed:N" (at most N in flight),
    # "poisson:R" (requests per second) or "trace".
    gpu: str = ""
    tp: int = 0
    quantization: str = ""
    arrival: str = ""
    tolerance: float = 0.25  # absolute values: reproduced within this fraction of max(|value|, 1)


@dataclass
class DataCfg:
    """Real data sets, one key each (hybridbench/plan/data.py). "" = none: a GPU run then falls back to the synthetic
    stand-in and says so in its plan and report; ``require_real`` refuses that instead."""

    # ShareGPT for every sharegpt workload without its own params.path/dataset: a ShareGPT JSON file (bench_serving's
    # ShareGPT_V3_unfiltered_cleaned_split.json), a dataset saved with datasets' save_to_disk, or a Hub dataset name.
    sharegpt: str = ""
    sharegpt_split: str = "train"
    # SWE-bench agent sessions for every swebench workload without its own params.path: SWE-agent .traj or
    # OpenHands-style .json files (one file or a directory of them, tokenized message by message), or a ready trace
    # .jsonl of token ids (SegLen's swebench_sps=10_art=5_nums=100.jsonl), replayed as it is.
    swebench: str = ""
    gsm8k: str = ""  # a local gsm8k folder for the accuracy probe (checks.accuracy_datasets.gsm8k)
    aime25: str = ""  # a local aime25 folder for the accuracy probe (checks.accuracy_datasets.aime25)
    # The tokenizer that turns text into token ids: "" = the served model's own (model.hf_id) on engines that load
    # weights, the hash-word tokenizer elsewhere.
    tokenizer: str = ""
    require_real: bool = False  # refuse a GPU run that would use synthetic text in place of a real data set


@dataclass
class SizingCfg:
    """Which of an experiment's two configurations was composed, and what its GPU one promises.

    The engine picks the family (conf/engine/*.yaml: ``/sizing: cpu`` on the reference engine, ``gpu`` elsewhere);
    the experiment's ``conf/sizing/<experiment>/<family>.yaml`` then sets its pools, tracking interval, loads and
    arrivals (docs/guides/gpu-sizing.md). ``sizing=gpu`` / ``sizing=cpu`` on the command line picks the other."""

    family: str = ""  # cpu | gpu ("" = no engine picked one)
    # The wall time the GPU configuration is planned to fit, in minutes (0 = none stated): the simulator's
    # forecast of every trial must stay under it (tests/ci/test_gpu_budgets.py).
    budget_min: float = 0.0


@dataclass
class RunCfg:
    name: str = "adhoc"
    arms: list[str] = field(default_factory=lambda: ["disabled", "lru"])
    arm: ArmCfg = field(default_factory=ArmCfg)
    workloads: dict[str, WorkloadCfg] = field(default_factory=dict)
    repeats: int = 1  # the minimum: every run does this many full repeats (docs/guides/adaptive-repeats.md)
    # While a ttft, throughput or prefill_overhead row is inconclusive, the run earns one more repeat, up to this
    # many (0: = repeats, a fixed count).
    repeats_max: int = 0
    budget_minutes: float = 60.0  # no repeat is earned that, as long as the longest so far, would end past this
    seed: int = 0
    # A run dir that already holds files is refused; true replaces the run in it (hybridbench/results/run_dir.py).
    overwrite: bool = False
    engine: EngineCfg = field(default_factory=EngineCfg)
    model: ModelCfg = field(default_factory=ModelCfg)
    load: LoadCfg = field(default_factory=LoadCfg)
    checks: ChecksCfg = field(default_factory=ChecksCfg)
    published: list[PublishedCfg] = field(default_factory=list)
    data: DataCfg = field(default_factory=DataCfg)
    noise: NoiseCfg = field(default_factory=NoiseCfg)
    sizing: SizingCfg = field(default_factory=SizingCfg)

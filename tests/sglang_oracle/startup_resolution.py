"""The script that resolves server command lines in a SGLang release's venv as that release's server would start
them (tests/sglang_oracle/test_sglang_startup_departures.py): ``prepare_server_args`` and the resolution after it, then
which prefix cache the release's own ``create_tree_cache`` builds for the line.

Its input (stdin, JSON) is a list of [CUDA major, argv] pairs: each line's platform probes are answered as a GPU of
that major answers them (this CPU is none), CUDA itself among them. Its output (the last stdout line, JSON) is one
dict per line: the resolved keys, or ``refused`` with the release's own message.
"""

from oracle_client import PRETEND_H100

__all__ = ["RESOLVE"]

# Each line's GPU: the SM probes (trtllm_mha's platform checks, 0.5.16 server_args.py and 0.5.23 attention_hook.py;
# stochastic rounding's, mamba_hook.py) answered as a GPU of that CUDA major answers them, every one of the three set.
PRETEND_PLATFORM = """
def pretend_platform(major):
    facts = {"is_sm90": major == 9, "is_sm100": major == 10, "is_sm120": major == 12}
    try:
        from sglang.srt.runtime_context import override_platform  # 0.5.23: every reader goes through it
        override_platform(is_cuda=True, **facts).install()  # an NVIDIA GPU (stochastic rounding asks)
    except ImportError:  # 0.5.16: the names server_args and its overrides imported (PRETEND_H100 says CUDA)
        import sglang.srt.server_args as sa_module
        import sglang.srt.arg_groups.overrides as overrides_module
        for module in (sa_module, overrides_module):
            for fact, value in facts.items():
                if hasattr(module, fact + "_supported"):
                    setattr(module, fact + "_supported", lambda value=value: value)
"""

RESOLVE = "import importlib, json, sys, types" + PRETEND_H100 + PRETEND_PLATFORM + """
from sglang.srt.server_args import prepare_server_args
import sglang.srt.mem_cache.registry as registry
import sglang.srt.mem_cache.storage.flexkv as flexkv
KEYS = ("disable_radix_cache", "mamba_radix_cache_strategy", "enable_hierarchical_cache", "hicache_io_backend",
        "hicache_mem_layout", "speculative_num_draft_tokens", "chunked_prefill_size", "radix_cache_backend",
        "enable_lmcache", "enable_flexkv", "mamba_max_states_per_path", "page_size", "hicache_host_memory_mode",
        "hicache_write_policy")
SPEC = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")

class Picked(Exception):
    pass

def picker(name):
    def build(*args, **kwargs):
        raise Picked(name)
    return build

# Which prefix cache the release's own create_tree_cache builds: every cache its chain can construct raises
# Picked(its name) instead (registered backends too), so the chain's code, not this script, chooses.
LEAVES = {"sglang.srt.mem_cache.chunk_cache": ("ChunkCache", "SWAChunkCache", "PureSWAChunkCache"),
          "sglang.srt.mem_cache.radix_cache": ("RadixCache",),
          "sglang.srt.mem_cache.pure_swa_radix_cache": ("PureSWARadixCache",),
          "sglang.srt.mem_cache.hiradix_cache": ("HiRadixCache",)}
loaded = {}
for name in LEAVES:  # all imported before any is replaced: one subclasses another
    try:
        loaded[name] = importlib.import_module(name)
    except ImportError:
        pass
for name, module in loaded.items():
    for cls in LEAVES[name]:
        if hasattr(module, cls):
            setattr(module, cls, picker(cls))
for fn in ("_create_unified_radix_cache", "create_unified_radix_cache"):
    if hasattr(registry, fn):
        setattr(registry, fn, picker("UnifiedRadixCache"))
flexkv._flexkv_factory = picker("FlexKV")
for name in list(registry._RADIX_CACHE_REGISTRY):
    registry._RADIX_CACHE_REGISTRY[name] = picker(f"registered backend {name}")
for name, cls in (("lmc_radix_cache", "LMCRadixCache"), ("lmcache_unified_radix_cache", "LMCacheUnifiedRadixCache")):
    module = types.ModuleType(f"sglang.srt.mem_cache.storage.lmcache.{name}")  # LMCache itself is not installed
    setattr(module, cls, picker(cls))
    sys.modules[module.__name__] = module

def tree_cache(raw, view):
    try:
        from sglang.srt.runtime_context import publish  # 0.5.23 reads the config through it
        publish(raw, role="scheduler")
    except ImportError:
        pass
    kw = dict(server_args=raw, params=types.SimpleNamespace(), is_hybrid_swa=False, is_hybrid_ssm=True,
              enable_hierarchical_cache=view.enable_hierarchical_cache, disable_radix_cache=view.disable_radix_cache,
              tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(forward_stream=None)),
              model_config=None, tp_size=view.tp_size, tp_rank=0, tp_group=None)
    if "effective_chunked_prefill_size" in registry.TreeCacheBuildContext.__dataclass_fields__:
        kw["effective_chunked_prefill_size"] = view.chunked_prefill_size
    try:
        registry.create_tree_cache(registry.TreeCacheBuildContext(**kw))
    except Picked as picked:
        return str(picked)
    except Exception as exc:
        return f"refused: {type(exc).__name__}: {exc}"[:300]
    return "none"

def resolve(argv):
    try:
        raw = prepare_server_args(argv)
        getattr(raw, "resolve_once", lambda: None)()
        args = raw
        try:
            from sglang.srt.arg_groups.overrides import resolving_view
            args = resolving_view(raw)
        except ImportError:
            pass
    except (AssertionError, ValueError, NotImplementedError, TypeError, SystemExit) as exc:  # TypeError: a value unset
        return {"refused": f"{type(exc).__name__}: {exc}"[:300]}, None
    return {k: getattr(args, k, None) for k in (*KEYS, *SPEC)}, (raw, args)
out = []
for major, argv in json.load(sys.stdin):
    pretend_platform(major)
    got, built = resolve(argv)
    if built is not None:
        got["tree_cache"] = tree_cache(*built)
    drafts = got.get("speculative_num_draft_tokens")
    asked = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--speculative-num-draft-tokens"]
    if drafts is not None and asked[-1:] != [str(drafts)]:
        # the speculative settings filled in (or changed) after validation: would the validator take them given?
        given = [x for k in SPEC if got[k] is not None for x in ("--" + k.replace("_", "-"), str(got[k]))]
        again, _ = resolve([*argv, *given])
        got["refused_once_drafts_given"] = again.get("refused", "")
    out.append(got)
print(json.dumps(out))
"""

"""Run in a SGLang release's venv: which TP sizes each model's layers take, decided by the release's own code.

stdin (JSON): {"configs": {name: config.json (tests/vllm_cpu/real_configs.py)}, "tps": [int]}. For each model and
TP, each layer kind the model has is built by the release's own class under a parallel state of that TP (rank 0),
until the first layer it builds after its TP checks, which raises ``Reached``: ``ok`` when the release got there,
else its own refusal (the AssertionError or ValueError of the check). Built on the meta device: no weights.

- attention: ``Qwen3HybridAttentionDecoderLayer`` (models/qwen3_next.py), ``Qwen3_5AttentionDecoderLayer``
  (models/qwen3_5.py), ``NemotronHAttention`` (models/nemotron_h.py), up to ``QKVParallelLinear`` or ``get_rope``,
  whichever it builds first after its head checks;
- gated delta net: ``Qwen3GatedDeltaNet`` / ``Qwen3_5GatedDeltaNet``, its projections and state parameters built,
  up to ``RowParallelLinear`` (out_proj); and the key-head split: SGLang pads the linear-attention heads to a multiple
  of TP only on CPU, exactly when they do not split (configs/update_config.py ``adjust_tp_num_heads_if_necessary``),
  so a TP it would pad is one a GPU server cannot split (``pads``);
- Mamba2: ``<config>.mamba2_cache_params`` (its state shape divides the heads) and ``MambaMixer2``
  (layers/attention/mamba/mamba.py) up to its first ``MergedColumnParallelLinear``.

stdout (last line): {"version", "verdicts": {name: {tp: {layer: "ok" | refusal | "unimportable"}}}, "unimportable":
{module: why}}: a model module this env cannot import (0.5.23's nemotron_h pulls in the server) is left out.
``_is_cpu`` is forced False in the model and config modules: on a CPU host they take the padded head counts of
SGLang's CPU kernels; a GPU does not. The parallel state is a stand-in: process groups of ``tp`` ranks seen from rank
0 (0.5.9, 0.5.16 read them) and 0.5.23's ``get_parallel().override``; nothing communicates.
"""

import importlib
import json
import os
import sys
import types
import warnings

warnings.filterwarnings("ignore")
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # breaks the import on CPU (docs/concepts/reference-cache.md)
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "import_stubs"))  # einops, if absent

import sglang  # noqa: E402
import sglang.srt.distributed.parallel_state as ps  # noqa: E402
import torch  # noqa: E402
from sglang.srt.configs import nemotron_h as cfg_nh  # noqa: E402
from sglang.srt.configs import qwen3_next as cfg_qn  # noqa: E402
from sglang.srt.configs.qwen3_5 import Qwen3_5TextConfig  # noqa: E402
from sglang.srt.configs.update_config import adjust_tp_num_heads_if_necessary  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

UNIMPORTABLE = {}  # module -> why this env cannot import it (its layers are then not built: "unimportable")


def _module(name):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        UNIMPORTABLE[name] = f"{type(exc).__name__}: {exc}"
        return None


qwen3_next = _module("sglang.srt.models.qwen3_next")
qwen3_5 = _module("sglang.srt.models.qwen3_5")
nemotron_h = _module("sglang.srt.models.nemotron_h")
mamba = _module("sglang.srt.layers.attention.mamba.mamba")

try:
    from sglang.srt.server_args import set_global_server_args_for_scheduler
except ImportError:  # 0.5.9
    set_global_server_args_for_scheduler = None
try:
    from sglang.srt.runtime_context import get_parallel
except ImportError:  # 0.5.9
    get_parallel = None


class Reached(Exception):
    """The layer got past its TP checks to the first layer built after them."""


def reached(*_args, **_kwargs):
    raise Reached


for module in (qwen3_next, qwen3_5, nemotron_h, cfg_qn):
    if module is not None and hasattr(module, "_is_cpu"):
        module._is_cpu = False
if set_global_server_args_for_scheduler is not None:
    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy"))


class Group(types.SimpleNamespace):
    """A process group of ``world_size`` ranks seen from rank 0 (no communication: nothing is run)."""


def parallel(tp):
    """Every TP width ``tp``, rank 0: the groups 0.5.9 and 0.5.16 read, and 0.5.23's parallel context."""
    group = Group(world_size=tp, rank_in_group=0, rank=0, local_rank=0, ranks=list(range(tp)), device_group=None,
                  cpu_group=None)
    for name in ("_TP", "_ATTN_TP", "_MOE_TP", "_MOE_EP"):
        if hasattr(ps, name):
            setattr(ps, name, group)
    if get_parallel is None or not hasattr(get_parallel(), "override"):
        return _Nothing()
    try:
        return get_parallel().override(tp_size=tp, attn_tp_size=tp, moe_tp_size=tp, tp_rank=0, attn_tp_rank=0,
                                       moe_tp_rank=0, moe_ep_rank=0, pp_rank=0, attn_dp_size=1, attn_cp_size=1,
                                       world_group=group)
    except (TypeError, ValueError, KeyError):  # 0.5.16: fewer names to override, read from the groups above
        return _Nothing()


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def build(make):
    """"ok" when ``make`` reaches the layer after its checks, else the release's refusal."""
    try:
        with torch.device("meta"):
            make()
    except Reached:
        return "ok"
    except (AssertionError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"[:200] or type(exc).__name__
    return "ok"


def patched(module, names, make):
    """``make`` built with each of ``names`` (module globals) raising Reached: the first built after the checks."""
    if module is None:
        return "unimportable"
    saved = {name: getattr(module, name) for name in names if hasattr(module, name)}
    for name in saved:
        setattr(module, name, reached)
    try:
        return build(make)
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def text_config(cfg):
    text = dict(cfg.get("text_config", cfg))
    text.pop("model_type", None)
    # what the head checks do not read, which real_configs.py leaves out and the rope readers require
    text.update(hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000000)
    if "text_config" in cfg:  # Qwen3.5's config.json states its rope in rope_parameters
        return Qwen3_5TextConfig(**text, rope_parameters={"rope_type": "default", "rope_theta": 10000000})
    if cfg["model_type"] == "qwen3_next":
        return cfg_qn.Qwen3NextConfig(**text)
    return cfg_nh.NemotronHConfig(**text)


def verdicts(name, cfg, tp):
    c = text_config(cfg)
    out = {}
    if "text_config" in cfg or cfg["model_type"] == "qwen3_next":
        module = qwen3_5 if "text_config" in cfg else qwen3_next
        qwen35 = "text_config" in cfg
        attn = "Qwen3_5AttentionDecoderLayer" if qwen35 else "Qwen3HybridAttentionDecoderLayer"
        gdn = "Qwen3_5GatedDeltaNet" if qwen35 else "Qwen3GatedDeltaNet"
        out["attention"] = patched(module, ("QKVParallelLinear", "get_rope"),
                                   lambda: getattr(module, attn)(c, 3, None, prefix="model.layers.3"))
        out["gated delta net"] = patched(module, ("RowParallelLinear",),
                                         lambda: getattr(module, gdn)(c, 0, None, prefix="model.layers.0"))
        padded = types.SimpleNamespace(linear_num_key_heads=c.linear_num_key_heads,
                                       linear_num_value_heads=c.linear_num_value_heads)
        adjust_tp_num_heads_if_necessary(padded, tp, False)
        same = (padded.linear_num_key_heads, padded.linear_num_value_heads) == (c.linear_num_key_heads,
                                                                                c.linear_num_value_heads)
        out["linear heads"] = "ok" if same else (f"pads to {padded.linear_num_key_heads} key and "
                                                 f"{padded.linear_num_value_heads} value heads")
    else:
        out["attention"] = patched(nemotron_h, ("QKVParallelLinear", "get_rope"),
                                   lambda: nemotron_h.NemotronHAttention(c, layer_idx=4, prefix="model.layers.4"))
        try:
            params = c.mamba2_cache_params
        except AssertionError as exc:
            out["mamba2"] = f"AssertionError: {exc}"
        else:
            out["mamba2"] = patched(mamba, ("MergedColumnParallelLinear",), lambda: mamba.MambaMixer2(
                params, c.hidden_size, use_conv_bias=True, use_bias=False, n_groups=c.n_groups,
                prefix="model.layers.0.mixer"))
    return out


def main():
    given = json.load(sys.stdin)
    out = {}
    for name, cfg in given["configs"].items():
        out[name] = {}
        for tp in given["tps"]:
            with parallel(tp):
                out[name][str(tp)] = verdicts(name, cfg, tp)
    print(json.dumps({"version": sglang.__version__, "verdicts": out, "unimportable": UNIMPORTABLE}))


main()

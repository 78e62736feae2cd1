"""``model.quantization``: SGLang's ``--quantization`` names, the one list the config is checked against.

The union of the choices SGLang 0.5.9, 0.5.16 and 0.5.23's own argument parsers list (their ``--help``; the
SGLang tier compares this set with those builds'). ``engine=sglang`` checks the name against the installed
build's ``--help`` instead, so a newer SGLang's names work there; every other engine refuses a name outside
this list at plan time. The simulator models fewer (``reference_impl.engine.cost_model.QUANTIZATIONS``).
"""

from __future__ import annotations

from hybridbench.config.schema import RunCfg
from hybridbench.errors import ConfigError

__all__ = ["SGLANG_QUANTIZATIONS", "check_quantization"]

SGLANG_QUANTIZATIONS = frozenset({
    "auto-round", "auto-round-int8", "awq", "awq_marlin", "bitsandbytes", "compressed-tensors", "fp8", "gguf",
    "gptq", "gptq_marlin", "humming", "marlin", "mlx_q4", "mlx_q8", "modelopt", "modelopt_fp4", "modelopt_fp8",
    "modelopt_mixed", "modelslim", "moe_wna16", "mxfp4", "mxfp8", "mxfp_w4a8", "nvfp4_online", "petit_nvfp4", "qoq",
    "quark", "quark_int4fp8_moe", "quark_mxfp4", "unquant", "w4afp8", "w8a8_fp8", "w8a8_int8",
})


def check_quantization(cfg: RunCfg) -> None:
    """ConfigError naming ``model.quantization`` for a name SGLang does not have (engine=sglang: its --help)."""
    name = cfg.model.quantization
    if name and cfg.engine.name != "sglang" and name not in SGLANG_QUANTIZATIONS:
        raise ConfigError(f"model.quantization: {name!r} is not an SGLang --quantization name; choose one of "
                          f"{', '.join(sorted(SGLANG_QUANTIZATIONS))}, or empty for the checkpoint's dtype")

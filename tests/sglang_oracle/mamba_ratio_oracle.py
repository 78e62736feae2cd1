"""SGLang's own count of state slots per running request (``KVCacheConfigurator._calculate_mamba_ratio``).

Runs INSIDE an SGLang 0.5.16 or 0.5.23 venv built by ``build_env.sh``, never in the repo's environment:

    ~/.cache/hybridbench/sglang-0.5.23/bin/python tests/sglang_oracle/mamba_ratio_oracle.py < cases.json

stdin: a JSON list of cases ``{strategy, overlap, radix}`` (``--mamba-radix-cache-strategy``, the overlap schedule
on, the radix cache on); stdout: one JSON line ``{"version", "results"}``, per case the ratio (``max_running_requests
<= max_mamba_cache_size // ratio``) or ``{"refused": message}`` where SGLang asserts. The function is called on a
stand-in carrying a real ``ServerArgs`` (0.5.16 reads ``self.server_args``; 0.5.23 the same args published by
``set_global_server_args_for_scheduler``), file:line: 0.5.16 mem_cache/kv_cache_configurator.py:1572, 0.5.23 :3062.
Everything SGLang prints goes to stderr, as in ``sglang_driver.py``.

No SGLang code is copied here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import types
import warnings

warnings.filterwarnings("ignore")
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # breaks the import on CPU (docs/concepts/reference-cache.md)


def main() -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    results = []
    for case in json.load(sys.stdin):
        args = ServerArgs(model_path="dummy", mamba_radix_cache_strategy=case["strategy"],
                          disable_overlap_schedule=not case["overlap"], disable_radix_cache=not case["radix"])
        set_global_server_args_for_scheduler(args)
        try:
            results.append(KVCacheConfigurator._calculate_mamba_ratio(types.SimpleNamespace(server_args=args)))
        except AssertionError as exc:
            results.append({"refused": str(exc)})
    out.write(json.dumps({"version": importlib.metadata.version("sglang"), "results": results}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()

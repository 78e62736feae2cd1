"""Run in the TokenSpeed parser env: which TP sizes one release's own attention check takes for each head count.

stdin (JSON): {"heads": {name: [num_attention_heads, num_key_value_heads]}, "tps": [int]}. Each pair goes through
the release's ``tokenspeed.runtime.models.utils.validate_attention_partition`` (what its Qwen3.5 and Nemotron-H
attention layers call before they build a projection). stdout (one line): {name: {tp: "ok" | its ValueError}}.
"""

import json
import sys

from tokenspeed.runtime.models.utils import validate_attention_partition

given = json.load(sys.stdin)
out: dict[str, dict[str, str]] = {}
for name, (heads, kv_heads) in given["heads"].items():
    out[name] = {}
    for tp in given["tps"]:
        try:
            validate_attention_partition(heads, kv_heads, tp)
            out[name][str(tp)] = "ok"
        except ValueError as exc:
            out[name][str(tp)] = str(exc)
print(json.dumps(out))

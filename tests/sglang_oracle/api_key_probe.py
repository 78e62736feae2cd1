"""Run in an SGLang release's venv: its own ``decide_request_auth`` (sglang/srt/utils/auth.py, the function its
API-key middleware calls for every request) over the cases read as one JSON list on stdin; prints one JSON list of
``[allowed, status]``, one per case. The module imports nothing of SGLang's server (no torch, no uvicorn).

    case: {"method", "path", "authorization" (or null), "api_key", "admin_api_key", "level" (an AuthLevel value)}
"""

from __future__ import annotations

import json
import sys

from sglang.srt.utils.auth import AuthLevel, decide_request_auth


def main() -> None:
    out = []
    for case in json.loads(sys.stdin.read()):
        decision = decide_request_auth(method=case["method"], path=case["path"],
                                       authorization_header=case["authorization"], api_key=case["api_key"] or None,
                                       admin_api_key=case["admin_api_key"] or None, auth_level=AuthLevel(case["level"]))
        out.append([decision.allowed, decision.error_status_code])
    print(json.dumps(out))


if __name__ == "__main__":
    main()

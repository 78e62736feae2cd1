"""Run in a SGLang release's venv: the context length the release derives from each model's config.json, and the
one its own parser reads from a command line (tests/sglang_oracle/test_sglang_context_length.py).

stdin (JSON): {"configs": {name: config.json}, "argv": [flags after --model-path]}. The derivation is the release's
``get_context_length`` on the text config (``text_config`` for Qwen3.5), which ``ModelConfig._derive_context_length``
takes when no ``--context-length`` is given (0.5.23 configs/model_config.py); the parse is ``ServerArgs.add_cli_args``'s
parser, the one ``launch_server`` builds. stdout: {"version", "derived": {name: tokens}, "parsed": context_length}.
"""

import argparse
import json
import sys
import types

import sglang
from sglang.srt.server_args import ServerArgs

try:
    from sglang.srt.utils.hf_transformers.common import get_context_length  # 0.5.23
except ImportError:
    from sglang.srt.utils.hf_transformers_utils import get_context_length  # 0.5.9, 0.5.16

given = json.load(sys.stdin)
derived = {name: get_context_length(types.SimpleNamespace(**cfg.get("text_config", cfg)))
           for name, cfg in given["configs"].items()}
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
parsed = parser.parse_args(["--model-path", "m", *given["argv"]]).context_length
print(json.dumps({"version": sglang.__version__, "derived": derived, "parsed": parsed}))

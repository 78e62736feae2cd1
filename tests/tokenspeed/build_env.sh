#!/usr/bin/env bash
# Build what the TokenSpeed tier (tests/tokenspeed, marker `tokenspeed`) runs: both releases' own argument parsers.
#
#   bash tests/tokenspeed/build_env.sh
#
# In ${HYBRIDBENCH_TOKENSPEED_HOME:-~/.cache/hybridbench}, OUTSIDE the repo, reused when present:
#   tokenspeed-0.1.0/, tokenspeed-0.1.1/  tokenspeed (pure Python) + the smg gateway it pins, --no-deps --target:
#                                         the engine's ServerArgs parser, `ts serve`'s splitter, smg's RouterArgs
#   tokenspeed-parsers/                   a venv with what importing those parsers needs, installed --no-deps
#                                         from requirements.lock beside this script (every package, exact; CPU
#                                         torch from the machine's local wheel); rebuilt when the lock changes.
#                                         TokenSpeed's GPU kernel packages are stubbed at run time
#                                         (tests/tokenspeed/kernel_stub), never installed
# Nothing is served: TokenSpeed needs a GPU. Wheels only; no model.
set -euo pipefail

HOME_DIR="${HYBRIDBENCH_TOKENSPEED_HOME:-$HOME/.cache/hybridbench}"
VENV="$HOME_DIR/tokenspeed-parsers"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK="$HERE/requirements.lock"
REV=2  # bump when what this script does to the venv changes
STAMP="$( { echo "tokenspeed-parsers rev$REV"; cat "$LOCK"; } | sha256sum | cut -c1-16)"
mkdir -p "$HOME_DIR"

if [ -f "$VENV/.hybridbench-stamp" ] && [ "$(cat "$VENV/.hybridbench-stamp")" = "$STAMP" ]; then
  echo "tokenspeed: reusing $VENV"
else
  start=$(date +%s)
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$LOCK"
  echo "$STAMP" > "$VENV/.hybridbench-stamp"
  echo "tokenspeed: built $VENV in $(( $(date +%s) - start )) s"
fi

# tokenspeed release -> the smg gateway it pins (its METADATA: tokenspeed-smg==...)
for pair in "0.1.0 1.8.0.post20260720" "0.1.1 1.10.1.post20260920"; do
  read -r version smg <<<"$pair"
  dir="$HOME_DIR/tokenspeed-$version"
  if [ "$(cat "$dir/.hybridbench-stamp" 2>/dev/null)" != "tokenspeed==$version tokenspeed-smg==$smg" ]; then
    rm -rf "$dir"
    "$VENV/bin/pip" install -q --no-deps --target "$dir" "tokenspeed==$version" "tokenspeed-smg==$smg"
    echo "tokenspeed==$version tokenspeed-smg==$smg" > "$dir/.hybridbench-stamp"
    echo "tokenspeed: unpacked tokenspeed $version and smg $smg in $dir"
  fi
done

# The hit-length oracle (test_scheduler_oracle.py): tokenspeed-scheduler 0.1.0, the only PyPI build with the
# radix-era hybrid cache of PR #162 (nanobind C++, numpy only: the parser venv's numpy serves), --no-deps --target.
dir="$HOME_DIR/tokenspeed-scheduler-0.1.0"
if [ ! -f "$dir/.hybridbench-stamp" ]; then
  rm -rf "$dir"
  "$VENV/bin/pip" install -q --no-deps --target "$dir" "tokenspeed-scheduler==0.1.0"
  echo "tokenspeed-scheduler==0.1.0" > "$dir/.hybridbench-stamp"
  echo "tokenspeed: unpacked tokenspeed-scheduler 0.1.0 in $dir"
fi

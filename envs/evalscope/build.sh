#!/usr/bin/env bash
# Build the evalscope virtualenv the accuracy probe calls (python -m hybridbench +experiment=accuracy).
#
#   bash envs/evalscope/build.sh        # prints the env's python on its last line
#
# The env lives OUTSIDE the repo, in ${HYBRIDBENCH_EVALSCOPE_HOME:-~/.cache/hybridbench}/evalscope-1.14.1,
# because evalscope pulls ~1.2 GB (modelscope, datasets, transformers, nltk, ...) that the harness never
# imports: the probe runs envs/evalscope/run_task.py with this env's python as a subprocess.
# Idempotent: an env whose stamp matches requirements.txt (and that still imports evalscope) is reused;
# a missing, partial or stale one is deleted and rebuilt. Everything installs with --no-deps from the
# exact pin list beside this script, so pip resolves nothing and can never pull a CUDA torch.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
HOME_DIR="${HYBRIDBENCH_EVALSCOPE_HOME:-$HOME/.cache/hybridbench}"
ENV="$HOME_DIR/evalscope-1.14.1"
STAMP="$(sha256sum "$HERE/requirements.txt" | cut -c1-16)"

if [ -f "$ENV/.hybridbench-stamp" ] && [ "$(cat "$ENV/.hybridbench-stamp")" = "$STAMP" ] \
    && "$ENV/bin/python" -c 'import evalscope' >/dev/null 2>&1; then
  echo "$ENV/bin/python"
  exit 0
fi
rm -rf "$ENV"
mkdir -p "$HOME_DIR"
start=$(date +%s)
python3 -m venv "$ENV"
"$ENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$HERE/requirements.txt"
"$ENV/bin/python" -c 'import evalscope' >/dev/null
echo "$STAMP" >"$ENV/.hybridbench-stamp"
echo "evalscope env built in $(( $(date +%s) - start )) s" >&2
echo "$ENV/bin/python"

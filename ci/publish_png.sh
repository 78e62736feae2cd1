#!/usr/bin/env bash
# Commit one PNG to the assets branch of a repository and print an https URL pinned to that commit.
# Why: a job summary ($GITHUB_STEP_SUMMARY) or PR comment shows an image only from an https URL — GitHub strips
# data: URIs and cannot reach a file on the runner; an artifact is a zip behind a login. A commit's raw URL
# (raw.githubusercontent.com) displays for a public repository; for a private one it does not, and the summary
# falls back to naming the artifact (python -m hybridbench.dashboard.pr_summary without --png-url).
# Usage: publish_png.sh PNG DEST_PATH REMOTE URL_BASE   (prints URL_BASE/<commit>/DEST_PATH)
# Env: ASSETS_BRANCH (default hybridbench-assets). Retries when another job pushed first.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: publish_png.sh PNG DEST_PATH REMOTE URL_BASE" >&2; exit 2; }
png=$1 dest=$2 remote=$3 base=$4
branch=${ASSETS_BRANCH:-hybridbench-assets}
[ -f "$png" ] || { echo "publish_png.sh: $png does not exist" >&2; exit 2; }
png=$(realpath "$png")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$work" init -q
# The remote (it may carry a token) is passed to each command, never written to .git/config.
for attempt in 1 2 3; do
  if git -C "$work" fetch -q --depth=1 "$remote" "refs/heads/$branch" 2>/dev/null; then
    git -C "$work" checkout -q -B "$branch" FETCH_HEAD
  else  # first use: the branch does not exist yet
    git -C "$work" symbolic-ref HEAD "refs/heads/$branch"
  fi
  mkdir -p "$work/$(dirname "$dest")"
  cp "$png" "$work/$dest"
  git -C "$work" add "$dest"
  git -C "$work" -c user.name=hybridbench -c user.email=hybridbench@users.noreply.github.com \
    commit -q -m "hybridbench: $dest"
  if git -C "$work" push -q "$remote" "HEAD:refs/heads/$branch" 2>/dev/null; then
    echo "$base/$(git -C "$work" rev-parse HEAD)/$dest"
    exit 0
  fi
  sleep $((attempt * 3))  # another job pushed first: start again from its commit
done
echo "publish_png.sh: could not push to $branch" >&2
exit 1

#!/usr/bin/env bash
# Debian's Chromium for the dashboard's browser tests (Playwright drives it with executable_path; it never
# downloads a browser). Idempotent: does nothing when /usr/bin/chromium is there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "error: Chromium is missing; as root: apt-get update && apt-get install -y chromium" >&2
  exit 2
fi
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null

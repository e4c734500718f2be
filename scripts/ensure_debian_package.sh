#!/usr/bin/env bash
# Make sure Debian's Chromium is installed for the browser test (tests/test_site.py).
# Idempotent: does nothing when it is there; installs it with apt-get when run as root;
# otherwise stops with the command to run.
set -euo pipefail
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: installing Debian's chromium for the browser test"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q chromium
  exit 0
fi
echo "ensure_chromium: the browser test needs Chromium at $CHROMIUM." >&2
echo "  Install it (Debian/Ubuntu): sudo apt-get install chromium   -- then run make test again." >&2
exit 1

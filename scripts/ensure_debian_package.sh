#!/usr/bin/env bash
# Make sure a Debian package's program is installed:
#   bash scripts/ensure_debian_package.sh PACKAGE PROGRAM "what needs it"
# Used for chromium (/usr/bin/chromium: the browser test, tests/test_site.py) and
# bubblewrap (/usr/bin/bwrap: the grader's sandbox, scripts/grade.py).
# Idempotent: does nothing when PROGRAM is there; installs PACKAGE with apt-get when run
# as root; otherwise stops with the command to run.
set -euo pipefail
PACKAGE="$1"
PROGRAM="$2"
WHY="$3"
if [ -x "$PROGRAM" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure_debian_package: installing Debian's $PACKAGE for $WHY"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "$PACKAGE"
  exit 0
fi
echo "ensure_debian_package: $WHY needs $PROGRAM (Debian package $PACKAGE)." >&2
echo "  Install it (Debian/Ubuntu): sudo apt-get install $PACKAGE   -- then run the command again." >&2
exit 1

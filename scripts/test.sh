#!/usr/bin/env bash
# The test command: set-up (idempotent), lint, then the whole pytest suite (unit + integration).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/vtrace_test.py -x`.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
bash scripts/setup.sh
VENV_DIR="${IMPALA_VENV_DIR:-$REPO_DIR/.venv}"
echo "[test] ruff check + format check"
"$VENV_DIR/bin/ruff" check .
"$VENV_DIR/bin/ruff" format --check .
echo "[test] pytest"
exec "$VENV_DIR/bin/python" -m pytest "$@"

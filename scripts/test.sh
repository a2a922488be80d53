#!/usr/bin/env bash
# The test command: set-up (idempotent), lint, then the whole pytest suite (unit + integration).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/vtrace_test.py -x`.
# Two pytest workers (IMPALA_TEST_WORKERS), a test file each at a time (--dist loadfile, so that
# a module's shared fixture, e.g. one training run, is made once): many tests spend their time
# waiting on processes they started. The 15 slowest tests are listed at the end.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
bash scripts/setup.sh
VENV_DIR="${IMPALA_VENV_DIR:-$REPO_DIR/.venv}"
echo "[test] ruff check + format check"
"$VENV_DIR/bin/ruff" check .
"$VENV_DIR/bin/ruff" format --check .
echo "[test] pytest"
exec "$VENV_DIR/bin/python" -m pytest -n "${IMPALA_TEST_WORKERS:-2}" --dist loadfile \
  --durations=15 "$@"

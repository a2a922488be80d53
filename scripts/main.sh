#!/usr/bin/env bash
# The main job: set-up (idempotent), then a real multi-learner, multi-actor training run started
# by the frontend from sandbox/local_workers_example.csv (2 learners under one mpirun, 3 actors,
# an evaluator, all on this host) on the default environment (Pong). Extra arguments go to the
# frontend, e.g. `bash scripts/main.sh --total_environment_frames=2000000`; `--stop` tears the
# run down (without the set-up once the virtualenv exists: stopping needs nothing new).
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
VENV_DIR="${IMPALA_VENV_DIR:-$REPO_DIR/.venv}"
stopping=false
for arg in "$@"; do
  if [ "$arg" = "--stop" ]; then
    stopping=true
  fi
done
if ! { "$stopping" && [ -x "$VENV_DIR/bin/python" ]; }; then
  bash scripts/setup.sh
fi
exec "$VENV_DIR/bin/python" run_experiment_mm_raw.py \
  --workers_csv_path=sandbox/local_workers_example.csv --follow "$@"

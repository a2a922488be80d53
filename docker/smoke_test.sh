#!/usr/bin/env bash
# The image's smoke test, run inside the image: docker/build_and_smoke.sh runs it chrooted into
# the mounted image; with Docker: `docker run --rm IMAGE bash docker/smoke_test.sh`.
#   1. the install's self-check: horovod.tensorflow built with MPI and Gloo, mpirun, ALE Pong;
#   2. a 2-rank Horovod allreduce under mpirun;
#   3. one learner and one actor train CartPole for 10 learner steps, on loopback, free ports;
#   4. the frontend plans a run of the example workers CSV (--dry_run: starts nothing).
# Prints "[smoke HH:MM:SS] PASSED" last on success; otherwise exits non-zero naming the part.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export TF_CPP_MIN_LOG_LEVEL=2

say() { echo "[smoke $(date +%H:%M:%S)] $*"; }
fail() {
  echo "[smoke] FAILED: $*" >&2
  exit 1
}

# wait_for PID NAME: NAME's exit status must be 0; its log is WORK_DIR/NAME.log.
wait_for() {
  local status=0
  wait "$1" || status=$?
  if [ "$status" -ne 0 ]; then
    tail -30 "$WORK_DIR/$2.log"
    fail "$2 exited with status $status (124: still running after 300 s)"
  fi
}

WORK_DIR="$(mktemp -d)"
trap 'jobs -p | xargs -r kill -9 2>/dev/null; rm -rf "$WORK_DIR"' EXIT

say "1/4 self-check"
python -m selfcheck || fail "self-check"

say "2/4 Horovod allreduce, 2 ranks under mpirun"
ALLREDUCE='
import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
total = float(hvd.allreduce(tf.constant([hvd.rank() + 1.0]), op=hvd.Sum)[0])
assert hvd.size() == 2 and total == 3.0, (hvd.size(), total)
print(f"rank {hvd.rank()} of {hvd.size()}: allreduce sum {total}")
'
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 python -c "$ALLREDUCE" \
  > "$WORK_DIR/mpirun.log" 2>&1 || { cat "$WORK_DIR/mpirun.log"; fail "mpirun allreduce"; }
# -o: the two ranks' lines may interleave in the shared log.
grep -o "rank [0-9] of [0-9]: allreduce sum [0-9.]*" "$WORK_DIR/mpirun.log" > "$WORK_DIR/sums"
cat "$WORK_DIR/sums"
[ "$(grep -c 'sum 3.0$' "$WORK_DIR/sums")" -eq 2 ] || fail "not both ranks got the sum 3.0"

# 10 learner steps: batches of 4 unrolls of 20 CartPole steps (action repeat 1) = 80 frames.
say "3/4 CartPole: 1 learner + 1 actor, 800 environment frames"
read -r LEARNER_PORT ACTOR_PORT < <(
  python -c 'from tools.local_cluster import free_ports; print(*free_ports(2))'
)
FLAGS=(
  --learner_host="127.0.0.1:$LEARNER_PORT" --actor_hosts="127.0.0.1:$ACTOR_PORT"
  --level_name=CartPole-v1 --agent_name=MLPAgent --total_environment_frames=800
  --batch_size=4 --unroll_length=20 --num_envs_per_actor=4 --log_secs=1
  --batch_timeout_secs=120 --learner_wait_secs=120 --logdir="$WORK_DIR/logdir"
)
timeout 300 python experiment.py --job_name=learner "${FLAGS[@]}" > "$WORK_DIR/learner.log" 2>&1 &
LEARNER_PID=$!
timeout 300 python experiment.py --job_name=actor --task=0 "${FLAGS[@]}" \
  > "$WORK_DIR/actor.log" 2>&1 &
ACTOR_PID=$!
wait_for "$LEARNER_PID" learner
wait_for "$ACTOR_PID" actor
grep -m1 "frames/s" "$WORK_DIR/learner.log" || fail "no learner progress line"
grep "stopped at" "$WORK_DIR/learner.log"
grep -q "(frame budget reached)" "$WORK_DIR/learner.log" || fail "learner did not reach its budget"
grep "learner finished training; exiting" "$WORK_DIR/actor.log" || fail "actor did not finish"

say "4/4 frontend: run_experiment_mm_raw.py --dry_run with sandbox/local_workers_example.csv"
python run_experiment_mm_raw.py --workers_csv_path=sandbox/local_workers_example.csv \
  --logdir="$WORK_DIR/frontend" --dry_run > "$WORK_DIR/frontend.log" 2>&1 \
  || { cat "$WORK_DIR/frontend.log"; fail "frontend dry run"; }
grep "Dry run: nothing started." "$WORK_DIR/frontend.log" || fail "frontend printed no plan"
say "PASSED"

"""--launcher=slurm end to end, through a real slurmctld and slurmd (tests/slurm_cluster.py):
the frontend submits the run with sbatch and follows it; a job of two learners (one MPMD mpirun
inside the job), an actor each and an evaluator trains CartPole to its budget, the learners in
step; --stop cancels a job of one learner and two actors and nothing of it is left.

What this shape learns is judged without Slurm, on the same learners and settings
(tests/horovod_test.py): here the job's wiring is, with a short budget."""

import re
import signal
import sys

import pytest

from tests import slurm_cluster
from tests.frontend_runs import FRONTEND, log_text, run_id_of, wait_until
from tests.training_settings import CARTPOLE, CARTPOLE_LEARNING, STOPPED
from tools import summary_reader
from tools.local_cluster import run_processes

pytestmark = pytest.mark.slow

TRAINING_TIMEOUT_SECS = 720  # Within pytest's --timeout of 900 s, to fail with the log.
BUDGET = 40_000  # frames: several checkpoints and progress lines of both learners


@pytest.fixture(scope="module")
def cluster():
    yield from slurm_cluster.cluster_for_a_fixture()


def frontend_argv(logdir, *args):
    return [sys.executable, FRONTEND, "--launcher=slurm", f"--logdir={logdir}", *args]


def check_gone(cluster, logdir, run_id):
    """No job in the queue, no process of the run, no run-state file."""
    assert cluster.queue() == ""
    wait_until(lambda: run_processes(run_id) == [], 30, "the run's processes to end")
    assert not (logdir / "launch" / "run_state.json").exists()


def test_a_slurm_job_trains_cartpole_to_its_budget(cluster, start, tmp_path):
    logdir = tmp_path / "logdir"
    frontend = start(
        frontend_argv(
            logdir,
            "--slurm_learners=2",
            "--slurm_actors_per_learner=1",
            "--slurm_evaluators=1",
            "--follow",
            *CARTPOLE_LEARNING,
            f"--total_environment_frames={BUDGET}",
            f"--eval_interval_frames={2 * BUDGET}",  # the final parameters' evaluation only
            "--eval_games=5",
        ),
        "frontend",
        env=cluster.env,
    )
    assert frontend.wait(timeout=TRAINING_TIMEOUT_SECS) == 0, frontend.log()[-5000:]
    out = frontend.log()
    job_id = re.search(r"started: Slurm job (\d+)", out).group(1)
    assert f"Slurm job {job_id}: RUNNING" in out
    assert re.search(r"\] frames \d+ \(.*\| return", out), out[-3000:]  # the learner's progress
    assert f"Slurm job {job_id} ended: COMPLETED 0:0." in out
    assert summary_reader.episode_returns(logdir, "CartPole-v1"), "no game in the summaries"
    for name in ("actor-0-0", "actor-1-0"):
        assert "learner finished training; exiting" in log_text(logdir, name)
    assert "evaluated the final parameters; exiting" in log_text(logdir, "evaluator-0")
    # The training flags reached both ranks, which summed their gradients to the same weights.
    stops = []
    for name in ("learner-0", "learner-1"):
        learner_log = log_text(logdir, name)
        assert f"training from 0 to {BUDGET} environment frames" in learner_log, learner_log
        stops += STOPPED.findall(learner_log)
    assert len(stops) == 2, stops
    (rank0, frames0, why0, *_, digest0), (rank1, frames1, why1, *_, digest1) = stops
    assert {rank0, rank1} == {"0", "1"} and frames0 == frames1 and int(frames0) >= BUDGET, stops
    assert why0 == why1 == "frame budget reached" and digest0 == digest1, stops
    job_log = (logdir / "launch" / f"slurm-{job_id}.out").read_text()
    assert "the learners' mpirun exited with status 0" in job_log
    check_gone(cluster, logdir, run_id_of(out))


def test_stop_cancels_a_job_and_leaves_nothing(cluster, start, tmp_path):
    """One learner with two actors; a killed actor's srun step is started again; --stop then
    ends the job and every process of it, which --watch saw running."""
    logdir = tmp_path / "logdir"
    args = ["--restart_backoff_secs=1"]  # --slurm_learners=1, --slurm_actors_per_learner=2
    submit = start(
        frontend_argv(logdir, *args, *CARTPOLE, "--total_environment_frames=100000000"),
        "submit",
        env=cluster.env,
    )
    assert submit.wait(timeout=60) == 0, submit.log()
    run_id = run_id_of(submit.log())
    wait_until(lambda: "serving actors" in log_text(logdir, "mpirun"), 300, "the learner")
    watch = start(frontend_argv(logdir, "--watch"), "watch", env=cluster.env)
    actor = next(p for p in run_processes(run_id) if "--job_name=actor" in p.cmdline())
    actor.send_signal(signal.SIGKILL)
    job_log = next((logdir / "launch").glob("slurm-*.out"))
    wait_until(lambda: "restarting actor-" in job_log.read_text(), 60, "the actor's restart")
    stop = start(frontend_argv(logdir, "--stop"), "stop", env=cluster.env)
    assert stop.wait(timeout=180) == 0, stop.log()
    assert "cancelled, gone from the queue" in stop.log()
    check_gone(cluster, logdir, run_id)
    assert watch.wait(timeout=60) == 1, watch.log()  # The job did not complete.
    assert re.search(r"Slurm job \d+: RUNNING", watch.log()), watch.log()
    assert re.search(r"\[learner 0 [\d:]+\] .*serving actors", watch.log()), watch.log()
    assert re.search(r"Slurm job \d+ ended: CANCELLED", watch.log()), watch.log()

"""--launcher=slurm end to end, through a real slurmctld and slurmd (tests/slurm_cluster.py):
the frontend submits the run with sbatch and follows it; the job trains CartPole; --stop
cancels a job of two learners and nothing of it is left."""

import re
import signal
import sys

import numpy as np
import pytest

from tests import slurm_cluster
from tests.frontend_runs import FRONTEND, log_text, run_id_of, wait_until
from tests.training_settings import CARTPOLE_ADAM
from tools import summary_reader
from tools.local_cluster import run_processes

pytestmark = pytest.mark.slow

BUDGET = 400_000  # frames: learnt by 1 learner + 2 actors (tests/training_settings.py)
TRAINING_TIMEOUT_SECS = 720  # Within pytest's --timeout of 900 s, to fail with the log.


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


def test_a_slurm_job_trains_cartpole_to_the_bar(cluster, start, tmp_path):
    logdir = tmp_path / "logdir"
    frontend = start(
        frontend_argv(
            logdir,
            "--slurm_evaluators=1",
            "--follow",
            *CARTPOLE_ADAM,
            f"--total_environment_frames={BUDGET}",
            "--eval_interval_frames=200000",
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
    returns = [r for _, r in summary_reader.episode_returns(logdir, "CartPole-v1")]
    assert np.mean(returns[-20:]) > 150, returns[-40:]
    for name in ("actor-0-0", "actor-0-1"):
        assert "learner finished training; exiting" in log_text(logdir, name)
    assert "evaluated the final parameters; exiting" in log_text(logdir, "evaluator-0")
    assert "stopped at" in log_text(logdir, "learner-0")
    job_log = (logdir / "launch" / f"slurm-{job_id}.out").read_text()
    assert "the learners' mpirun exited with status 0" in job_log
    check_gone(cluster, logdir, run_id_of(out))


def test_stop_cancels_a_job_of_two_learners_and_leaves_nothing(cluster, start, tmp_path):
    """Two learners (one MPMD mpirun inside the job) with an actor each; a killed actor's srun
    step is started again; --stop then ends the job and every process of it, which --watch
    saw running."""
    logdir = tmp_path / "logdir"
    args = ["--slurm_learners=2", "--slurm_actors_per_learner=1", "--restart_backoff_secs=1"]
    submit = start(
        frontend_argv(logdir, *args, *CARTPOLE_ADAM, "--total_environment_frames=100000000"),
        "submit",
        env=cluster.env,
    )
    assert submit.wait(timeout=60) == 0, submit.log()
    run_id = run_id_of(submit.log())
    wait_until(lambda: log_text(logdir, "mpirun").count("serving actors") == 2, 300, "learners")
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
    assert re.search(r"\[learner 1 [\d:]+\] \[learner rank 1/2\] serving actors", watch.log())
    assert re.search(r"Slurm job \d+ ended: CANCELLED", watch.log()), watch.log()

"""Several learners under one real 2-rank mpirun, averaging gradients with Horovod."""

import os
import re
import sys

import numpy as np
import pytest

import host_tuning
from frontend import launcher
from learner import EXIT_STARVED
from tests.training_settings import (
    CARTPOLE,
    CARTPOLE_TWO_LEARNERS,
    CARTPOLE_TWO_LEARNERS_FRAMES,
    STOPPED,
)
from tools import local_cluster, summary_reader
from tools.local_cluster import cluster_flags

pytestmark = pytest.mark.slow


def start_mpirun(start, sections, name):
    """The learners' mpirun, with this repo importable on every rank (for tests.*)."""
    argv = launcher.mpmd_argv(
        "mpirun",
        os.geteuid() == 0,
        [("localhost", ["-x", "PYTHONPATH", *section]) for section in sections],
    )
    return start(argv, name, env={"PYTHONPATH": str(local_cluster.REPO)})


def test_summed_gradient_is_the_sum_of_local_gradients(start, tmp_path):
    worker = [sys.executable, "-m", "tests.horovod_gradient_worker"]
    ranks = start_mpirun(start, [[*worker, "ranks", str(tmp_path)]] * 2, "mpirun")
    assert ranks.wait(timeout=300) == 0, ranks.log()[-3000:]
    local = start([*worker, "local", str(tmp_path)], "local")
    assert local.wait(timeout=300) == 0, local.log()[-3000:]

    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npz") for r in range(2))
    expected = np.load(tmp_path / "local.npz")
    num_variables = len([k for k in rank0 if k.startswith("weight")])
    assert num_variables > 0
    for i in range(num_variables):
        # The broadcast gave both ranks rank 0's weights; both got the same sum.
        np.testing.assert_array_equal(rank0[f"weight{i}"], rank1[f"weight{i}"])
        np.testing.assert_array_equal(rank0[f"gradient{i}"], rank1[f"gradient{i}"])
        total = expected[f"rank0_gradient{i}"] + expected[f"rank1_gradient{i}"]
        np.testing.assert_allclose(rank0[f"gradient{i}"], total, rtol=1e-5, atol=1e-6)
        # Not trivially equal: the two ranks' own gradients differ.
        assert not np.allclose(expected[f"rank0_gradient{i}"], expected[f"rank1_gradient{i}"])


STEP_CHOICE = re.compile(
    r"rank (\d)/2: batch step .* averaged over the ranks: .*; keeping the (\w+) step"
)


def start_two_worker_sets(start, spawn, flags):
    """Two learners (one mpirun) and one actor process per learner; returns them."""
    worker_sets = [cluster_flags(1), cluster_flags(1)]
    sections = [
        [sys.executable, local_cluster.EXPERIMENT, *cluster, *flags, "--job_name=learner"]
        for cluster in worker_sets
    ]
    learners = start_mpirun(start, sections, "learners")
    actors = [
        spawn([*cluster, *flags, "--job_name=actor", "--task=0"], f"actor_set{i}")
        for i, cluster in enumerate(worker_sets)
    ]
    return learners, actors, worker_sets


def train_two_learners_to_the_budget(start, spawn, flags, timeout):
    """Trains two worker sets to the frame budget; checks both learners stopped for it after
    the same number of steps with bitwise-equal weights; -> {rank: (global frames, own frames,
    steps)} and the learners' log."""
    learners, actors, _ = start_two_worker_sets(start, spawn, flags)
    assert learners.wait(timeout=timeout) == 0, learners.log()[-4000:]
    for actor in actors:
        assert actor.wait(timeout=60) == 0, actor.log()[-3000:]
    stopped = {int(m[0]): m[1:] for m in STOPPED.findall(learners.log())}
    assert sorted(stopped) == [0, 1], learners.log()[-4000:]
    (_, reason0, _, steps0, digest0), (_, reason1, _, steps1, digest1) = stopped[0], stopped[1]
    assert reason0 == reason1 == "frame budget reached"
    assert steps0 == steps1 and int(steps0) > 0
    assert digest0 == digest1, "learners ended with different weights"
    figures = {
        rank: (int(g), int(own), int(steps)) for rank, (g, _, own, steps, _) in stopped.items()
    }
    return figures, learners.log()


def test_two_learners_learn_cartpole_with_identical_weights(start, spawn, tmp_path):
    logdir = tmp_path / "logdir"
    flags = [*CARTPOLE_TWO_LEARNERS, f"--logdir={logdir}"]
    figures, log = train_two_learners_to_the_budget(start, spawn, flags, timeout=900)
    (global0, own0, _), (global1, own1, _) = figures[0], figures[1]
    assert global0 == global1 == own0 + own1 >= CARTPOLE_TWO_LEARNERS_FRAMES
    # --xla=auto: both ranks timed both steps and keep the same one (bitwise-equal weights
    # say so too: the XLA and the plain step round differently).
    choices = dict(STEP_CHOICE.findall(log))
    assert sorted(choices) == ["0", "1"] and choices["0"] == choices["1"], log[-4000:]
    returns = [r for _, r in summary_reader.episode_returns(logdir, "CartPole-v1")]
    assert np.mean(returns[-20:]) > 150, returns[-40:]


def test_two_learners_step_together_on_minibatches_of_replayed_batches(start, spawn, tmp_path):
    """--minibatch_unrolls with replay: each learner's batch (4 on-policy + 4 replayed unrolls once
    the memory fills) is trained in 3 uneven minibatches (its share of 6 unrolls: 3, 3 and 2),
    one summed step each. Both ranks must take the same steps (a rank with one more allreduce
    than the other would hang) and end with the same weights, the same input statistics
    (--normalize_input: each rank folds in the moments of both ranks' fresh frames) and the same
    value-target statistics (--normalize_value_loss: those of both ranks' batches) and the
    PopArt value head that follows them (--popart), a separate value torso included."""
    flags = [
        *CARTPOLE,
        "--normalize_input",
        "--normalize_value_loss",
        "--popart",
        "--separate_value_torso",
        "--batch_size=4",
        "--replay_size=40",
        "--replay_ratio=1",
        "--minibatch_unrolls=6",
        f"--logdir={tmp_path / 'logdir'}",
        "--total_environment_frames=40000",
    ]
    figures, log = train_two_learners_to_the_budget(start, spawn, flags, timeout=600)
    assert figures[0][2] > 10  # learner steps
    assert "learner: replay memory full: 40 unrolls (" in log  # batches held replayed unrolls
    # Both ranks on this host: each ran on a share of its cores of its own (--pin_learners).
    cores = sorted(os.sched_getaffinity(0))
    pinned = sorted(re.findall(r"learner host tuning: [^|]*\| cores \[([\d, ]*)\] of", log))
    shares = sorted(", ".join(map(str, host_tuning.learner_cores(cores, r, 2))) for r in (0, 1))
    assert pinned == (shares if len(cores) >= 2 else []), log[-4000:]


def test_a_learner_whose_actors_die_stops_all_learners_cleanly(start, spawn, tmp_path):
    logdir = tmp_path / "logdir"
    flags = [*CARTPOLE, f"--logdir={logdir}", "--total_environment_frames=100000000"]
    flags.append("--batch_timeout_secs=15")
    learners, actors, worker_sets = start_two_worker_sets(start, spawn, flags)
    learners.wait_for_log("] frames", timeout=300)  # rank 0's progress: both ranks train
    actors[1].kill()
    # Bounded: the batch timeout plus a final checkpoint and the finish grace period.
    assert learners.wait(timeout=120) == EXIT_STARVED
    # The surviving actor is not told training finished (its learners stopped short of their
    # budget): it waits --learner_wait_secs for their return, then gives up
    # (tests/learner_stop_test.py shows that end).
    assert "learner finished training" not in actors[0].log()
    log = learners.log()
    dead_actor = worker_sets[1][1].split("=", 1)[1]
    assert f"[learner rank 1/2] no batch of 16 unrolls from actors {dead_actor} in 15 s" in log
    assert "[learner rank 0/2] another learner got no data from its actors in 15 s" in log
    assert "saved checkpoint" in log

"""--launcher=slurm without a cluster: the batch script --dry_run prints, the flags refused
before anything is submitted, how the job's workers are placed from Slurm's variables and when
a failed step is restarted (tests/slurm_training_test.py runs jobs through a real slurmctld)."""

import types

import pytest

import exit_codes
from frontend import slurm_hosts, slurm_job, supervisor
from tests.frontend_runs import frontend


def test_dry_run_prints_a_het_job_with_gpu_learners_and_cpu_actors(tmp_path):
    logdir = tmp_path / "logdir"
    code, out, err = frontend(
        "--launcher=slurm",
        f"--logdir={logdir}",
        "--level_name=CartPole-v1",
        "--slurm_learners=2",
        "--slurm_actors_per_learner=3",
        "--slurm_evaluators=1",
        "--slurm_hetjob",
        "--slurm_gpus_per_learner=1",
        "--slurm_cpus_per_learner=8",
        "--slurm_partition=cpu",
        "--slurm_learner_partition=gpu",
        "--slurm_time_limit=1-12",
        "--slurm_account=rl",
        "--slurm_sbatch=--mem=16G",
        "--dry_run",
    )
    assert code == 0, out + err
    components = out.split("#SBATCH hetjob\n")
    assert len(components) == 3, out
    learners, actors, evaluators = components
    assert "#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=8\n#SBATCH --gpus-per-task=1\n" in learners
    assert "#SBATCH --partition=gpu\n#SBATCH --time=1-12\n#SBATCH --account=rl\n" in learners
    assert "#SBATCH --mem=16G\n" in learners
    assert actors.startswith("#SBATCH --ntasks=6\n#SBATCH --cpus-per-task=1\n")
    assert "#SBATCH --partition=cpu\n" in actors and "gpus" not in actors
    assert evaluators.startswith("#SBATCH --ntasks=1\n")
    assert "-m frontend.slurm_job \\\n    --launch_dir=" in out and "--hetjob \\\n" in out
    assert "--level_name=CartPole-v1" in out
    assert "Dry run: nothing submitted." in out
    assert not logdir.exists()


@pytest.mark.parametrize(
    "args, named",
    [
        (["--slurm_learners=1", "--slurm_evaluators=2"], "--slurm_evaluators"),
        (["--slurm_gpus_per_learner=1"], "--slurm_gpus_per_learner"),
        (["--slurm_time_limit=two hours"], "--slurm_time_limit"),
        (["--slurm_sbatch=mem=16G"], "--slurm_sbatch"),
        (["--slurm_actors_per_learner=0"], "slurm_actors_per_learner"),
        (["--workers_csv_path=sandbox/local_workers_example.csv"], "--workers_csv_path"),
        (["--slurm_learners=3", "--minibatch_unrolls=4"], "--minibatch_unrolls"),
    ],
)
def test_bad_flags_are_refused_by_name_before_submitting(tmp_path, args, named):
    logdir = tmp_path / "logdir"
    code, out, err = frontend(
        "--launcher=slurm", f"--logdir={logdir}", "--level_name=CartPole-v1", *args
    )
    assert code == 2, out + err
    assert named in out + err
    assert not logdir.exists()


def test_slurm_flags_are_refused_with_the_csv_launcher(tmp_path):
    code, out, err = frontend(f"--logdir={tmp_path}", "--slurm_learners=2", "--dry_run")
    assert code == 2, out + err
    assert "--slurm_learners needs --launcher=slurm" in err


def test_tasks_fill_the_nodes_in_order(monkeypatch):
    assert slurm_hosts.tasks_per_node("2(x2),1") == [2, 2, 1]
    nodes = {"cpu[1-3]": ["cpu1", "cpu2", "cpu3"], "gpu7": ["gpu7"]}
    monkeypatch.setattr(slurm_hosts, "expand_nodelist", nodes.__getitem__)
    environ = {"SLURM_JOB_NODELIST": "cpu[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    assert slurm_hosts.task_hosts(environ) == ["cpu1", "cpu1", "cpu2", "cpu2", "cpu3"]
    with pytest.raises(slurm_hosts.SlurmEnvironmentError, match="SLURM_JOB_NODELIST_HET_GROUP_0"):
        slurm_hosts.task_hosts(environ, group=0)


def test_neighbouring_jobs_get_disjoint_ports():
    first = [slurm_hosts.first_port({"SLURM_JOB_ID": str(job)}, 5) for job in (41, 42)]
    assert first[1] - first[0] == 5


def test_worker_sets_of_a_het_job(monkeypatch):
    """Component 0 the learners (each its node's next GPUs), 1 the actors, 2 the evaluator;
    actor k serves learner k % L; one port per worker, in that order."""
    nodes = {"gpu1": ["gpu1"], "cpu[1-2]": ["cpu1", "cpu2"], "cpu3": ["cpu3"]}
    monkeypatch.setattr(slurm_hosts, "expand_nodelist", nodes.__getitem__)
    environ = {"SLURM_JOB_ID": "7"}
    for group, (nodelist, tasks) in enumerate(
        [("gpu1", "2"), ("cpu[1-2]", "2(x2)"), ("cpu3", "1")]
    ):
        environ[f"SLURM_JOB_NODELIST_HET_GROUP_{group}"] = nodelist
        environ[f"SLURM_TASKS_PER_NODE_HET_GROUP_{group}"] = tasks
    args = slurm_job.parse_args(
        [
            *("--launch_dir=/l", "--run_id=r", "--learners=2", "--actors_per_learner=2"),
            *("--evaluators=1", "--cpus=8,1,1", "--gpus_per_learner=2", "--hetjob"),
            *("--", "--level_name=CartPole-v1"),
        ]
    )
    sets = slurm_job.worker_sets(args, environ)
    port = slurm_hosts.first_port(environ, 7)
    assert [ws.learner.host for ws in sets] == [f"gpu1:{port}", f"gpu1:{port + 1}"]
    assert [ws.learner.cuda_visible_devices for ws in sets] == ["0,1", "2,3"]
    assert [[a.host for a in ws.actors] for ws in sets] == [
        [f"cpu1:{port + 2}", f"cpu2:{port + 4}"],
        [f"cpu1:{port + 3}", f"cpu2:{port + 5}"],
    ]
    assert sets[0].evaluator.host == f"cpu3:{port + 6}" and sets[1].evaluator is None
    assert all(a.cuda_visible_devices == "" for ws in sets for a in ws.actors)


def test_a_failed_step_is_restarted_after_a_doubling_backoff_within_its_budget(monkeypatch, capsys):
    """frontend/slurm_job.py's supervision, on a fake clock: the RestartPolicy's backoff and
    budget, as the CSV launcher's supervisor applies them; bad input is never restarted."""
    clock = [100.0]
    monkeypatch.setattr(slurm_job.time, "monotonic", lambda: clock[0])
    policy = supervisor.RestartPolicy(backoff_secs=1, max_restarts=2, window_secs=60)
    step = types.SimpleNamespace(name="actor-0-1", restarts=[], restart_at=None)
    assert slurm_job._schedule_restart(step, 137, policy) and step.restart_at == 101
    assert (
        "actor-0-1 was killed by signal 9 (SIGKILL): restarting it in 1 s"
        in capsys.readouterr().out
    )
    step.restart_at = None  # restarted; fails again
    assert slurm_job._schedule_restart(step, 1, policy) and step.restart_at == 102
    step.restart_at = None
    assert not slurm_job._schedule_restart(step, 1, policy)  # a third failure within 60 s
    clock[0] += 61
    assert slurm_job._schedule_restart(step, 1, policy)  # the window has moved on
    fresh = types.SimpleNamespace(name="evaluator-0", restarts=[], restart_at=None)
    assert not slurm_job._schedule_restart(fresh, exit_codes.EXIT_BAD_INPUT, policy)

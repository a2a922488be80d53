"""--launcher=slurm: the whole run as one Slurm batch job, described by its shape.

The frontend writes one batch script, LOGDIR/launch/slurm.sh, and submits it with sbatch (with
--dry_run it prints it); the job's id goes to the run-state file (frontend/run_state.py), which
--stop (scancel) and --watch read. Inside the job, frontend/slurm_job.py learns the hosts,
writes the cluster files and starts and supervises the workers.

The allocation, from the shape (--slurm_learners L, --slurm_actors_per_learner A,
--slurm_evaluators E):
  - by default, one homogeneous job of L + L*A + E tasks, each with the most CPUs any role asks
    for (a role's srun step then takes exactly its own);
  - --slurm_hetjob: a heterogeneous job, one component per role with its own CPUs (and the
    learners' GPUs), the learners' in --slurm_learner_partition: GPU nodes for the learners,
    CPU nodes for the actors.

The script holds the training flags and the shape, never a credential (the Slurm launcher
takes none); sbatch gives the job the submitting shell's environment, as usual.
"""

import dataclasses
import os
import re
import shlex
import subprocess
import sys
import time

SCRIPT_NAME = "slurm.sh"
# Slurm's --time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or no limit.
TIME_LIMIT = re.compile(r"^(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE)$")


@dataclasses.dataclass(frozen=True)
class Role:
    """One kind of worker in the job: its count, and CPUs and GPUs of each."""

    name: str  # 'learner', 'actor' or 'evaluator': het-job component 0, 1, 2.
    tasks: int
    cpus: int
    gpus: int = 0


@dataclasses.dataclass(frozen=True)
class JobRequest:
    """The job's shape and the Slurm options it is submitted with (the --slurm_* flags)."""

    learners: int
    actors_per_learner: int
    evaluators: int
    cpus_per_learner: int
    cpus_per_actor: int
    cpus_per_evaluator: int
    gpus_per_learner: int
    hetjob: bool
    partition: str  # '' for the cluster's default.
    learner_partition: str  # --slurm_hetjob: the learners' component; '': `partition`.
    time_limit: str  # '' for the partition's default.
    account: str
    sbatch_lines: tuple  # More #SBATCH options, one line each (the first component's).

    @classmethod
    def from_flags(cls, flag_values):
        return cls(
            **{
                field.name: flag_values[f"slurm_{field.name}"].value
                for field in dataclasses.fields(cls)
                if field.name != "sbatch_lines"
            },
            sbatch_lines=tuple(flag_values.slurm_sbatch or ()),
        )

    @property
    def roles(self):
        """The job's Roles, learners first; no evaluator Role when E is 0."""
        roles = [
            Role("learner", self.learners, self.cpus_per_learner, self.gpus_per_learner),
            Role("actor", self.learners * self.actors_per_learner, self.cpus_per_actor),
        ]
        if self.evaluators:
            roles.append(Role("evaluator", self.evaluators, self.cpus_per_evaluator))
        return roles

    @property
    def workers(self):
        return sum(role.tasks for role in self.roles)


def define_flags(flags):
    """The --slurm_* flags on absl's `flags` module, with their checks (absl validators: a bad
    value exits with the flag's name before anything is submitted)."""
    flags.DEFINE_integer("slurm_learners", 1, "--launcher=slurm: learners.", lower_bound=1)
    flags.DEFINE_integer(
        "slurm_actors_per_learner", 2, "--launcher=slurm: actors of each learner.", lower_bound=1
    )
    flags.DEFINE_integer(
        "slurm_evaluators", 0, "--launcher=slurm: evaluators, at most one a learner.", lower_bound=0
    )
    flags.DEFINE_integer(
        "slurm_cpus_per_learner", 1, "--launcher=slurm: CPUs of each learner.", lower_bound=1
    )
    flags.DEFINE_integer(
        "slurm_cpus_per_actor", 1, "--launcher=slurm: CPUs of each actor.", lower_bound=1
    )
    flags.DEFINE_integer(
        "slurm_cpus_per_evaluator", 1, "--launcher=slurm: CPUs of each evaluator.", lower_bound=1
    )
    flags.DEFINE_integer(
        "slurm_gpus_per_learner",
        0,
        "--launcher=slurm --slurm_hetjob: GPUs of each learner (actors and evaluators use none).",
        lower_bound=0,
    )
    flags.DEFINE_bool(
        "slurm_hetjob",
        False,
        "--launcher=slurm: a heterogeneous job, one component per role (each with its own CPUs, "
        "GPUs and partition) instead of one homogeneous job.",
    )
    flags.DEFINE_string("slurm_partition", "", "--launcher=slurm: partition; '': the default.")
    flags.DEFINE_string(
        "slurm_learner_partition",
        "",
        "--launcher=slurm --slurm_hetjob: the learners' partition; '': --slurm_partition.",
    )
    flags.DEFINE_string(
        "slurm_time_limit", "", "--launcher=slurm: sbatch --time (e.g. 2:00:00, 1-12); ''."
    )
    flags.DEFINE_string("slurm_account", "", "--launcher=slurm: sbatch --account; ''.")
    flags.DEFINE_multi_string(
        "slurm_sbatch",
        [],
        "--launcher=slurm: one more #SBATCH line's options (e.g. --mem=16G); repeat for more.",
    )
    _register_checks(flags)


def _register_checks(flags):
    names = [name for name in flags.FLAGS if name.startswith("slurm_")]

    def only_with_the_slurm_launcher(values):
        changed = [name for name in names if values[name] != flags.FLAGS[name].default]
        if changed and values["launcher"] != "slurm":
            raise flags.ValidationError(f"--{changed[0]} needs --launcher=slurm")
        return True

    flags.register_multi_flags_validator(["launcher", *names], only_with_the_slurm_launcher)
    flags.register_validator(
        "slurm_time_limit",
        lambda text: not text or TIME_LIMIT.match(text),
        "--slurm_time_limit: not one of Slurm's formats M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, "
        "UNLIMITED",
    )
    flags.register_validator(
        "slurm_sbatch",
        lambda lines: all(line.startswith("-") and "\n" not in line for line in lines),
        "--slurm_sbatch: each is one line of sbatch options, starting with '-'",
    )
    flags.register_multi_flags_validator(
        ["slurm_evaluators", "slurm_learners"],
        lambda v: v["slurm_evaluators"] <= v["slurm_learners"],
        "--slurm_evaluators: at most one evaluator a learner (--slurm_learners)",
    )
    flags.register_multi_flags_validator(
        ["slurm_gpus_per_learner", "slurm_learner_partition", "slurm_hetjob"],
        lambda v: (
            v["slurm_hetjob"] or not (v["slurm_gpus_per_learner"] or v["slurm_learner_partition"])
        ),
        "--slurm_gpus_per_learner and --slurm_learner_partition need --slurm_hetjob (in one "
        "homogeneous job every task, actors too, would get the learners' GPUs)",
    )


def _components(request):
    """The #SBATCH options of each component: one for a homogeneous job, one a role else."""
    common = [f"--time={request.time_limit}"] * bool(request.time_limit)
    common += [f"--account={request.account}"] * bool(request.account)
    if not request.hetjob:
        cpus = max(role.cpus for role in request.roles)
        partition = [f"--partition={request.partition}"] * bool(request.partition)
        return [[f"--ntasks={request.workers}", f"--cpus-per-task={cpus}", *partition, *common]]
    components = []
    for role in request.roles:
        partition = request.partition
        if role.name == "learner":
            partition = request.learner_partition or partition
        options = [f"--ntasks={role.tasks}", f"--cpus-per-task={role.cpus}"]
        options += [f"--gpus-per-task={role.gpus}"] * bool(role.gpus)
        options += [f"--partition={partition}"] * bool(partition)
        components.append(options + common)
    return components


def job_argv(request, launch_dir, run_id, training_flag_args, options):
    """The in-job command: frontend/slurm_job.py with the shape, then the training flags."""
    policy = options.restart_policy
    argv = [
        sys.executable,
        "-m",
        "frontend.slurm_job",
        f"--launch_dir={launch_dir}",
        f"--run_id={run_id}",
        f"--learners={request.learners}",
        f"--actors_per_learner={request.actors_per_learner}",
        f"--evaluators={request.evaluators}",
        f"--cpus={request.cpus_per_learner},{request.cpus_per_actor},{request.cpus_per_evaluator}",
        f"--gpus_per_learner={request.gpus_per_learner}",
        *["--hetjob"] * request.hetjob,
        f"--restart_backoff_secs={policy.backoff_secs:g}",
        f"--max_restarts={policy.max_restarts}",
        f"--restart_window_secs={policy.window_secs:g}",
        f"--final_evaluation_secs={options.final_evaluation_secs:g}",
        "--",
        *training_flag_args,
    ]
    return argv


def batch_script(request, argv, launch_dir, run_id, repo_dir):
    """The batch script's text: #SBATCH lines (components split by `#SBATCH hetjob`), then
    the in-job command `argv` run from `repo_dir`."""
    lines = [
        "#!/bin/bash",
        f"# Run {run_id}: written by run_experiment_mm_raw.py --launcher=slurm.",
    ]
    for index, options in enumerate(_components(request)):
        if index:
            lines.append("#SBATCH hetjob")
        else:
            options = [
                f"--job-name=impala-{run_id}",
                f"--output={os.path.join(launch_dir, 'slurm-%j.out')}",
                *options,
                *request.sbatch_lines,
            ]
        lines += [f"#SBATCH {option}" for option in options]
    lines.append(f"cd {shlex.quote(repo_dir)} || exit 1")
    # The in-job command, then one argument a line: readable in the script and in --dry_run.
    lines.append(" \\\n    ".join(["exec " + shlex.join(argv[:3]), *map(shlex.quote, argv[3:])]))
    return "\n".join(lines) + "\n"


class SlurmError(RuntimeError):
    """A Slurm command failed (sbatch refused the job, squeue cannot reach slurmctld...): its
    message."""


def submit(script_path):
    """Submits the batch script; returns the job's id. Raises SlurmError with sbatch's
    message if it refuses."""
    result = subprocess.run(
        ["sbatch", "--parsable", script_path], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise SlurmError(f"sbatch refused {script_path}: {result.stderr.strip()}")
    return int(result.stdout.strip().split(";")[0])  # 'ID' or 'ID;CLUSTER'.


def job_state(job_id):
    """The job's state as squeue shows it (PENDING, RUNNING, COMPLETING...; a het job's first
    component's), or '' once it is gone from the queue. Raises SlurmError if squeue fails
    otherwise (slurmctld unreachable): a job not seen is not a job gone."""
    result = subprocess.run(
        ["squeue", "--noheader", f"--jobs={job_id}", "--format=%T %r"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode == 0:
        return result.stdout.split("\n")[0].strip()
    if "Invalid job id" in result.stderr:  # Forgotten (MinJobAge after its end): gone too.
        return ""
    raise SlurmError(f"squeue: {result.stderr.strip()}")


def final_state(job_id):
    """'COMPLETED 0:0' (state and exit code) of an ended job while slurmctld remembers it,
    else ''."""
    result = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", str(job_id)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    fields = dict(f.split("=", 1) for f in result.stdout.split("\n")[0].split() if "=" in f)
    return " ".join(fields[k] for k in ("JobState", "ExitCode") if k in fields)


def cancel(job_id, timeout, say):
    """scancel, then waits (at most `timeout` s) until the job has left the queue: Slurm has
    signalled and reaped every process of it. Returns whether it left."""
    # Its status is not the answer: a job that ended meanwhile makes scancel fail, and is gone.
    subprocess.run(["scancel", str(job_id)], capture_output=True, timeout=60)
    deadline = time.monotonic() + timeout
    while job_state(job_id):
        if time.monotonic() > deadline:
            say(f"Slurm job {job_id} is still {job_state(job_id)} after {timeout:g} s.")
            return False
        time.sleep(1)
    say(f"Slurm job {job_id}: cancelled, gone from the queue.")
    return True

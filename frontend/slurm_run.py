"""The frontend's commands for --launcher=slurm: submit the run's batch job (checked first,
printed with --dry_run), --watch it, --stop it (scancel). Exit codes as frontend/run.py's; a
Slurm command that fails (slurm.SlurmError) ends them, and frontend/run.py says why (exit 1)."""

import os
import signal
import sys
import time

import config as config_lib
import exit_codes
from frontend import preflight, run_state, slurm, supervisor
from frontend.following import LogPrinter

POLL_SECS = 2.0
# The Slurm client commands the launcher runs: submit, watch, stop.
SLURM_COMMANDS = ("sbatch", "squeue", "scancel")
STOP_TIMEOUT_SECS = 120  # scancel's SIGTERM, Slurm's KillWait (30 s by default), SIGKILL, reaping.


def launch_main(console, options, check_level, run_id, entry_point):
    """Checks the input, writes the batch script and submits it (unless --dry_run); with
    --follow, watches the job to its end. Returns the exit code."""
    request = options.slurm
    try:  # refused before anything is written, where the job's learners would each refuse it
        if options.workers_csv_path_given:
            raise config_lib.ConfigError(
                "--workers_csv_path: the Slurm launcher takes the run's shape (--slurm_learners, "
                "--slurm_actors_per_learner, --slurm_evaluators), not host rows"
            )
        config_lib.check_logdir(options.logdir)
        check_level(options.level_name)
        config_lib.learner_minibatch_unrolls(options.minibatch_unrolls, request.learners)
    except config_lib.ConfigError as e:
        console.warn(e)
        return exit_codes.EXIT_BAD_INPUT
    argv = slurm.job_argv(request, options.launch_dir, run_id, options.training_flag_args, options)
    repo_dir = os.path.abspath(options.repo_dir)
    script = slurm.batch_script(request, argv, options.launch_dir, run_id, repo_dir)
    script_path = os.path.join(options.launch_dir, slurm.SCRIPT_NAME)
    _say_plan(request, run_id, script_path, console, options)
    if options.dry_run or options.verbose:
        console.say(script)
    if options.dry_run:
        console.say("Dry run: nothing submitted.")
        return 0
    problems = preflight.problems(
        options.launch_dir, repo_dir, SLURM_COMMANDS, "install Slurm's client commands"
    )
    if problems:
        console.warn("Not submitting: " + "; ".join(problems) + ".")
        return exit_codes.EXIT_BAD_INPUT
    os.makedirs(options.launch_dir, exist_ok=True)
    with open(script_path, "w") as f:
        f.write(script)
    job_id = slurm.submit(script_path)
    state = {"run_id": run_id, "launcher": "slurm", "job_id": job_id, "script": script_path}
    run_state.write(options.launch_dir, state)
    console.say(f"Run {run_id} started: Slurm job {job_id}; logs in {options.launch_dir}.")
    console.say(f"Watch: {sys.executable} {entry_point} --logdir={options.logdir} --watch")
    console.say(f"Stop:  {sys.executable} {entry_point} --logdir={options.logdir} --stop")
    return watch(console, options, state) if options.follow else 0


def _say_plan(request, run_id, script_path, console, options):
    roles = ", ".join(
        f"{role.tasks} {role.name}(s) of {role.cpus} CPU(s)"
        + f" and {role.gpus} GPU(s)" * bool(role.gpus)
        for role in request.roles
    )
    kind = "heterogeneous job" if request.hetjob else "job"
    console.say(f"Run {run_id}: one Slurm {kind} of {roles}; batch script {script_path}.")
    console.say(f"Training flags: {options.defaults_line}.")


def watch(console, options, state):
    """Prints the job's state as it changes and the learners' progress lines, until the job has
    left the queue (the run's state file is then removed) or Ctrl-C. Returns 0 if the job
    completed, or on Ctrl-C (the job goes on); else 1."""
    job_id = state["job_id"]
    printer = LogPrinter(os.path.join(options.launch_dir, "mpirun.log"), console)
    signals = supervisor.Signals((signal.SIGINT,))
    seen = None
    try:
        while signals.received is None:
            current = slurm.job_state(job_id)
            if current != seen:
                console.say(f"Slurm job {job_id}: {current or 'gone from the queue'}")
                seen = current
            printer()
            if not current:
                return _ended(job_id, console, options)
            time.sleep(POLL_SECS)
    finally:
        signals.restore()
    console.say(f"Stopped watching; Slurm job {job_id} goes on (stop it with --stop).")
    return 0


def _ended(job_id, console, options):
    """Says how the ended job ended, forgets the run; 0 if it completed."""
    final = slurm.final_state(job_id)
    console.say(f"Slurm job {job_id} ended: {final or 'state no longer known to slurmctld'}.")
    with run_state.locked(options.launch_dir):
        if run_state.exists(options.launch_dir):
            run_state.remove(options.launch_dir)
    return 0 if final.startswith("COMPLETED") else 1


def stop(console, options, state):
    """--stop: cancels the run's job and waits until Slurm has ended all of it; forgets the run.
    Returns the exit code."""
    with run_state.locked(options.launch_dir):
        job_id = state["job_id"]
        if slurm.job_state(job_id) and not slurm.cancel(job_id, STOP_TIMEOUT_SECS, console.say):
            console.say(f"{run_state.path(options.launch_dir)} is kept for another --stop.")
            return 1
        console.say(f"Slurm job {job_id} is over; forgetting the run.")
        run_state.remove(options.launch_dir)
    return 0


def watch_main(console, options):
    """--watch: watches the Slurm job recorded under --logdir."""
    if not run_state.exists(options.launch_dir):
        console.warn(f"No run recorded at {run_state.path(options.launch_dir)}.")
        return 1
    state = run_state.read(options.launch_dir)
    if state.get("launcher") != "slurm":
        console.warn("--watch follows Slurm runs; this run's workers run in tmux or over SSH.")
        return exit_codes.EXIT_BAD_INPUT
    return watch(console, options, state)

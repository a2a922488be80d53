"""Frontend: starts a multi-learner IMPALA run described by a workers CSV, or stops it.
With --launcher=slurm the run is one Slurm batch job of a given shape instead (frontend/slurm.py).

    python run_experiment_mm_raw.py --workers_csv_path=sandbox/local_workers_example.csv \\
        --level_name=PongNoFrameskip-v4 --logdir=/tmp/impala [other training flags]
    python run_experiment_mm_raw.py --logdir=/tmp/impala --stop

1. Reads and validates the whole CSV (frontend/workers_csv.py); any problem: exit 2, nothing
   started.
2. Groups actors (and evaluators, at most one a set) round-robin under learners into worker
   sets and prints the plan, one line per worker: its role, TF address, where it runs, its
   script and log (--verbose: its command too; --dry_run stops here). Each worker set's
   addresses go to a file its workers read.
3. Starts every actor and evaluator: local ones in windows of the tmux session --tmux_sess,
   remote ones over SSH as detached process groups whose PIDs go to
   LOGDIR/launch/run_state.json (frontend/run_state.py).
4. Starts all learners with one MPMD mpirun in the tmux window 'learners' (frontend/launcher.py).
5. After --startup_check_secs, lists the workers that failed to start or already died, with
   host, port and reason. A failed learner, or a failed actor or evaluator without
   --tolerate_actor_failures, stops everything started and exits 1.
6. With --follow, prints the learners' log and supervises the run until training ends
   (frontend/supervisor.py): failed workers are restarted, within --max_restarts per
   --restart_window_secs; then tears the run down.

The training flags (the fields of config.Config) given here are resolved once over the defaults
of --level_name's environment family (config.from_flags; the plan names the family) and all of
them forwarded to every worker. This module defines the flags and reads them once, into
`frontend.options.Options`; the rest (frontend/run.py on) takes them as arguments.
"""

import os
import sys

from absl import app, flags

import config as config_lib
import exit_codes
from frontend import run, slurm, supervisor
from frontend.options import Options

REPO_DIR = os.path.dirname(os.path.abspath(__file__))
FLAGS = flags.FLAGS
config_lib.define_flags(FLAGS)

flags.DEFINE_enum(
    "launcher",
    "csv",
    ["csv", "slurm"],
    "csv: the workers CSV's hosts, in tmux and over SSH. slurm: one Slurm batch job of the run's "
    "shape (the --slurm_* flags; frontend/slurm.py), submitted with sbatch.",
)
slurm.define_flags(flags)
flags.DEFINE_string(
    "workers_csv_path",
    os.path.join(REPO_DIR, "sandbox", "local_workers_example.csv"),
    "Workers CSV: job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password"
    "[,ssh_key_path]; see sandbox/README.md.",
)
flags.DEFINE_string("tmux_sess", "impala", "tmux session for the local workers.")
flags.DEFINE_string("tmux_socket_name", "", "tmux -L socket name; empty: tmux's default server.")
flags.DEFINE_bool("dry_run", False, "Print the plan; start nothing.")
flags.DEFINE_bool("verbose", False, "Print each worker's command under its line of the plan.")
flags.DEFINE_bool("stop", False, "Stop the run recorded under --logdir, then exit.")
flags.DEFINE_bool(
    "watch",
    False,
    "Show the state of the Slurm job recorded under --logdir and the learners' progress lines "
    "until it ends (Ctrl-C: stop watching, the job goes on).",
)
flags.DEFINE_string("repo_dir", REPO_DIR, "Directory holding experiment.py; the workers' cwd.")
flags.DEFINE_string("remote_repo_dir", "", "--repo_dir on remote hosts; empty: same as here.")
flags.DEFINE_string("remote_python", "", "Python on remote hosts; empty: this one's path.")
flags.DEFINE_string("known_hosts", "~/.ssh/known_hosts", "Known host keys for SSH.")
flags.DEFINE_bool(
    "accept_unknown_host_keys", False, "Accept (with a warning) host keys not in --known_hosts."
)
flags.DEFINE_bool(
    "tolerate_actor_failures",
    False,
    "Keep the run going (exit 0) when some actors or evaluators failed to start.",
)
flags.DEFINE_float("ssh_timeout_secs", 15, "Timeout of each SSH connection and command.")
flags.DEFINE_float("startup_check_secs", 3, "Wait this long, then check every worker still runs.")
flags.DEFINE_float("stop_timeout_secs", 10, "Wait this long after SIGTERM/SIGHUP, then SIGKILL.")
flags.DEFINE_bool(
    "follow",
    False,
    "After starting, print the learners' log and supervise the run until training ends: a "
    "worker that fails (exits non-zero or is killed) is restarted, within --max_restarts; then "
    "stop what is left. Ctrl-C stops following and supervising only (the run goes on); SIGTERM "
    "or SIGHUP stop the whole run (exit 128 + the signal's number). --launcher=slurm: after "
    "submitting, --watch the job (the job supervises its own workers).",
)
flags.DEFINE_float(
    "restart_backoff_secs",
    5,
    "--follow: wait this long before restarting a failed worker; the wait doubles with each "
    f"restart of that worker within --restart_window_secs (at most "
    f"{supervisor.MAX_BACKOFF_SECS:g} s).",
    lower_bound=0,
)
flags.DEFINE_integer(
    "max_restarts",
    5,
    "--follow: restarts allowed per worker (each actor; the learners' mpirun counts as one) "
    "within --restart_window_secs. A worker that fails again after that many stops the whole "
    "run with an error naming it (exit 1). 0: never restart.",
    lower_bound=0,
)
flags.DEFINE_float(
    "restart_window_secs",
    600,
    "--follow: the sliding window, in seconds, in which --max_restarts counts restarts.",
)
flags.register_validator(
    "restart_window_secs", lambda secs: secs > 0, "--restart_window_secs must be positive."
)
flags.DEFINE_float(
    "final_evaluation_secs",
    900,
    "--follow: once the learners have finished, wait at most this long for the evaluators to "
    "end their evaluation of the final parameters before stopping what is left of the run.",
    lower_bound=0,
)


def main(argv):
    del argv  # exit_codes.parse_flags refuses positional arguments.
    sys.exit(run.main(Options.from_flags(FLAGS)))


def cli():
    """Bad flags exit exit_codes.EXIT_BAD_INPUT, as the workers' and the rest of bad input."""
    app.run(main, flags_parser=exit_codes.parse_flags)


if __name__ == "__main__":
    cli()

"""The frontend's settings, read once from its flags (run_experiment_mm_raw.py defines them):
every other module of the frontend takes them as arguments, never reads a flag."""

import dataclasses
import os

import config as config_lib
from frontend import run_state, slurm, supervisor
from frontend.ssh_connections import Connections


@dataclasses.dataclass(frozen=True)
class Options:
    """The frontend's settings: its own flags and the training flags it forwards."""

    logdir: str  # Absolute.
    launcher: str  # 'csv' or 'slurm'.
    slurm: slurm.JobRequest  # --launcher=slurm: the job's shape and Slurm options.
    watch: bool
    workers_csv_path: str
    workers_csv_path_given: bool  # On the command line (--stop: wins over the recorded one).
    known_hosts: str
    known_hosts_given: bool
    tmux_sess: str
    tmux_socket_name: str
    dry_run: bool
    verbose: bool
    stop: bool
    repo_dir: str
    remote_repo_dir: str
    remote_python: str
    accept_unknown_host_keys: bool
    tolerate_actor_failures: bool
    ssh_timeout_secs: float
    startup_check_secs: float
    stop_timeout_secs: float
    follow: bool
    restart_policy: supervisor.RestartPolicy
    final_evaluation_secs: float
    level_name: str
    training_flag_args: tuple  # Every training flag as --name=value, for the workers.
    defaults_line: str  # Which environment family's defaults the training flags started from.
    batch_timeout_secs: int
    minibatch_unrolls: int

    @classmethod
    def from_flags(cls, flag_values):
        # Workers run in the repo dir, maybe on other hosts: give them an absolute --logdir.
        logdir = os.path.abspath(os.path.expanduser(flag_values.logdir))
        training = dataclasses.replace(config_lib.from_flags(flag_values), logdir=logdir)
        return cls(
            logdir=logdir,
            launcher=flag_values.launcher,
            slurm=slurm.JobRequest.from_flags(flag_values),
            watch=flag_values.watch,
            workers_csv_path=flag_values.workers_csv_path,
            workers_csv_path_given=flag_values["workers_csv_path"].present,
            known_hosts=flag_values.known_hosts,
            known_hosts_given=flag_values["known_hosts"].present,
            tmux_sess=flag_values.tmux_sess,
            tmux_socket_name=flag_values.tmux_socket_name,
            dry_run=flag_values.dry_run,
            verbose=flag_values.verbose,
            stop=flag_values.stop,
            repo_dir=flag_values.repo_dir,
            remote_repo_dir=flag_values.remote_repo_dir,
            remote_python=flag_values.remote_python,
            accept_unknown_host_keys=flag_values.accept_unknown_host_keys,
            tolerate_actor_failures=flag_values.tolerate_actor_failures,
            ssh_timeout_secs=flag_values.ssh_timeout_secs,
            startup_check_secs=flag_values.startup_check_secs,
            stop_timeout_secs=flag_values.stop_timeout_secs,
            follow=flag_values.follow,
            restart_policy=supervisor.RestartPolicy(
                backoff_secs=flag_values.restart_backoff_secs,
                max_restarts=flag_values.max_restarts,
                window_secs=flag_values.restart_window_secs,
            ),
            final_evaluation_secs=flag_values.final_evaluation_secs,
            level_name=training.level_name,
            training_flag_args=tuple(config_lib.flag_args(training)),
            defaults_line=config_lib.defaults_line(training),
            batch_timeout_secs=training.batch_timeout_secs,
            minibatch_unrolls=training.minibatch_unrolls,
        )

    @property
    def launch_dir(self):
        return run_state.launch_dir(self.logdir)

    def connections(self, console, known_hosts=None):
        return Connections(
            known_hosts or self.known_hosts,
            self.accept_unknown_host_keys,
            self.ssh_timeout_secs,
            console.warn,
        )

"""The run-state file, LOGDIR/launch/run_state.json: what a started run is made of.

The frontend writes it when it starts a run and keeps it up to date; --stop reads it to stop the
run and removes it afterwards, so "the file exists" means "the run may still be going". It
records the run id, the workers CSV and known_hosts file the run used (never a credential), the
tmux server and session of the local workers, and each remote actor's and evaluator's name,
login and PID:

    {"run_id": ..., "workers_csv_path": ..., "known_hosts": ..., "tmux_socket_name": ...,
     "tmux_session": ..., "remote": [{"name", "ip", "ssh_port", "ssh_username", "pid"}, ...]}

Writes are atomic (a complete file or the previous one, never half of one). Whoever changes the
run while it goes on (--stop, the supervisor restarting a worker) holds `locked()`, so a restart
never races a stop.
"""

import contextlib
import fcntl
import json
import os

FILE_NAME = "run_state.json"
LOCK_NAME = "run_state.lock"


def launch_dir(logdir):
    """Where a run keeps its launch scripts, logs and state file."""
    return os.path.join(logdir, "launch")


def path(directory):
    """The state file in the launch directory `directory`."""
    return os.path.join(directory, FILE_NAME)


def exists(directory):
    return os.path.exists(path(directory))


def read(directory):
    with open(path(directory)) as f:
        return json.load(f)


def write(directory, state):
    target = path(directory)
    with open(target + ".tmp", "w") as f:
        json.dump(state, f, indent=2)
    os.replace(target + ".tmp", target)  # Never a half-written state, even if we die here.


def remove(directory):
    os.remove(path(directory))


@contextlib.contextmanager
def locked(directory):
    """Holds the run's lock (an flock on LOCK_NAME, next to the state file) inside the block."""
    with open(os.path.join(directory, LOCK_NAME), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

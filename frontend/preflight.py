"""What both launchers (the workers CSV's and Slurm's) check before they start a run: nothing
may be started over a run that is still recorded, the launcher's commands must be on PATH and
the repository must hold the entry point the workers run."""

import os
import shutil

from frontend import run_state


def problems(launch_dir, repo_dir, commands, install_hint):
    """Why a run cannot start, as phrases for one line (empty: none).

    launch_dir: the run's launch directory (its state file's); repo_dir: --repo_dir;
    commands: the executables the launcher runs; install_hint: what provides them.
    """
    found = []
    if run_state.exists(launch_dir):
        found.append(f"{run_state.path(launch_dir)} records a run: stop it first with --stop")
    found += [
        f"{command} is not on PATH ({install_hint})"
        for command in commands
        if shutil.which(command) is None
    ]
    if not os.path.isfile(os.path.join(repo_dir, "experiment.py")):
        found.append(f"no experiment.py in --repo_dir={repo_dir}")
    return found

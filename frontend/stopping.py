"""Stopping a run: what its run-state file records (frontend/run_state.py), its tmux session and
its remote workers' process groups, under the run's lock."""

from frontend import launcher, run_state


def stop_recorded_run(workers, console, options, known_hosts=None):
    """Stops the run recorded in the run-state file and removes the file (as --stop does).

    Holds the run's lock throughout, so that the supervisor of the run never restarts a worker
    in the middle. Returns True if everything is known to be stopped (or nothing is recorded);
    otherwise the file is kept for another --stop.
    """
    directory = options.launch_dir
    with run_state.locked(directory):
        if not run_state.exists(directory):
            console.say(f"{run_state.path(directory)} is gone: the run was stopped already.")
            return True
        state = run_state.read(directory)
        _stop_tmux_session(state, console, options)
        with options.connections(console, known_hosts) as connections:
            ok = _stop_remote_workers(state, workers, connections, console, options)
        if ok:
            run_state.remove(directory)
        else:
            console.say(
                f"Some processes may still run; {run_state.path(directory)} is kept for "
                "another --stop."
            )
        return ok


def _stop_tmux_session(state, console, options):
    """Kills the run's tmux session (its local workers and the learners' mpirun), if it runs."""
    server = launcher.tmux_server(state["tmux_socket_name"])
    session = state["tmux_session"]
    if not server.has_session(session):
        console.say(f"tmux session {session!r}: not running.")
        return
    processes, killed = launcher.stop_tmux_session(server, session, options.stop_timeout_secs)
    sigkill = f", {len(killed)} of them by SIGKILL" if killed else ""
    console.say(f"Killed tmux session {session!r}: {len(processes)} processes ended{sigkill}.")


def _stop_remote_workers(state, workers, connections, console, options):
    """Stops each remote worker `state` records; returns True if all are known to be stopped."""
    ok = True
    login = {(w.ip, w.ssh_port, w.ssh_username): w for w in workers if not w.is_local}
    recorded = [login.get((e["ip"], e["ssh_port"], e["ssh_username"])) for e in state["remote"]]
    connections.connect_all(worker for worker in recorded if worker is not None)
    for entry, worker in zip(state["remote"], recorded, strict=True):
        what = f"{entry['name']} (PID {entry['pid']} on {entry['ssh_username']}@{entry['ip']})"
        try:
            if worker is None:
                raise LookupError(f"no row of {state['workers_csv_path']} has its login any more")
            result = launcher.stop_remote(
                connections.get(worker),
                entry["pid"],
                state["run_id"],
                launcher.exit_status_path(options.launch_dir, entry["name"]),
                options.stop_timeout_secs,
                options.ssh_timeout_secs,
            )
            console.say(f"{what}: {result}.")
        except Exception as e:
            console.warn(f"Cannot stop {what}: {launcher.describe_error(e)}")
            ok = False
    return ok

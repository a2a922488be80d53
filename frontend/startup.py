"""Starting a planned run: its actors and evaluators (tmux or SSH), then its learners' mpirun,
then a check, after --startup_check_secs, that every worker started still runs."""

import time

from frontend import launcher, run_state


def start(plan, state, connections, options):
    """Starts the actors and evaluators, then (unless one failed and that is not tolerated) the
    learners.

    Returns the failures as (launch, reason) pairs; `state` records what was started.
    """
    connections.connect_all(launch.worker for launch in plan.all if launch.is_remote)
    server = launcher.tmux_server(options.tmux_socket_name)
    uploaded = set()  # (SSH login, cluster file): on that host already, so not uploaded again.
    started, failures = _start_clients(plan, state, server, connections, uploaded, options)
    if failures and not options.tolerate_actor_failures:
        return failures
    try:
        _start_learners(plan, server, connections, uploaded, options)
        started.append(plan.mpirun)
    except Exception as e:
        return [*failures, (plan.mpirun, e)]
    # A worker that cannot start (bad path, import error, port in use) dies within seconds.
    time.sleep(options.startup_check_secs)
    return failures + _dead_after_start(started, state, server, connections, options)


def _start_clients(plan, state, server, connections, uploaded, options):
    """Starts every actor and evaluator; returns (the started launches, the failures)."""
    started, failures = [], []
    for launch in plan.clients:
        try:
            if launch.is_remote:
                _start_remote_client(launch, state, connections, uploaded, options)
            else:
                launcher.write_script(launch)
                launcher.open_window(server, options.tmux_sess, launch)
            started.append(launch)
        except Exception as e:
            failures.append((launch, e))
    return started, failures


def _start_remote_client(launch, state, connections, uploaded, options):
    """Starts `launch` over SSH and records its PID at once, so that --stop can find it."""
    worker = launch.worker
    upload = (worker.where, launch.cluster_file.path)
    pid = launcher.start_remote(
        connections.get(worker),
        launch,
        options.ssh_timeout_secs,
        with_cluster_file=upload not in uploaded,
    )
    uploaded.add(upload)
    state["remote"].append(
        {
            "name": launch.name,
            "ip": worker.ip,
            "ssh_port": worker.ssh_port,
            "ssh_username": worker.ssh_username,
            "pid": pid,
        }
    )
    run_state.write(options.launch_dir, state)


def _start_learners(plan, server, connections, uploaded, options):
    """Writes (or uploads) every learner's script, then starts their one mpirun in tmux."""
    for learner in plan.learners:
        if learner.is_remote:
            upload = (learner.worker.where, learner.cluster_file.path)
            launcher.upload_script(
                connections.get(learner.worker),
                learner,
                options.ssh_timeout_secs,
                with_cluster_file=upload not in uploaded,
            )
        else:
            launcher.write_script(learner)
    launcher.write_script(plan.mpirun)
    launcher.open_window(server, options.tmux_sess, plan.mpirun)


def _dead_after_start(started, state, server, connections, options):
    """The (launch, reason) of each started worker that is not running any more."""
    wait_secs = options.startup_check_secs
    pids = {entry["name"]: entry["pid"] for entry in state["remote"]}
    failures = []
    for launch in started:
        try:
            if launch.is_remote:
                client = connections.get(launch.worker)
                if launcher.remote_alive(client, pids[launch.name], options.ssh_timeout_secs):
                    continue
                status = "exited"
                tail = launcher.remote_tail(client, launch.log_path, options.ssh_timeout_secs)
            else:
                status = launcher.window_exit_status(server, options.tmux_sess, launch.name)
                if status is None:
                    continue
                status = f"exited with status {status}"
                tail = launcher.local_tail(launch)
            reason = f"{status} within {wait_secs} s; {launch.log_path} ends:"
            failures.append((launch, f"{reason}\n{tail}"))
        except Exception as e:
            failures.append((launch, e))
    return failures

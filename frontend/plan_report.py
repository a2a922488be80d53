"""What the frontend tells a person about a run before and as it starts: the plan, one line per
worker, and one line per worker that failed to start."""

import os

from frontend import launcher


def describe_failure(launch, error, console):
    """'actor-0-1 (row 4, bob@10.0.0.2 ssh port 22, auth: key K, tf port 9001): reason': the
    worker, its row, its host and why it failed, each once (describe_error never names the
    host); secrets masked."""
    worker = launch.worker
    if worker is None:
        return console.mask(f"{launch.name} (mpirun): {error}")
    if worker.is_local:
        where = f"this host, tf {worker.host}"
    else:
        where = f"{worker.where}, auth: {worker.auth}, tf port {worker.tf_port}"
    reason = error if isinstance(error, str) else launcher.describe_error(error)
    return console.mask(f"{launch.name} (row {worker.row}, {where}): {reason}")


def print_plan(worker_sets, plan, run_id, console, options):
    """One line per worker (what, where, its files), so the plan grows with the workers only."""
    actors = sum(len(ws.actors) for ws in worker_sets)
    evaluators = f", {len(plan.evaluators)} evaluator(s)" if plan.evaluators else ""
    console.say(
        f"Run {run_id}: {len(worker_sets)} worker sets from {options.workers_csv_path} "
        f"({len(worker_sets)} learners, {actors} actors{evaluators}; actor k -> learner k % "
        f"{len(worker_sets)})"
    )
    console.say(options.defaults_line)
    console.say(f"Plan (the files named are in {options.launch_dir} on each worker's host):")
    actor_launches, evaluator_launches = iter(plan.actors), iter(plan.evaluators)
    for ws, learner in zip(worker_sets, plan.learners, strict=True):
        host = "this host" if ws.learner.is_local else ws.learner.ip
        _say_launch(
            learner,
            f"learner of worker set {ws.index}, tf {ws.learner.host} (row {ws.learner.row})",
            f"mpirun rank {ws.index} on {host}; addresses "
            f"{os.path.basename(learner.cluster_file.path)}",
            console,
            options,
        )
        for task in range(len(ws.actors)):
            what = f"actor {task} of worker set {ws.index}"
            _say_client(next(actor_launches), what, console, options)
        if ws.evaluator:
            what = f"evaluator of worker set {ws.index}"
            _say_client(next(evaluator_launches), what, console, options)
    where = f"tmux window {options.tmux_sess}:learners"
    _say_launch(plan.mpirun, "the learners' mpirun", where, console, options)


def _say_client(launch, what, console, options):
    """An actor's or evaluator's line: started in its tmux window or over SSH."""
    worker = launch.worker
    if worker.is_local:
        where = f"tmux window {options.tmux_sess}:{launch.name}"
    else:
        where = f"over SSH as {worker.where} (auth: {worker.auth})"
    _say_launch(launch, f"{what}, tf {worker.host} (row {worker.row})", where, console, options)


def _say_launch(launch, what, where, console, options):
    """A worker's line of the plan (--verbose: and its command under it)."""
    files = (
        f"script {os.path.basename(launch.script_path)}; log {os.path.basename(launch.log_path)}"
    )
    console.say(f"  {launch.name}: {what}; {where}; {files}")
    if options.verbose:
        console.say(f"    {launch.command}")

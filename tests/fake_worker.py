"""Stands in for experiment.py in launch tests: same flags, no TensorFlow, bounded run time.

A test copies it as `experiment.py` into a directory it passes as --repo_dir. It prints one
JSON line (its argv, cwd and the environment the launch script set), then:
  learner:   listens on the port of its worker set's learner address (read from
             --cluster_file) and prints 'learner got: <line>' for each client that says hello;
  actor:     connects to that address (retrying while it is not up yet) and says
             'hello from actor <task> (<its own address in the cluster file>)';
  evaluator: the same as an actor, saying 'hello from evaluator (<its own address>)'.
It runs for --total_environment_frames milliseconds (at most 120 s), then exits 0.

A test makes a worker end when it wants by writing the file `exit-<address>` (the worker's own
host:port, as in the cluster file) into that directory, holding an exit status: the worker exits
with it at once, or as soon as the file appears (checked every 0.2 s). The file stays, so a
restarted worker exits the same way at once.
"""

import contextlib
import json
import os
import socket
import sys
import threading
import time


def exit_if_told(address):
    """Exits with the status in ./exit-<address> if that file exists."""
    path = f"exit-{address}"
    if os.path.exists(path):
        with open(path) as f:
            status = int(f.read().strip() or 0)
        print(f"fake worker: {path} says exit {status}", flush=True)
        sys.exit(status)


def main():
    flags = dict(arg[2:].partition("=")[::2] for arg in sys.argv[1:] if arg.startswith("--"))
    deadline = time.monotonic() + min(int(flags["total_environment_frames"]) / 1000, 120)
    environment = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "OMPI_COMM_WORLD_RANK")}
    report = {"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid(), "env": environment}
    print(json.dumps(report), flush=True)
    with open(flags["cluster_file"]) as f:
        addresses = [line.split() for line in f if line.strip()]
    learner = next(address for job, address in addresses if job == "learner")
    host, port = learner.rsplit(":", 1)
    if flags["job_name"] == "learner":
        exit_if_told(learner)
        server = socket.create_server((host, int(port)), reuse_port=True)
        server.settimeout(0.2)
        # print() writes a line and its newline apart: two greeters could interleave their lines.
        print_lock = threading.Lock()

        def greet(connection):
            with connection:
                line = connection.makefile().readline().strip()
            with print_lock:
                print(f"learner got: {line}", flush=True)

        while time.monotonic() < deadline:
            exit_if_told(learner)
            with contextlib.suppress(TimeoutError):  # Only so the deadline is checked.
                threading.Thread(target=greet, args=(server.accept()[0],), daemon=True).start()
    else:
        job, task = flags["job_name"], int(flags["task"])
        me = [address for name, address in addresses if name == job][task]
        hello = f"hello from actor {task} ({me})" if job == "actor" else f"hello from {job} ({me})"
        exit_if_told(me)
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((host, int(port)), timeout=1) as connection:
                    connection.sendall(f"{hello}\n".encode())
                print(f"{job} said hello", flush=True)
                break
            except OSError:
                exit_if_told(me)
                time.sleep(0.2)
        while time.monotonic() < deadline:
            exit_if_told(me)
            time.sleep(0.2)


if __name__ == "__main__":
    main()

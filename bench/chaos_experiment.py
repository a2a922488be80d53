"""The experiment.py of bench/chaos.py's --repo_dir (chaos_network.py copies it there): runs the
checkout's experiment.py, actor-1-0 in the benchmark's network namespace.

For worker set 1 (learner 1 and actor-1-0) it also rewrites the frontend's cluster file so that
actor-1-0's address is the namespace's: the frontend took the actor for a local one (its CSV row
says 127.0.0.1), but the learner pulls the unrolls from the actor's TF server, which listens
inside the namespace. Only the standard library: it runs from the --repo_dir, not the checkout.
The settings are in chaos.json beside it (namespace, actor_ip, experiment).
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FLAG = "--cluster_file="


def set_1_cluster_file(argument, actor_ip):
    """The path of a copy of worker set 1's cluster file with actor 0 at `actor_ip`."""
    with open(argument[len(FLAG) :]) as f:
        lines = f.read().splitlines()
    job, address = lines[1].split()  # Actor 0's line follows the learner's.
    lines[1] = f"{job} {actor_ip}:{address.rsplit(':', 1)[1]}"
    path = os.path.join(HERE, "cluster-1.txt")
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(partial, path)  # Never read half-written by another worker.
    return path


def main():
    with open(os.path.join(HERE, "chaos.json")) as f:
        settings = json.load(f)
    args = sys.argv[1:]
    in_set_1 = any(a.startswith(FLAG) and a.endswith("/cluster-1.txt") for a in args)
    if in_set_1:
        args = [
            FLAG + set_1_cluster_file(a, settings["actor_ip"]) if a.startswith(FLAG) else a
            for a in args
        ]
    cut = in_set_1 and "--job_name=actor" in args and "--task=0" in args
    prefix = ["ip", "netns", "exec", settings["namespace"]] if cut else []
    argv = [*prefix, sys.executable, settings["experiment"], *args]
    os.execvp(argv[0], argv)  # The worker keeps this PID, which the frontend watches.


if __name__ == "__main__":
    main()

"""A worker set's addresses in a file, which the frontend gives its workers (--cluster_file).

One `JOB HOST:PORT` a line: the learner's first, then each actor's in task order, then the
evaluator's if the set has one:

    learner 10.0.0.1:8000
    actor 10.0.0.2:8001
    actor 10.0.0.3:8002
    evaluator 10.0.0.4:8003

As flags (--learner_host, --actor_hosts), every worker of a set would carry all of its actors'
addresses: arguments that grow with the set, which Linux refuses beyond 128 KiB for one argument
(MAX_ARG_STRLEN), and a launch plan that grows with the square of the workers. A file per worker
set keeps every command short.
"""

import collections

JOBS = ("learner", "actor", "evaluator")

# A worker set's addresses: the learner's, the actors' (a list, in task order) and the
# evaluator's (None when the set has none).
Cluster = collections.namedtuple("Cluster", ["learner", "actors", "evaluator"])


class ClusterFileError(ValueError):
    """A malformed cluster file: `PATH:LINE: problem`."""


def text(learner_host, actor_hosts, evaluator_host=None):
    """The file's content for a learner at `learner_host`, actors at `actor_hosts` and, unless
    None, an evaluator at `evaluator_host`."""
    lines = [f"learner {learner_host}", *(f"actor {address}" for address in actor_hosts)]
    if evaluator_host is not None:
        lines.append(f"evaluator {evaluator_host}")
    return "".join(f"{line}\n" for line in lines)


def read(path):
    """The Cluster in the cluster file at `path`."""
    learner_host, actor_hosts, evaluator_host = None, [], None
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or fields[0] not in JOBS:
                raise ClusterFileError(
                    f"{path}:{number}: {line.strip()!r} is not 'JOB HOST:PORT' with JOB one of "
                    f"{', '.join(JOBS)}"
                )
            job, address = fields
            if (job == "learner") != (learner_host is None):  # A learner line, first and only.
                raise ClusterFileError(f"{path}:{number}: the learner's line comes first, once")
            if evaluator_host is not None:  # Nothing after the evaluator's line.
                raise ClusterFileError(
                    f"{path}:{number}: the evaluator's line comes last (after the actors'), once"
                )
            if job == "learner":
                learner_host = address
            elif job == "actor":
                actor_hosts.append(address)
            else:
                evaluator_host = address
    if learner_host is None:
        raise ClusterFileError(f"{path}: no 'learner HOST:PORT' line")
    return Cluster(learner_host, actor_hosts, evaluator_host)

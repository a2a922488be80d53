"""The exit statuses of experiment.py's roles, named once, and the one way bad flags end a
process: a run's supervisor (frontend/supervisor.py) tells by the status why a worker ended,
and so what to do about it (restart it, end the run, report it).

No TensorFlow here: the entry points import this before their flags are parsed.
"""

import os
import sys

from absl import flags

EXIT_BAD_INPUT = 2  # flags, files, hosts or peers that cannot work: restarting does not help.
# A learner that stopped before its frame budget:
EXIT_STARVED = 3  # some learner got no batch from its actors for --batch_timeout_secs.
EXIT_STUCK = 4  # a step took longer than --step_timeout_secs (see step_watchdog.py).
EXIT_CHECKPOINTS_FAILING = 5  # --max_failed_checkpoints checkpoints in a row were not written.
EXIT_STOPPED_BY_SIGNAL = 6  # SIGTERM or SIGINT (e.g. a scheduler's preemption), after saving.
# An actor or the evaluator gave up on its learner (gone, not answering, or its parameters still)
# after --learner_wait_secs: restarted, it waits for the learner again, which may be back.
EXIT_LEARNER_LOST = 7

# Why a worker ended, by its status, as the supervisor says it.
MEANINGS = {
    EXIT_BAD_INPUT: "bad input, which a restart cannot mend",
    EXIT_STARVED: "no batch from the actors for --batch_timeout_secs",
    EXIT_STUCK: "a learner step stuck for --step_timeout_secs",
    EXIT_CHECKPOINTS_FAILING: "--max_failed_checkpoints checkpoints in a row not written",
    EXIT_STOPPED_BY_SIGNAL: "stopped by a signal before its frame budget (preempted?)",
    EXIT_LEARNER_LOST: "gave up on its learner after --learner_wait_secs",
}


def parse_flags(argv, flag_values=flags.FLAGS):
    """absl's `flags_parser` for app.run: parses `argv` (its validators run), or exits with
    EXIT_BAD_INPUT after one line naming the flag (absl's own parser exits 1, the status of a
    crash). Positional arguments are refused: a typo such as `--batch_size 8` is one."""
    try:
        remaining = flag_values(argv)
    except flags.Error as e:
        _refuse(argv, e)
    if remaining[1:]:
        _refuse(argv, f"unexpected arguments {remaining[1:]} (flags are --name=value)")
    return remaining


def _refuse(argv, error):
    print(f"{os.path.basename(argv[0])}: error: {error}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)

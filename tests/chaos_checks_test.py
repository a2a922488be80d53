"""bench/chaos_checks.py: what the chaos benchmark reads of the learners' logs."""

import datetime

from bench import chaos_checks


def progress(clock, frames):
    return f"I1127 {clock} 1 progress.py:158] frames {frames} (1.0%) | 900 frames/s\n"


def unix(clock):
    year = datetime.date.today().year
    return datetime.datetime.strptime(f"{year}1127 {clock}", "%Y%m%d %H:%M:%S.%f").timestamp()


BEFORE = "".join(
    progress(f"12:00:{second:02d}.000000", 1000 * second) for second in range(0, 60, 10)
)


def test_frames_lost_against_one_checkpoint_interval_before_the_fault():
    after = "I1127 12:01:30.0 1 learner.py:194] training from 42000 to 100000 environment frames"
    lost, allowed, resumed = chaos_checks.frames_lost(
        BEFORE, after, unix("12:00:55.000000"), checkpoint_secs=20, log_secs=5
    )
    # Last logged 50000; 20 + 5 + 5 s before the fault (12:00:25) the log said 20000.
    assert (lost, allowed, resumed) == (8000, 30000, 42000)


def test_frames_lost_waits_for_the_restart():
    assert chaos_checks.frames_lost(BEFORE, "", unix("12:00:55.0"), 20, 5) is None


def test_budget_and_learning_bar():
    log = "learner 0 stopped at 100352 environment frames (frame budget reached); ..."
    assert chaos_checks.budget_frames(log) == 100352
    assert chaos_checks.budget_frames(BEFORE) is None
    assert chaos_checks.last_frames(BEFORE) == 50000
    assert chaos_checks.learned(151.0, None, 150) and chaos_checks.learned(None, 150.0, 150)
    assert not chaos_checks.learned(150.0, 149.0, 150) and not chaos_checks.learned(None, None, 0)


def test_a_failed_frontends_error_line_is_kept_above_its_last_lines():
    output = "\n".join(
        [
            "Run 20261207-223755-4fbfc145: 2 worker sets",
            "[1,1]<stdout>:experiment.py (learner 0): error: --learner_host: port 13328 of "
            "10.196.214.1:13328 is in use ([Errno 98] Address already in use)",
            *(f"[1,0]<stdout>:  traceback line {i}" for i in range(30)),
        ]
    )
    lines = chaos_checks.frontend_errors(output, last_lines=10)
    assert "error: --learner_host: port 13328" in lines[0]
    assert lines[1:] == [f"[1,0]<stdout>:  traceback line {i}" for i in range(20, 30)]

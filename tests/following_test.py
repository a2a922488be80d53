"""following: how the end of supervision becomes what the frontend says and its exit code."""

import types

from frontend import following, run_state
from frontend.console import Console
from frontend.supervisor import Outcome, Result


def finish(tmp_path, result, capsys):
    """following.finish of `result` for a run whose launch dir is in tmp_path; -> (exit code,
    stdout, stderr)."""
    options = types.SimpleNamespace(launch_dir=str(tmp_path))
    code = following.finish(result, [], Console(), options)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_stop_the_user_asked_for_is_a_normal_end(tmp_path, capsys):
    message = f"{run_state.path(str(tmp_path))} is gone (the run was stopped, e.g. by --stop)"
    assert finish(tmp_path, Result(Outcome.STOPPED, message), capsys) == (
        0,
        "The run was stopped with --stop: nothing left to follow.\n",
        "",
    )


def test_a_run_ended_by_something_else_than_stop_is_an_error_naming_what_is_gone(tmp_path, capsys):
    run_state.write(str(tmp_path), {"run_id": "r", "remote": []})  # Still recorded.
    result = Result(Outcome.STOPPED_ELSEWHERE, "tmux session 'impala' is gone")
    assert finish(tmp_path, result, capsys) == (
        1,
        "",
        "The run was ended from elsewhere: tmux session 'impala' is gone. Not supervising it.\n"
        "Stop what may be left of it with --stop.\n",
    )


def test_a_worker_a_restart_cannot_mend_ends_the_run_with_its_status(tmp_path, capsys):
    result = Result(Outcome.NOT_RESTARTABLE, "The learners could not write checkpoints", status=5)
    code, out, err = finish(tmp_path, result, capsys)
    assert code == 5
    assert err == "ERROR: The learners could not write checkpoints\nStopping the whole run.\n"

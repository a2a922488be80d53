"""frontend.preflight: what both launchers refuse to start over, each named in its own phrase."""

from frontend import preflight, run_state


def make_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "experiment.py").write_text("")
    return str(repo)


def test_nothing_to_refuse(tmp_path):
    launch_dir = str(tmp_path / "launch")
    assert preflight.problems(launch_dir, make_repo(tmp_path), ("sh",), "coreutils") == []


def test_each_problem_named(tmp_path):
    launch_dir = str(tmp_path / "launch")
    (tmp_path / "launch").mkdir()
    run_state.write(launch_dir, {"run_id": "earlier"})
    empty_repo = tmp_path / "empty"
    empty_repo.mkdir()
    problems = preflight.problems(
        launch_dir, str(empty_repo), ("sh", "no-such-command-here"), "install the tool"
    )
    assert problems == [
        f"{run_state.path(launch_dir)} records a run: stop it first with --stop",
        "no-such-command-here is not on PATH (install the tool)",
        f"no experiment.py in --repo_dir={empty_repo}",
    ]

"""How the project is installed: not at all. Its modules run from the checkout, so none of its
top-level names can clash with a distribution's in the virtualenv (docs/architecture.md); the
self-check passes."""

import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent


def top_level_names():
    """The names this checkout puts on sys.path: its root's modules and packages (namespace
    packages such as bench/ included)."""
    modules = {path.stem for path in REPO.glob("*.py")}
    folders = {
        path.name
        for path in REPO.iterdir()
        if path.is_dir() and any(path.glob("*.py")) and not path.name.startswith(".")
    }
    return modules | folders


def test_no_top_level_name_of_the_repo_is_importable_outside_the_checkout(tmp_path):
    """In an isolated interpreter of the virtualenv (-I: no cwd, script dir or PYTHONPATH on
    sys.path), run from elsewhere, none of this repo's names imports: neither an install of
    this project nor a distribution whose module ours would shadow."""
    names = sorted(top_level_names())
    assert {"config", "tools", "replay", "progress", "learner", "actor", "agents"} <= set(names)
    code = (
        "import importlib.util, json, sys\n"
        "names = json.loads(sys.argv[1])\n"
        "print(json.dumps({n: getattr(importlib.util.find_spec(n), 'origin', None)"
        " for n in names if importlib.util.find_spec(n)}))"
    )
    found = subprocess.run(
        [sys.executable, "-I", "-c", code, json.dumps(names)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(found.stdout) == {}


def test_self_check_passes_in_the_virtualenv():
    """Horovod imports with MPI and Gloo built, mpirun exists, ALE makes Pong offline."""
    result = subprocess.run(
        [sys.executable, str(REPO / "selfcheck.py")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "self-check passed" in result.stdout

"""The installed project: every top-level module is packaged, the self-check passes."""

import pathlib
import subprocess
import sys
import tomllib

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_every_top_level_module_is_listed_in_pyproject():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {p.stem for p in REPO.glob("*.py")}
    assert set(config["py-modules"]) == on_disk
    assert config["packages"] == ["agents", "frontend", "tools"]


def test_self_check_passes_in_the_installed_environment():
    """Horovod imports with MPI and Gloo built, mpirun exists, ALE makes Pong offline."""
    result = subprocess.run(
        [sys.executable, "-m", "selfcheck"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "self-check passed" in result.stdout

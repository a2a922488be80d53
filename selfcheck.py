"""Post-install self-check: fails loudly, naming what is wrong.

Run as `python selfcheck.py` (scripts/setup.sh does it after every set-up), or `python -m
selfcheck` from the repository's root.
"""

import shutil
import sys


def check_horovod():
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        return f"`import horovod.tensorflow` failed: {e} (rebuild: rm -rf the Horovod wheel cache)"
    if not hvd.mpi_built():
        return "Horovod was built without MPI (hvd.mpi_built() is False)"
    if not hvd.gloo_built():
        return "Horovod was built without Gloo (hvd.gloo_built() is False)"
    return None


def check_mpirun():
    if shutil.which("mpirun") is None:
        return "`mpirun` is not on PATH (Debian package openmpi-bin)"
    return None


def check_ale_pong():
    """ALE must make Pong from the ROMs bundled in ale-py, with no download."""
    try:
        import ale_py
        import gymnasium as gym

        gym.register_envs(ale_py)
        env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
        observation, _ = env.reset(seed=0)
        env.close()
    except Exception as e:  # noqa: BLE001 - any failure here is reported, not raised.
        return f"ALE could not make ALE/Pong-v5: {type(e).__name__}: {e}"
    if observation.shape != (210, 160, 3):
        return f"ALE Pong observation has shape {observation.shape}, expected (210, 160, 3)"
    return None


CHECKS = (check_mpirun, check_horovod, check_ale_pong)


def main():
    failures = [message for message in (check() for check in CHECKS) if message]
    for message in failures:
        print(f"SELF-CHECK FAILED: {message}", file=sys.stderr)
    if failures:
        return 1
    print("self-check passed: horovod.tensorflow (MPI + Gloo), mpirun, ALE Pong")
    return 0


if __name__ == "__main__":
    sys.exit(main())

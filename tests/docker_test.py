"""The container image, built and run for real: docker/build_and_smoke.sh builds docker/Dockerfile
with podman (no Docker engine needed) and runs docker/smoke_test.sh inside the image.

Measured on 2 shared cores with the host's Horovod wheel cached (scripts/setup.sh runs first):
about a minute after a code edit (image layers cached), 5-8 minutes after a dependency edit, and
about 9 on a machine that never built the image (see docker/README.md).
"""

import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: apt-get (podman, debootstrap), podman's image storage and chroot",
)
def test_image_builds_and_passes_its_smoke_test(tmp_path):
    log_path = tmp_path / "build_and_smoke.log"
    with open(log_path, "w") as log:
        result = subprocess.run(
            ["bash", str(REPO / "docker" / "build_and_smoke.sh")],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=1750,
        )
    log = log_path.read_text(errors="replace")
    assert result.returncode == 0, log[-5000:]
    for line in (
        # The image's install passed setup.sh's self-check, and passes it again when run.
        "self-check passed: horovod.tensorflow (MPI + Gloo), mpirun, ALE Pong",
        # Two Horovod ranks under mpirun summed 1 + 2.
        "rank 0 of 2: allreduce sum 3.0",
        "rank 1 of 2: allreduce sum 3.0",
        # A learner trained 10 steps of 4 unrolls x 20 frames from a real actor, which then left.
        "stopped at 800 environment frames (frame budget reached); "
        "this learner trained on 800 frames in 10 steps",
        "learner finished training; exiting",
        "Dry run: nothing started.",
        "build OK: ",
        "smoke OK: ",
    ):
        assert line in log, f"{line!r} not in the output; its end:\n{log[-5000:]}"

"""Real worker processes for integration tests: started in their own process group, logged to a
file, waited for with a bound, and always killed (with their children) at teardown."""

import contextlib
import os
import pathlib
import signal
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
EXPERIMENT = str(REPO / "experiment.py")


class Process:
    """One child process whose stdout+stderr go to `log_path`."""

    def __init__(self, argv, log_path, env=None):
        self.log_path = pathlib.Path(log_path)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in kill()/wait().
        child_env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        child_env.update(env or {})
        self.popen = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=child_env,
            start_new_session=True,  # its own process group: kill() reaches its children too
        )

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout):
        """Exit code; raises AssertionError (with the log's tail) if still running at timeout."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.popen.args[:4]}... still running after {timeout} s; log tail:\n"
                + self.log()[-3000:]
            ) from None
        finally:
            self._log.flush()

    def wait_for_log(self, text, timeout, count=1):
        """Waits (bounded) until `text` is `count` times in the log; fails early on exit."""
        deadline = time.monotonic() + timeout
        while self.log().count(text) < count:
            finished = self.popen.poll() is not None
            if finished or time.monotonic() > deadline:
                if self.log().count(text) >= count:  # written just before it exited
                    return
                state = "exited" if finished else f"still running after {timeout} s"
                raise AssertionError(
                    f"{text!r} not {count}x in the log ({state}); tail:\n{self.log()[-3000:]}"
                )
            time.sleep(0.5)

    def signal(self, signum):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def kill(self):
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        self._log.close()

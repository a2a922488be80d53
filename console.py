"""The frontend's console: what it prints, with every secret (an SSH password) masked."""

import contextlib
import sys

MASK = "********"


class Console:
    """Prints, with every secret replaced by '********'."""

    def __init__(self):
        self._secrets = []

    def add_secrets(self, secrets):
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted({*self._secrets, *filter(None, secrets)}, key=len, reverse=True)

    def mask(self, text):
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def say(self, text="", file=None):
        # A closed terminal (after SIGHUP) or pipe: go on without output.
        with contextlib.suppress(OSError):
            print(self.mask(str(text)), file=file or sys.stdout, flush=True)

    def warn(self, text):
        self.say(text, file=sys.stderr)

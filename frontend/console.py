"""The frontend's console: what it prints, with every secret (an SSH password) masked, and the
learners' log lines it follows with short prefixes, TensorFlow's start-up chatter left out."""

import contextlib
import logging
import re
import sys

MASK = "********"


def _whole_token(secret):
    """A regex matching `secret` only where it stands whole, not inside a longer word.

    A secret that begins (ends) with a letter, digit or '_' must not be preceded (followed) by
    one: a password that is also part of a port number or flag is left there, so masking
    neither garbles the text nor reveals, by what it hides, what the password is.
    """
    before = r"(?<!\w)" if re.match(r"\w", secret[0]) else ""
    after = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    return before + re.escape(secret) + after


# A learner's absl line in the learners' mpirun log (--tag-output): mpirun's prefix, then
# absl's header, e.g. "[1,0]<stdout>:I1126 21:57:50.604185 140327704569792 progress.py:124] ".
_LEARNER_LINE = re.compile(
    r"\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:"
    r"(?P<severity>[IWEF])\d{4} (?P<time>\d\d:\d\d:\d\d)\.\d+ +\d+ \S+:\d+\] ?"
)


def short_learner_line(line):
    """`line` of the learners' mpirun log, an absl line's prefixes shortened to its rank and
    time of day, `[learner 0 21:57:50] ...` (a warning, error or fatal line adds its letter:
    `[learner 0 21:57:50 W] ...`); any other line as it is."""
    found = _LEARNER_LINE.match(line)
    if found is None:
        return line
    severity = "" if found["severity"] == "I" else f" {found['severity']}"
    return f"[learner {found['rank']} {found['time']}{severity}] {line[found.end() :]}"


# What TensorFlow's C++ side prints as each learner rank starts: nothing a person following the
# run acts on. One regex each, for what follows mpirun's tag and the C++ log header (`I0000
# 00:00:1795779133.303895    6853 `); the lines stay in mpirun.log. The DT_INT32 line's meaning
# and cost: docs/performance.md.
TF_STARTUP_LINES = (
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"port\.cc:\d+\] oneDNN custom operations are on\.",
    r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized to use available CPU",
    r"To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler",
    r"util\.cc:\d+\] oneDNN supports DT_\w+ only on platforms with AVX-512\.",
    r"mlir_graph_optimization_pass\.cc:\d+\] MLIR V1 optimization pass is not enabled",
)
_TF_STARTUP_LINE = re.compile(
    r"(?:\[\d+,\d+\]<std(?:out|err)>:)?"  # mpirun's tag
    r"(?:[IWEF]\d{4} \d\d:\d\d:[\d.]+ +\d+ )?"  # the C++ log header
    r"(?:" + "|".join(TF_STARTUP_LINES) + ")"
)


def is_tf_startup_line(line):
    """Whether `line` of the learners' mpirun log is one of TF_STARTUP_LINES, with or without
    mpirun's `[1,0]<stderr>:` tag."""
    return _TF_STARTUP_LINE.match(line) is not None


def mask_pattern(secrets):
    """One regex for every non-empty secret, longest first (a secret inside another goes whole).

    The mask itself is one of the alternatives, so that masking text again leaves it as it is.
    """
    alternatives = sorted({MASK, *filter(None, secrets)}, key=len, reverse=True)
    return re.compile("|".join(map(_whole_token, alternatives)))


def mask(text, secrets):
    """`text` with every whole occurrence of each of `secrets` replaced by MASK."""
    return mask_pattern(secrets).sub(MASK, text)


class Console:
    """Prints, with every secret replaced by '********' wherever it stands whole."""

    def __init__(self):
        self._secrets = set()
        self._pattern = mask_pattern(())

    def add_secrets(self, secrets):
        self._secrets.update(filter(None, secrets))
        self._pattern = mask_pattern(self._secrets)

    def mask(self, text):
        return self._pattern.sub(MASK, text)

    def say(self, text="", file=None):
        # A closed terminal (after SIGHUP) or pipe: go on without output.
        with contextlib.suppress(OSError):
            print(self.mask(str(text)), file=file or sys.stdout, flush=True)

    def warn(self, text):
        self.say(text, file=sys.stderr)


def quiet_libraries():
    """Keeps the libraries' own logging off the console, where the frontend says what matters
    itself: libtmux's 'window created' lines, and paramiko's (its transport thread logs each
    failed connection with a 20-line traceback; the frontend reports the failure once, with
    the host, row and cause)."""
    logging.getLogger("libtmux").setLevel(logging.WARNING)
    paramiko = logging.getLogger("paramiko")
    paramiko.addHandler(logging.NullHandler())
    paramiko.propagate = False

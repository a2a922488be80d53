"""A game's curve of the Atari suite as docs/atari/<Game>.csv: each game's result is committed as
soon as its run ends, since a machine here keeps nothing (no run directory) past a sitting.

  # commit 1a2b3c4, CPU AMD EPYC, budget 5,000,000 frames, complete
  frames,return_mean_100,games,entropy
  100000,1.52,198,0.9871
  ...

One row per 100K frames, up to the budget (a complete run) or as far as the run got (a partial
one): the mean unclipped return of the last 100 games finished by those frames, the games
finished by then, and the policy's entropy (`policy/entropy_fraction`: the mean entropy per step
over its maximum ln A) of the summary nearest at or before them; empty before the first game or
summary. The comment line says which code trained it (`-dirty`: with uncommitted changes), on
which CPU, to what budget and whether it got there. bench/atari_suite.py rebuilds the suite's
table and figure from these files alone.
"""

import dataclasses
import os
import re
import subprocess

import numpy as np

ROW_FRAMES = 100_000
HEADER = "frames,return_mean_100,games,entropy"
_COMMENT = re.compile(r"# (?P<provenance>.*), budget (?P<budget>[\d,]+) frames, (?P<state>\w+)")
_COMMIT = re.compile(r"commit (?P<commit>[0-9a-f]+(-dirty)?)")
_STATES = {"complete": True, "partial": False}


@dataclasses.dataclass(frozen=True)
class GameCurve:
    """One game's curve, as in its docs CSV.

    game: the suite's name of the game, e.g. "Breakout".
    budget: the run's frame budget.
    complete: whether the run reached it (reaches()).
    rows: float64 [R, 4]: (frames, return_mean_100, games, entropy) every ROW_FRAMES; NaN where
      empty.
    commit: the short hash of the code that trained it, as its CSV's comment line names it
      ("" for a curve not read from one, or a line naming none).
    """

    game: str
    budget: int
    complete: bool
    rows: np.ndarray
    commit: str = ""

    def return_at(self, frames):
        """return_mean_100 at exactly `frames`, or None (no row there, or no game by then)."""
        at = self.rows[self.rows[:, 0] == frames, 1]
        return float(at[0]) if len(at) and not np.isnan(at[0]) else None


def path(docs_dir, game):
    """Where `game`'s curve goes in `docs_dir` (the repository's docs/)."""
    return os.path.join(docs_dir, "atari", f"{game}.csv")


def ab_path(docs_dir, game, change):
    """Where `game`'s curve of the A/B run `change` goes in `docs_dir`: beside the suite's
    curves, never read into its table."""
    return os.path.join(docs_dir, "atari", "ab", f"{game}-{change}.csv")


def reaches(frames, budget, batch_frames):
    """Whether a run whose summaries got to `frames` counts as at `budget`: its last summaries
    can be up to one batch (`batch_frames`, of all learners) short of the frames it stopped at."""
    return frames >= budget - batch_frames


def of_run(run, game, budget, batch_frames):
    """The GameCurve `game` of the RunCurves `run` trained to `budget` frames in batches of
    `batch_frames`: rows to the budget if it reached it, else to the last ROW_FRAMES it got to."""
    complete = reaches(run.frames(), budget, batch_frames)
    end = budget if complete else run.frames()
    frames = ROW_FRAMES * np.arange(1, end // ROW_FRAMES + 1, dtype=np.float64)
    game_frames, _, means = run.returns.T
    rows = np.column_stack(
        [
            frames,
            _last_at(game_frames, means, frames),
            np.searchsorted(game_frames, frames, side="right"),
            _last_at(*run.entropy.T, frames),
        ]
    )
    return GameCurve(game, budget, complete, rows)


def _last_at(steps, values, frames):
    """[R]: of the (steps [N] ascending, values [N]) series, the value of the last step at or
    before each of `frames` [R]; NaN before the first."""
    with_none_before = np.concatenate([[np.nan], values])
    return with_none_before[np.searchsorted(steps, frames, side="right")]


def provenance(repo):
    """ "commit <short hash>[-dirty], CPU <model name>" of the git checkout `repo` and this
    machine; `-dirty` when its tracked files differ from the commit."""
    head = _git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
    dirty = _git(repo, "diff", "--quiet", "HEAD", check=False).returncode != 0
    return f"commit {head}{'-dirty' if dirty else ''}, CPU {cpu_model()}"


def _git(repo, *args, check=True):
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=check
    )


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The first `model name` of `cpuinfo`, or "unknown"."""
    with open(cpuinfo) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    return "unknown"


def write(curve, csv_path, provenance_line):
    """Writes the GameCurve `curve` to `csv_path`, its comment line led by `provenance_line`
    (provenance())."""
    state = "complete" if curve.complete else "partial"
    lines = [f"# {provenance_line}, budget {curve.budget:,} frames, {state}", HEADER]
    for frames, mean_return, games, entropy in curve.rows:
        lines.append(f"{frames:.0f},{_cell(mean_return, 2)},{games:.0f},{_cell(entropy, 4)}")
    os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
    with open(csv_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _cell(value, decimals):
    return "" if np.isnan(value) else f"{value:.{decimals}f}"


def read(csv_path):
    """The GameCurve of the docs CSV `csv_path` (its game: the file's name)."""
    with open(csv_path) as f:
        comment, header, *lines = f.read().splitlines()
    match = _COMMENT.fullmatch(comment)
    if not match or match["state"] not in _STATES or header != HEADER:
        raise ValueError(f"{csv_path}: not a game's curve (see bench/atari_curves.py)")
    rows = [[float(cell) if cell else np.nan for cell in line.split(",")] for line in lines]
    return GameCurve(
        game=os.path.basename(csv_path).removesuffix(".csv"),
        budget=int(match["budget"].replace(",", "")),
        complete=_STATES[match["state"]],
        rows=np.array(rows, np.float64).reshape(-1, 4),
        commit=commit_of(match["provenance"]),
    )


def commit_of(provenance_line):
    """The short hash (with `-dirty` if so) that `provenance_line` (provenance()) names, or ""."""
    found = _COMMIT.match(provenance_line)
    return found["commit"] if found else ""

"""The Atari suite: six games on one set of defaults, beside PPO's published returns.

bench/learning.py trains it (`--runs=atari`: one run per game, the same settings for each); this
module holds the games, their bars and the suite's summary: for each game the mean return of the
last 100 full games at 2.5M, 5M and 10M frames, as a printed table, a CSV and a grid figure.
"""

import csv
import os

from tools import curves

# PPO at 10M frames (Schulman et al. 2017, fig. 6; the top of its range over 3 seeds): the bar.
BARS = {
    "Pong": 18.0,
    "Breakout": 70.0,
    "SpaceInvaders": 640.0,
    "BeamRider": 750.0,
    "Qbert": 8000.0,
    "Seaquest": 800.0,
}
BUDGETS = (2_500_000, 5_000_000, 10_000_000)
CSV_FIELDS = ["game", "frames", "return_2.5M", "return_5M", "return_10M"]


def level_name(game):
    """The Gymnasium id of `game` (e.g. Breakout): no frame skip in the id, no sticky actions."""
    return f"{game}NoFrameskip-v4"


def run_name(game):
    """The game's run in bench/learning.py's RUNS (e.g. space_invaders)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in game).lstrip("_")


def mean_return_at(returns, budget):
    """The mean of the last (up to) 100 games finished by `budget` frames, or None if the run
    has not got that far.

    returns: float64 [N, 3] of curves.RunCurves.returns (frames, return, running mean)."""
    if not len(returns) or returns[-1, 0] < budget:
        return None
    finished = returns[returns[:, 0] <= budget]
    return float(finished[-1, 2]) if len(finished) else None


def summary(runs):
    """One row per RunCurves of `runs` (named by game): {field of CSV_FIELDS: value, None where
    the run did not get there}."""
    return [
        {
            "game": run.name,
            "frames": int(run.returns[-1, 0]),
            **{
                field: mean_return_at(run.returns, budget)
                for field, budget in zip(CSV_FIELDS[2:], BUDGETS, strict=True)
            },
        }
        for run in runs
    ]


def write_csv(rows, path):
    """`rows` of summary() as CSV_FIELDS, returns with 2 decimals, empty where None."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            returns = {field: _cell(row[field]) for field in CSV_FIELDS[2:]}
            writer.writerow({**row, **returns})


def _cell(value):
    return "" if value is None else f"{value:.2f}"


def table(rows):
    """The printed table of `rows`: the returns at each budget beside the game's bar."""
    lines = [f"{'game':<15}{'frames':>12}{'2.5M':>10}{'5M':>10}{'10M':>10}{'PPO at 10M':>12}"]
    for row in rows:
        returns = "".join(f"{_cell(row[field]) or '-':>10}" for field in CSV_FIELDS[2:])
        lines.append(f"{row['game']:<15}{row['frames']:>12,}{returns}{BARS[row['game']]:>12g}")
    return "\n".join(lines)


def draw(runs, path):
    """The grid figure: each game's training return against frames, its bar dashed."""
    curves.draw_grid(runs, path, BARS, bar_label="PPO at 10M frames")

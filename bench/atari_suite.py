"""The Atari suite: six games on one set of defaults, beside PPO's published returns.

  .venv/bin/python -m bench.atari_suite [--docs_dir=DIR]

rebuilds, from the games' curves in DIR/atari/*.csv alone (bench/atari_curves.py; DIR: the
repository's docs/), the suite's table DIR/atari_results.csv (for each game the mean return of
the last 100 games at 2.5M, 5M and 10M frames: empty where its run did not get there, and
everywhere for a partial run; and the commit that trained it, so which defaults each row ran)
and grid figure DIR/atari_suite.png (each game's curve, a partial one dashed, PPO's returns at
5M and 10M marked), and prints the table. bench/learning.py trains
the games (`--runs=atari`, or one of them) and, as each ends, writes its curve there and
rebuilds both.
"""

import csv
import glob
import os
import sys

from absl import app, flags

from bench import atari_curves
from tools import curves, local_cluster

# PPO's return at 5M and 10M frames (Schulman et al. 2017, fig. 6; the top of its range over 3
# seeds). Pong's at 5M is also our bar: no regression below +16.
PPO = {
    "Pong": {5_000_000: 16.0, 10_000_000: 18.0},
    "Breakout": {5_000_000: 33.0, 10_000_000: 70.0},
    "SpaceInvaders": {5_000_000: 530.0, 10_000_000: 640.0},
    "BeamRider": {5_000_000: 690.0, 10_000_000: 750.0},
    "Qbert": {5_000_000: 2600.0, 10_000_000: 8000.0},
    "Seaquest": {5_000_000: 800.0, 10_000_000: 800.0},
}
# Every game's run: the defaults (config.Config: PPO's Atari recipe on this learner, replay ratio
# 2 with the clipped surrogate, 64-step updates), the same for every game.
SETTINGS = {
    "agent_name": "SimpleConvNetAgent",
    "num_envs_per_actor": 8,
    "total_environment_frames": 10_000_000,
}
BUDGETS = (2_500_000, 5_000_000, 10_000_000)
RETURN_FIELDS = ["return_2.5M", "return_5M", "return_10M"]
# A fixed header; each row's commit is in its curve and the printed table.
CSV_FIELDS = ["game", "frames", *RETURN_FIELDS]

flags.DEFINE_string(
    "docs_dir",
    str(local_cluster.REPO / "docs"),
    "The docs directory: the games' curves (atari/<Game>.csv), the suite's table "
    "(atari_results.csv) and figure (atari_suite.png).",
)
FLAGS = flags.FLAGS


def level_name(game):
    """The Gymnasium id of `game` (e.g. Breakout): no frame skip in the id, no sticky actions."""
    return f"{game}NoFrameskip-v4"


def settings(game):
    """The training settings of `game`'s run: SETTINGS with its level."""
    return {**SETTINGS, "level_name": level_name(game)}


def run_name(game):
    """The game's run in bench/learning.py's RUNS (e.g. space_invaders)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in game).lstrip("_")


def reference(game):
    """PPO's returns of `game` as the curves.Reference its figures mark."""
    return curves.Reference("PPO at 5M, 10M", tuple(PPO[game].items()))


def read_curves(docs_dir):
    """The atari_curves.GameCurve of every docs_dir/atari/*.csv, in the suite's order."""
    found = {c.game: c for c in map(atari_curves.read, glob.glob(atari_curves.path(docs_dir, "*")))}
    others = sorted(set(found) - set(PPO))
    if others:
        raise ValueError(f"{docs_dir}/atari: curves of games not in the suite: {', '.join(others)}")
    if not found:
        raise ValueError(f"{docs_dir}/atari: no game's curve (<Game>.csv)")
    return [found[game] for game in PPO if game in found]


def summary(game_curves):
    """One row per GameCurve of `game_curves`: {field of CSV_FIELDS: value, None where the run
    did not get there or is partial; "commit": str; "complete": bool}."""
    return [
        {
            "game": curve.game,
            "frames": int(curve.rows[-1, 0]) if len(curve.rows) else 0,
            **{
                field: curve.return_at(budget) if curve.complete else None
                for field, budget in zip(RETURN_FIELDS, BUDGETS, strict=True)
            },
            "commit": curve.commit,
            "complete": curve.complete,
        }
        for curve in game_curves
    ]


def write_csv(rows, path):
    """`rows` of summary() as CSV_FIELDS, returns with 2 decimals, empty where None."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            returns = {field: _cell(row[field]) for field in RETURN_FIELDS}
            writer.writerow({**row, **returns})


def _cell(value):
    return "" if value is None else f"{value:.2f}"


def table(rows):
    """The printed table of `rows`: the returns at each budget beside PPO's at 5M and 10M, and
    the commit that trained each."""
    lines = [
        f"{'game':<15}{'run':>9}{'frames':>12}{'2.5M':>10}{'5M':>10}{'10M':>10}"
        f"{'PPO at 5M':>11}{'PPO at 10M':>12}  commit"
    ]
    for row in rows:
        state = "complete" if row["complete"] else "partial"
        returns = "".join(f"{_cell(row[field]) or '-':>10}" for field in RETURN_FIELDS)
        ppo = PPO[row["game"]]
        lines.append(
            f"{row['game']:<15}{state:>9}{row['frames']:>12,}{returns}"
            f"{ppo[5_000_000]:>11g}{ppo[10_000_000]:>12g}  {row['commit'] or '-'}"
        )
    return "\n".join(lines)


def draw(game_curves, path):
    """Writes the grid figure `path`: a panel per GameCurve of `game_curves`, the mean return of
    the last 100 games against frames (dashed: a partial run), PPO's returns marked."""
    columns = min(3, len(game_curves))
    rows = -(-len(game_curves) // columns)
    # curves.plt: pyplot on the file-only backend tools/curves.py chose.
    figure, axes_grid = curves.plt.subplots(
        rows, columns, figsize=(4 * columns, 3.2 * rows), squeeze=False
    )
    for axes, curve in zip(axes_grid.flat, game_curves, strict=False):
        got = "" if curve.complete else f"partial, {curve.rows[-1, 0] / 1e6:g}M of "
        line = "-" if curve.complete else "--"
        axes.plot(*curve.rows[:, :2].T, line, color="C0", label=f"mean of last {curves.WINDOW}")
        curves.mark_reference(axes, reference(curve.game))
        axes.set(
            title=f"{curve.game} ({got}{curve.budget / 1e6:g}M frames)",
            xlabel="environment frames",
            ylabel="training return",
        )
        axes.grid(alpha=0.3)
        axes.legend(loc="lower right", fontsize="small")
    for axes in list(axes_grid.flat)[len(game_curves) :]:
        axes.set_visible(False)
    figure.tight_layout()
    curves.save(figure, path)


def rebuild(docs_dir):
    """Writes the suite's table and grid figure of the games' curves in `docs_dir` (module
    docstring); returns the table's rows (summary())."""
    game_curves = read_curves(docs_dir)
    rows = summary(game_curves)
    write_csv(rows, os.path.join(docs_dir, "atari_results.csv"))
    draw(game_curves, os.path.join(docs_dir, "atari_suite.png"))
    return rows


def main(argv):
    del argv
    try:
        rows = rebuild(FLAGS.docs_dir)
    except ValueError as e:
        print(f"bench.atari_suite: error: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    print(f"table: {FLAGS.docs_dir}/atari_results.csv; figure: {FLAGS.docs_dir}/atari_suite.png")
    return 0


if __name__ == "__main__":
    app.run(main)

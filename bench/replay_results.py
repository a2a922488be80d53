"""The replay samplings' results in the docs, kept as each run ends (a machine here keeps
nothing past a sitting), and their table rebuilt from those files alone.

  docs/replay/<Game>-<method>.csv    the run's curve, in bench/atari_curves.py's format (one row
                                     per 100K frames; a comment line with the commit, the CPU,
                                     the budget and complete|partial)
  docs/replay/<Game>-<method>.json   its timing figures (bench/replay_timing.py) and the training
                                     flags given on the command line
  docs/replay_results.csv            the table: a row per curve

<method> is the --replay_sampling, elite's with its strategy (`elite2`: strategy 2). The table's
returns are the mean of the last 100 games at 1M and 2M frames: empty where the run did not get
there, but given for a partial run that did (the learning rate's schedule depends on the
budget alone, so the frames a cut run reached are the same as a whole run's).
"""

import csv
import glob
import json
import os

from bench import atari_curves, replay_timing

METHODS = ("uniform", "prioritized", "elite", "attentive")
RETURN_FRAMES = {"return_1M": 1_000_000, "return_2M": 2_000_000}
FIELDS = [
    "game",
    "method",
    "frames",
    "complete",
    *RETURN_FRAMES,
    *replay_timing.FIGURES,
    "load_before",
]
SUBDIR = "replay"
TABLE = "replay_results.csv"


def label(method, elite_strategy):
    """The name of a run of --replay_sampling=`method` (with --replay_elite_strategy)."""
    return f"elite{elite_strategy}" if method == "elite" else method


def curve_path(docs_dir, game, method_label):
    """Where the curve of `game` under `method_label` (label()) goes in `docs_dir`."""
    return os.path.join(docs_dir, SUBDIR, f"{game}-{method_label}.csv")


def timing_path(csv_path):
    """The timing figures beside the curve `csv_path`."""
    return csv_path.removesuffix(".csv") + ".json"


def write(csv_path, curve, provenance, timing):
    """Writes the atari_curves.GameCurve `curve` to `csv_path` (curve_path()), its comment line
    led by `provenance`, and the dict `timing` beside it (timing_path())."""
    atari_curves.write(curve, csv_path, provenance)
    with open(timing_path(csv_path), "w") as f:
        json.dump(timing, f, indent=1, sort_keys=True)
        f.write("\n")


def read_rows(docs_dir):
    """A row (FIELDS: value, None where empty) per curve in `docs_dir`/SUBDIR, by game, then in
    METHODS' order."""
    rows = [_row(path) for path in glob.glob(os.path.join(docs_dir, SUBDIR, "*-*.csv"))]
    return sorted(rows, key=lambda row: (row["game"], _method_order(row["method"])))


def _row(csv_path):
    curve = atari_curves.read(csv_path)  # its `game`: the file's name, <Game>-<method>
    game, _, method_label = curve.game.partition("-")
    timing = {}
    if os.path.exists(timing_path(csv_path)):
        with open(timing_path(csv_path)) as f:
            timing = json.load(f)
    return {
        "game": game,
        "method": method_label,
        "frames": int(curve.rows[-1, 0]) if len(curve.rows) else 0,
        "complete": curve.complete,
        **{field: curve.return_at(frames) for field, frames in RETURN_FRAMES.items()},
        **{field: timing.get(field) for field in (*replay_timing.FIGURES, "load_before")},
    }


def _method_order(method_label):
    """(the index of its sampling in METHODS, the label): elite's strategies side by side."""
    base = "elite" if method_label.startswith("elite") else method_label
    return (METHODS.index(base) if base in METHODS else len(METHODS), method_label)


def write_table(rows, path):
    """`rows` of read_rows() as FIELDS, figures with 2 decimals, empty where None."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({field: _cell(value) for field, value in row.items()})


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def rebuild(docs_dir):
    """Writes `docs_dir`/TABLE from every curve and timing file in `docs_dir`/SUBDIR; returns
    its rows."""
    rows = read_rows(docs_dir)
    write_table(rows, os.path.join(docs_dir, TABLE))
    return rows


def table(rows):
    """The printed table of `rows` (read_rows())."""
    lines = [
        f"{'game':<12}{'method':<12}{'run':>9}{'frames':>11}{'1M':>9}{'2M':>9}"
        f"{'frames/s':>10}{'learner CPU ms/sample':>23}{'load':>7}"
    ]
    for row in rows:
        state = "complete" if row["complete"] else "partial"
        lines.append(
            f"{row['game']:<12}{row['method']:<12}{state:>9}{row['frames']:>11,}"
            f"{_cell(row['return_1M']) or '-':>9}{_cell(row['return_2M']) or '-':>9}"
            f"{_cell(row['frames_per_sec']) or '-':>10}"
            f"{_cell(row['learner_cpu_ms_per_trained_sample']) or '-':>23}"
            f"{_cell(row['load_average']) or '-':>7}"
        )
    return "\n".join(lines)

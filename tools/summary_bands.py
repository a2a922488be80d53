"""Runs' training statistics side by side: the mean of each summary per band of frames.

  .venv/bin/python -m tools.summary_bands LOGDIR [LOGDIR...] \
      [--tags=policy/entropy_fraction,value/explained_variance] [--band_frames=500000]

For the A/B diagnostics of a game (bench/learning.py's `--ab`): one table per tag, a row per
LOGDIR (named as in tools/curves.py's legend), a column per band of frames [k * band, (k + 1) *
band), each cell the mean of the values the learner wrote at steps in that band (its
summaries' step is the global frame count), '-' where it wrote none.
"""

import numpy as np
from absl import app, flags

from tools import curves, summary_reader

DEFAULT_TAGS = (
    "policy/entropy_fraction",
    "policy/mean_abs_log_rho",
    "policy/surrogate_clipped_fraction",
    "value/explained_variance",
    "value/advantage_std",
    "policy_lag",
)

_TAGS = flags.DEFINE_list("tags", list(DEFAULT_TAGS), "The scalar summaries to tabulate.")
_BAND_FRAMES = flags.DEFINE_integer(
    "band_frames", 500_000, "Frames per band (column).", lower_bound=1
)


def band_means(points, band_frames):
    """{band index k: the mean of the values at steps in [k * band_frames, (k + 1) *
    band_frames)} of (step, value) `points`; bands without points are absent."""
    bands = {}
    for step, value in points:
        bands.setdefault(step // band_frames, []).append(value)
    return {band: float(np.mean(values)) for band, values in bands.items()}


def table(tag, runs, band_frames):
    """The lines of one tag's table: a header of band ends in millions of frames, then one row
    per (name, {band: mean}) of `runs`, the bands being those of any run."""
    columns = sorted({band for _, means in runs for band in means})
    name_width = max(len(tag), *(len(name) for name, _ in runs))
    header = " ".join(f"{(band + 1) * band_frames / 1e6:>8g}M" for band in columns)
    lines = [f"{tag:<{name_width}} {header}"]
    for name, means in runs:
        cells = (f"{means[band]:>9.4g}" if band in means else f"{'-':>9}" for band in columns)
        lines.append(f"{name:<{name_width}} {' '.join(cells)}")
    return lines


def main(argv):
    logdirs = argv[1:]
    if not logdirs:
        raise app.UsageError("Give at least one LOGDIR.")
    names = curves.run_names(logdirs)
    for tag in _TAGS.value:
        runs = [
            (name, band_means(summary_reader.scalars(logdir, tag), _BAND_FRAMES.value))
            for name, logdir in zip(names, logdirs, strict=True)
        ]
        if not any(means for _, means in runs):
            print(f"{tag}: not in any of the logdirs")
            continue
        print("\n".join(table(tag, runs, _BAND_FRAMES.value)), end="\n\n")


if __name__ == "__main__":
    app.run(main)

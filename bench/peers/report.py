"""`--part=report`: time to the target beside SF, from the committed files alone.

Per configuration (bench/peers/systems.py): frames to the target (the first frames at which the
mean of the last 100 games reached it, docs/peers/<system>-<config>-<Game>.csv; the mean over
its runs where it has several, <Game>-run<N>.csv, as one run is one sample), the steady
frames/s, CPU-seconds per 1M frames and peak PSS of the speed run on one kind of machine
(docs/peers/speed-<Game>-<machine>.json), and hours to the target = frames / frames/s: one
table per kind of machine measured, as frames to the target hold on any machine and frames/s
only on its own. SF's defaults are PPO's Atari recipe (CleanRL's): without a run of its own,
its frames are those of PPO's published curve (bench/atari_suite.py, the first of its points
at or above the target) and the table says so. Then ours / SF for each configuration both
systems have, each of ours' hours to the target over those of SF's faster configuration (the
target), and a PNG of the mean return of the last 100 games against estimated wall-clock hours
(frames / the configuration's steady frames/s).
"""

import dataclasses

import numpy as np

from bench import atari_suite
from bench.peers import frames, speed, systems
from tools import curves

PPO_SOURCE = "PPO's published curve"
COLUMNS = ("frames", "frames_per_second", "hours", "cpu_secs_per_1m_frames", "peak_pss_mb")
HEADERS = ("frames to target", "frames/s", "hours", "CPU-s/1M frames", "peak PSS MiB")
WIDTHS = (18, 10, 7, 17, 14)


@dataclasses.dataclass(frozen=True)
class Row:
    """One configuration's figures; None where the committed files have none.

    source: where `frames` comes from: "run" (its one run), "runs: A, B" (the mean of its runs'
      frames to the target, each run's listed, "not reached by N" for a run that stopped
      first), PPO_SOURCE, "not reached by N" or "no run".
    runs: float64 [N, 3] of each of its curves' games (none without a run).
    """

    system: str
    config: str
    source: str
    frames: int | None
    frames_per_second: float | None
    cpu_secs_per_1m_frames: float | None
    peak_pss_mb: float | None
    runs: tuple[np.ndarray, ...]

    @property
    def name(self):
        return f"{self.system}-{self.config}"

    @property
    def hours(self):
        if self.frames is None or not self.frames_per_second:
            return None
        return self.frames / self.frames_per_second / 3600


def ppo_frames(game, target):
    """Frames of PPO's published points of `game` at which its return first is `target` or more,
    or None."""
    reached = [at for at, value in sorted(atari_suite.PPO[game].items()) if value >= target]
    return reached[0] if reached else None


def frames_to_target(runs, target):
    """(mean frames at which `runs` (curves, [N, 3] each) reached `target`, or None; the source
    that says so: Row.source)."""
    reached = [curves.first_frames_at(points, target) for points in runs]
    got = [at for at in reached if at is not None]
    if not got:
        return None, f"not reached by {max(int(p[-1, 0]) for p in runs):,}"
    if len(runs) == 1:
        return got[0], "run"
    each = [
        f"{at:,}" if at is not None else f"not reached by {int(points[-1, 0]):,}"
        for at, points in zip(reached, runs, strict=True)
    ]
    return round(float(np.mean(got))), "runs: " + ", ".join(each)


def row(peers_dir, game, target, system, config, speeds):
    """The Row of a configuration from its curves in `peers_dir` and `speeds`
    (speed.summarize)."""
    runs = tuple(
        points
        for points in map(curves.read_csv, frames.curve_paths(peers_dir, system, config, game))
        if len(points)
    )
    if runs:
        reached, source = frames_to_target(runs, target)
    elif (system, config) == ("sf", "defaults"):
        reached, source = ppo_frames(game, target), PPO_SOURCE
    else:
        reached, source = None, "no run"
    figures = speeds.get(f"{system}-{config}", {})
    return Row(
        system,
        config,
        source,
        reached,
        figures.get("frames_per_second"),
        figures.get("cpu_secs_per_1m_frames"),
        figures.get("peak_pss_mb"),
        runs,
    )


def rows(peers_dir, game, target, machine_kind):
    """The Row of every configuration (systems.CONFIGURATIONS' order), at the speeds measured on
    `machine_kind` (speed.machine)."""
    result = speed.read_result(speed.result_path(peers_dir, game, machine_kind))
    speeds = result["configurations"] if result else {}
    return [
        row(peers_dir, game, target, *name.split("-"), speeds) for name in systems.CONFIGURATIONS
    ]


def ratios(table_rows):
    """{config: {column: ours / SF}} of each configuration both systems have (None where
    either lacks the figure)."""
    by_name = {r.name: r for r in table_rows}
    result = {}
    for config in systems.CONFIGS["sf"]:
        ours, sf = by_name[f"ours-{config}"], by_name[f"sf-{config}"]
        result[config] = {
            column: getattr(ours, column) / getattr(sf, column)
            if getattr(ours, column) is not None and getattr(sf, column)
            else None
            for column in COLUMNS
        }
    return result


def against_faster_sf(table_rows):
    """(SF's configuration with the fewest hours to the target, {ours' configuration: its hours
    / that one's}); (None, {}) while no SF configuration has its hours."""
    timed = [r for r in table_rows if r.system == "sf" and r.hours is not None]
    if not timed:
        return None, {}
    faster = min(timed, key=lambda r: r.hours)
    ours = [r for r in table_rows if r.system == "ours"]
    return faster.name, {r.name: r.hours / faster.hours for r in ours if r.hours is not None}


def table(table_rows):
    """The printed table: one line per configuration, ours / SF per configuration both have,
    then each of ours' hours over those of SF's faster configuration."""
    lines = [f"{'configuration':<20}{_line(HEADERS)}  frames from"]
    for r in table_rows:
        cells = [_cell(getattr(r, column), column) for column in COLUMNS]
        lines.append(f"{r.name:<20}{_line(cells)}  {r.source}")
    lines.append("\nours / SF")
    for config, of in ratios(table_rows).items():
        lines.append(f"{config:<20}{_line([_ratio(of[column]) for column in COLUMNS])}")
    faster, hours = against_faster_sf(table_rows)
    if faster:
        lines.append(f"\nhours to the target, ours / {faster} (SF's faster)")
        lines += [f"{name:<20}{_ratio(ratio):>10}" for name, ratio in hours.items()]
    return "\n".join(lines)


def _line(cells):
    return "".join(f"{cell:>{width}}" for cell, width in zip(cells, WIDTHS, strict=True))


def _cell(value, column):
    if value is None:
        return "-"
    if column == "hours":
        return f"{value:.2f}"
    return f"{value:,.0f}"


def _ratio(value):
    return "-" if value is None else f"{value:.2f}"


def draw(table_rows, game, target, machine_kind, path):
    """The PNG `path`: each configuration's mean of the last 100 games against estimated hours
    (frames / its steady frames/s on `machine_kind`); PPO's published points at SF's defaults'
    frames/s."""
    figure, axes = curves.plt.subplots(figsize=curves.FIGURE_INCHES[::-1])
    for i, r in enumerate(table_rows):
        if not r.frames_per_second:
            continue
        to_hours = 1 / r.frames_per_second / 3600
        for run, points in enumerate(r.runs):
            label = r.name if run == 0 else None
            axes.plot(points[:, 0] * to_hours, points[:, 2], color=f"C{i}", label=label)
        if r.source == PPO_SOURCE:
            at, values = np.array(sorted(atari_suite.PPO[game].items()), np.float64).T
            axes.plot(
                at * to_hours,
                values,
                "*",
                color=f"C{i}",
                markersize=10,
                label=f"{r.name}: {PPO_SOURCE}",
            )
    axes.axhline(target, color="gray", linestyle="--", label=f"target {target:g}")
    axes.set(
        title=f"{atari_suite.level_name(game)}: ours beside Sample Factory 2.1.1 ({machine_kind})",
        xlabel="estimated wall-clock hours (frames / steady frames/s)",
        ylabel=f"mean return of the last {curves.WINDOW} games",
    )
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    curves.save(figure, path)

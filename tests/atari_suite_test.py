"""bench.atari_curves and bench.atari_suite: a game's curve in docs/atari/<Game>.csv, and the
suite's table and grid figure rebuilt from those files alone."""

import re
import subprocess
import sys

import cv2
import numpy as np
import pytest

from bench import atari_curves, atari_suite
from tools import curves, local_cluster

PROVENANCE = "commit abc1234, CPU Test CPU"
BATCH = 2 * 32 * 4  # frames of a batch of the default Atari run: 2 unrolls x 32 steps x 4


def run_curves(game, frames, returns, entropy=()):
    """The RunCurves of games ending at `frames` with `returns`, and `entropy` [K, 2]."""
    frames, returns = np.asarray(frames, np.float64), np.asarray(returns, np.float64)
    return curves.RunCurves(
        name=game,
        returns=np.column_stack([frames, returns, curves.running_mean(returns)]),
        evaluation=np.zeros([0, 2]),
        entropy=np.asarray(entropy, np.float64).reshape(-1, 2),
    )


def written(tmp_path, run, budget, game="Breakout"):
    """The lines of `run`'s docs CSV written to tmp_path/atari/<game>.csv, and its path."""
    path = atari_curves.path(tmp_path, game)
    atari_curves.write(atari_curves.of_run(run, game, budget, BATCH), path, PROVENANCE)
    return open(path).read().splitlines(), path


def test_run_names_and_levels_of_the_games():
    assert atari_suite.run_name("SpaceInvaders") == "space_invaders"
    assert atari_suite.run_name("Pong") == "pong"
    assert atari_suite.level_name("BeamRider") == "BeamRiderNoFrameskip-v4"


def test_a_row_per_100k_frames_of_the_last_100_games_finished_by_then():
    # 300 games, one every 20K frames (the last at 6M), each returning its index; a 10M budget.
    frames = 20_000 * np.arange(1, 301)
    run = run_curves("Breakout", frames, np.arange(300))

    curve = atari_curves.of_run(run, "Breakout", 10_000_000, BATCH)

    assert not curve.complete
    np.testing.assert_array_equal(curve.rows[:, 0], 100_000 * np.arange(1, 61))  # to 6M
    # By 2.5M frames 125 games (indexes 0..124) ended: the mean of 25..124.
    assert curve.return_at(2_500_000) == np.mean(np.arange(25, 125))
    assert curve.rows[24, 2] == 125
    assert curve.return_at(5_000_000) == np.mean(np.arange(150, 250))
    assert curve.return_at(10_000_000) is None  # not got there


def test_a_partial_curve_has_rows_as_far_as_the_run_got_and_empty_cells_before_data(tmp_path):
    # Games at 150K and 250K frames; entropy summaries at 50K and 220K; budget 300K.
    run = run_curves("Breakout", [150_000, 250_000], [1, 2], [[50_000, 0.95], [220_000, 0.7]])

    lines, path = written(tmp_path, run, 300_000)

    assert lines == [
        "# commit abc1234, CPU Test CPU, budget 300,000 frames, partial",
        "frames,return_mean_100,games,entropy",
        "100000,,0,0.9500",
        "200000,1.00,1,0.9500",
    ]
    curve = atari_curves.read(path)
    assert (curve.game, curve.budget, curve.complete) == ("Breakout", 300_000, False)
    assert curve.commit == "abc1234"
    np.testing.assert_array_equal(curve.rows[0], [100_000, np.nan, 0, 0.95])


def test_a_run_whose_last_game_ended_before_its_budget_is_complete_to_its_budget(tmp_path):
    # The run: its last game at 4,999,680 frames; the learner stopped at its first count
    # past 5M, 5,000,192, where its closing progress summaries (the entropy) are.
    entropy = [[4_990_000, 0.5], [5_000_192, 0.4]]
    run = run_curves("Breakout", [2_000_000, 4_999_680], [10, 30], entropy)

    lines, path = written(tmp_path, run, 5_000_000)

    assert lines[0] == "# commit abc1234, CPU Test CPU, budget 5,000,000 frames, complete"
    assert lines[-1] == "5000000,20.00,2,0.5000"
    assert len(lines) == 2 + 50
    assert atari_curves.read(path).return_at(5_000_000) == 20.0


def test_a_run_within_one_batch_of_its_budget_counts_as_there(tmp_path):
    # Summaries to 4,999,680 frames only, batches of 512 frames (e.g. 2 learners' 256 each).
    run = run_curves("Breakout", [2_000_000, 4_999_680], [10, 30], [[4_999_680, 0.5]])
    curve = atari_curves.of_run(run, "Breakout", 5_000_000, 2 * BATCH)
    assert curve.complete and curve.return_at(5_000_000) == 20.0
    # 4,900,000: 100K frames short, partial; its rows end there.
    run = run_curves("Breakout", [2_000_000, 4_900_000], [10, 30], [[4_900_000, 0.5]])
    curve = atari_curves.of_run(run, "Breakout", 5_000_000, 2 * BATCH)
    assert not curve.complete and curve.rows[-1, 0] == 4_900_000
    assert curve.return_at(5_000_000) is None


def test_the_one_batch_tolerance():
    assert atari_curves.reaches(4_999_680, 5_000_000, 2 * BATCH)
    assert atari_curves.reaches(5_000_000 - BATCH, 5_000_000, BATCH)
    assert atari_curves.reaches(5_000_192, 5_000_000, BATCH)
    assert not atari_curves.reaches(5_000_000 - BATCH - 1, 5_000_000, BATCH)
    assert not atari_curves.reaches(4_900_000, 5_000_000, 2 * BATCH)


def test_the_provenance_names_the_commit_and_the_cpu():
    provenance = atari_curves.provenance(local_cluster.REPO)
    assert re.fullmatch(r"commit [0-9a-f]{7,}(-dirty)?, CPU .+", provenance), provenance
    assert atari_curves.cpu_model("/dev/null") == "unknown"


def write_docs(docs_dir):
    """Hand-written curves in docs_dir/atari: Pong complete to 5M, Breakout partial at 4.9M of
    5M, Qbert complete to 10M; 1.00 wherever a return is not given."""
    atari = docs_dir / "atari"
    atari.mkdir(parents=True)
    curves_of_games = {
        "Pong": ("complete", 5_000_000, 5_000_000, {2_500_000: "5.25", 5_000_000: "17.10"}),
        "Breakout": ("partial", 5_000_000, 4_900_000, {2_500_000: "12.00"}),
        "Qbert": (
            "complete",
            10_000_000,
            10_000_000,
            {2_500_000: "900.00", 5_000_000: "2400.50", 10_000_000: "7900.00"},
        ),
    }
    for game, (state, budget, last, returns) in curves_of_games.items():
        lines = [f"# {PROVENANCE}, budget {budget:,} frames, {state}", atari_curves.HEADER]
        lines += [
            f"{frames},{returns.get(frames, '1.00')},{frames // 50_000},0.5000"
            for frames in range(100_000, last + 1, 100_000)
        ]
        (atari / f"{game}.csv").write_text("\n".join(lines) + "\n")


def test_the_table_is_rebuilt_from_the_docs_curves_alone(tmp_path):
    write_docs(tmp_path)

    rows = atari_suite.rebuild(tmp_path)

    # In the suite's order; the partial Breakout: how far it got, no returns.
    assert (tmp_path / "atari_results.csv").read_text().splitlines() == [
        "game,frames,return_2.5M,return_5M,return_10M",
        "Pong,5000000,5.25,17.10,",
        "Breakout,4900000,,,",
        "Qbert,10000000,900.00,2400.50,7900.00",
    ]
    table = atari_suite.table(rows).splitlines()
    pong = ["Pong", "complete", "5,000,000", "5.25", "17.10", "-", "16", "18", "abc1234"]
    assert table[1].split() == pong
    breakout = ["Breakout", "partial", "4,900,000", "-", "-", "-", "33", "70", "abc1234"]
    assert table[2].split() == breakout
    image = cv2.imread(str(tmp_path / "atari_suite.png"))
    height, width = image.shape[:2]
    assert width > height > 0  # one row of 3 panels


def test_the_command_rebuilds_them_and_prints_the_table(tmp_path):
    write_docs(tmp_path)

    finished = subprocess.run(
        [sys.executable, "-m", "bench.atari_suite", f"--docs_dir={tmp_path}"],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "Qbert" in finished.stdout
    assert (tmp_path / "atari_results.csv").exists() and (tmp_path / "atari_suite.png").exists()


def test_no_curves_or_a_game_not_in_the_suite_is_an_error(tmp_path):
    (tmp_path / "atari").mkdir()
    with pytest.raises(ValueError, match="no game's curve"):
        atari_suite.rebuild(tmp_path)
    (tmp_path / "atari" / "Tetris.csv").write_text(
        f"# {PROVENANCE}, budget 5,000,000 frames, partial\n{atari_curves.HEADER}\n"
    )
    with pytest.raises(ValueError, match="not in the suite: Tetris"):
        atari_suite.rebuild(tmp_path)


def test_the_grid_figure_has_a_panel_per_game(tmp_path):
    game_curves = [
        atari_curves.of_run(run_curves(game, [1e6, 2e6, 3e6], [0, 1, 2]), game, 3_000_000, BATCH)
        for game in atari_suite.PPO
    ]
    path = tmp_path / "grid.png"
    atari_suite.draw(game_curves, path)
    image = cv2.imread(str(path))
    height, width = image.shape[:2]
    assert width > height > 0  # 2 rows of 3 panels


def test_each_game_is_marked_with_its_own_ppo_returns():
    assert atari_suite.reference("Breakout").points == ((5_000_000, 33.0), (10_000_000, 70.0))
    assert atari_suite.reference("Pong").points == ((5_000_000, 16.0), (10_000_000, 18.0))

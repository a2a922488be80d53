"""bench.atari_suite: the returns at each budget, the results CSV, the table and the grid."""

import cv2
import numpy as np

from bench import atari_suite
from tools import curves


def run_curves(game, frames, returns):
    frames, returns = np.asarray(frames, np.float64), np.asarray(returns, np.float64)
    return curves.RunCurves(
        name=game,
        returns=np.column_stack([frames, returns, curves.running_mean(returns)]),
        evaluation=np.zeros([0, 2]),
        entropy=np.zeros([0, 2]),
    )


def test_run_names_and_levels_of_the_games():
    assert atari_suite.run_name("SpaceInvaders") == "space_invaders"
    assert atari_suite.run_name("Pong") == "pong"
    assert atari_suite.level_name("BeamRider") == "BeamRiderNoFrameskip-v4"


def test_the_mean_at_a_budget_is_of_the_last_100_games_finished_by_then():
    # 300 games, one every 20K frames (the last at 6M), each returning its index.
    frames = 20_000 * np.arange(1, 301)
    returns = np.arange(300)
    run = run_curves("Breakout", frames, returns)
    # By 2.5M frames 125 games (indexes 0..124) ended: the mean of 25..124.
    assert atari_suite.mean_return_at(run.returns, 2_500_000) == np.mean(np.arange(25, 125))
    assert atari_suite.mean_return_at(run.returns, 5_000_000) == np.mean(np.arange(150, 250))
    assert atari_suite.mean_return_at(run.returns, 10_000_000) is None  # not got there


def test_the_csv_has_the_issue_header_and_empty_cells_where_a_run_stopped(tmp_path):
    runs = [
        run_curves("Pong", [3_000_000, 6_000_000, 10_000_000], [-21, 0, 21]),
        run_curves("Qbert", [1_000_000, 4_000_000], [250, 500]),
    ]
    rows = atari_suite.summary(runs)
    path = tmp_path / "docs" / "atari_results.csv"
    atari_suite.write_csv(rows, path)
    assert path.read_text().splitlines() == [
        "game,frames,return_2.5M,return_5M,return_10M",
        "Pong,10000000,,-21.00,0.00",
        "Qbert,4000000,250.00,,",
    ]
    table = atari_suite.table(rows).splitlines()
    assert table[1].split() == ["Pong", "10,000,000", "-", "-21.00", "0.00", "18"]
    assert table[2].split() == ["Qbert", "4,000,000", "250.00", "-", "-", "8000"]


def test_the_grid_figure_has_a_panel_per_game(tmp_path):
    games = list(atari_suite.BARS)
    runs = [run_curves(game, [1e6, 2e6, 3e6], [0, 1, 2]) for game in games]
    path = tmp_path / "grid.png"
    atari_suite.draw(runs, path)
    image = cv2.imread(str(path))
    height, width = image.shape[:2]
    assert width > height > 0  # 2 rows of 3 panels

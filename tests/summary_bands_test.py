"""tools/summary_bands.py tabulates the mean of each summary per band of frames, run by run."""

import pytest
import tensorflow as tf
from absl.testing import flagsaver

from tools import summary_bands


def _write(logdir, tag, points):
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for step, value in points:
            tf.summary.scalar(tag, value, step=step)
    writer.close()


def test_band_means_average_the_values_of_each_band_and_leave_empty_bands_out():
    points = [(0, 1.0), (499, 3.0), (500, 10.0), (1600, -4.0), (1999, -2.0)]
    assert summary_bands.band_means(points, 500) == {0: 2.0, 1: 10.0, 3: -3.0}


def test_table_has_a_column_per_band_of_any_run_and_a_dash_where_a_run_has_none():
    lines = summary_bands.table("policy_lag", [("a", {0: 1.5, 1: 2.0}), ("b", {1: 3.25})], 500_000)
    assert lines[0].split() == ["policy_lag", "0.5M", "1M"]
    assert lines[1].split() == ["a", "1.5", "2"]
    assert lines[2].split() == ["b", "-", "3.25"]


def test_main_prints_each_runs_band_means_and_names_a_tag_no_run_has(tmp_path, capsys):
    _write(tmp_path / "with_replay", "policy_lag", [(100, 10.0), (300, 12.0), (700, 11.0)])
    _write(tmp_path / "without_replay", "policy_lag", [(900, 4.0)])
    with flagsaver.as_parsed(tags="policy_lag,value/mean", band_frames="500"):
        summary_bands.main(
            ["summary_bands", str(tmp_path / "with_replay"), str(tmp_path / "without_replay")]
        )
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["policy_lag", "0.0005M", "0.001M"]
    assert printed[1].split() == ["with_replay", "11", "11"]
    assert printed[2].split() == ["without_replay", "-", "4"]
    assert "value/mean: not in any of the logdirs" in printed


def test_main_asks_for_a_logdir():
    with pytest.raises(summary_bands.app.UsageError, match="LOGDIR"):
        summary_bands.main(["summary_bands"])

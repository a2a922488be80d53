"""Which evaluations the evaluator records a video of (evaluation.records_video)."""

from evaluation import records_video


def test_the_first_evaluation_and_every_kth_record_a_video():
    recorded = [n for n in range(1, 16) if records_video(n, every=5)]
    assert recorded == [1, 5, 10, 15]


def test_every_evaluation_records_with_1_and_none_with_0():
    assert all(records_video(n, every=1) for n in range(1, 6))
    assert not any(records_video(n, every=0) for n in range(1, 6))

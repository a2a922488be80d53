"""replay_selection.py: each elite strategy's and attentive replay's choice on hand-made
distances and sample counts, ties, the candidate set's size (capped by the memory) and the
distances themselves."""

import numpy as np
import pytest

import replay_selection as selection


def test_strategy_1_takes_the_closest():
    distances = [0.5, 0.1, 0.9, 0.3]
    np.testing.assert_array_equal(selection.elite_choice(1, distances, [0, 9, 0, 9], 2), [1, 3])


def test_ties_go_to_the_candidate_drawn_first():
    distances = [0.2, 0.1, 0.2, 0.1, 0.2]
    np.testing.assert_array_equal(selection.choose(distances, 3), [1, 3, 0])
    # Equal counts and distances too: candidate order (random, as drawn) decides.
    np.testing.assert_array_equal(selection.elite_choice(3, distances, [1] * 5, 3), [1, 3, 0])


def test_strategy_2_takes_the_closest_of_each_group_of_consecutive_ranks():
    # By distance: positions 1, 3, 5 | 4, 2 | 0, 6 (7 candidates in groups of 3, 2 and 2).
    distances = [0.5, 0.0, 0.4, 0.1, 0.3, 0.2, 0.6]
    np.testing.assert_array_equal(selection.elite_choice(2, distances, [0] * 7, 3), [1, 4, 0])


def test_strategy_3_takes_the_least_replayed_the_closest_among_equals():
    distances = [0.1, 0.2, 0.3, 0.4]
    counts = [2, 0, 1, 0]
    np.testing.assert_array_equal(selection.elite_choice(3, distances, counts, 2), [1, 3])
    np.testing.assert_array_equal(selection.elite_choice(3, distances, counts, 3), [1, 3, 2])


def test_strategy_4_takes_the_least_replayed_of_each_group():
    distances = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]  # groups: 0, 1 | 2, 3 | 4, 5
    counts = [1, 0, 0, 2, 0, 0]
    np.testing.assert_array_equal(selection.elite_choice(4, distances, counts, 3), [1, 2, 4])


@pytest.mark.parametrize("strategy", [1, 2, 3, 4])
def test_choosing_as_many_as_there_are_candidates_takes_each_once(strategy):
    distances = np.array([0.3, 0.1, 0.2])
    chosen = selection.elite_choice(strategy, distances, [0, 1, 0], 3)
    assert sorted(chosen) == [0, 1, 2]
    with pytest.raises(ValueError, match="cannot choose 4 of 3 candidates"):
        selection.elite_choice(strategy, distances, [0, 1, 0], 4)


def test_the_candidate_set_is_lambda_times_r_capped_by_the_memory_and_annealed_to_r():
    assert selection.candidate_count(6, 4, stored=64, anneal=0.0, progress=0.5) == 24
    # A memory smaller than lambda x R: every stored unroll is a candidate, each once.
    assert selection.candidate_count(6, 4, stored=10, anneal=0.0, progress=0.0) == 10
    assert selection.candidate_count(6, 4, stored=64, anneal=0.5, progress=1.0) == 15
    # Annealed all the way: R candidates, all chosen, i.e. uniform replay.
    assert selection.candidate_count(6, 4, stored=64, anneal=1.0, progress=3.0) == 6
    assert selection.candidate_count(6, 1, stored=64, anneal=0.0, progress=0.0) == 6


def test_candidates_are_drawn_without_replacement_up_to_the_whole_memory():
    rng = np.random.default_rng(0)
    whole = selection.draw_candidates(rng, stored=10, count=10)
    assert sorted(whole) == list(range(10))
    some = selection.draw_candidates(rng, stored=10, count=6)
    assert len(set(some)) == 6 and set(some) <= set(range(10))


def test_policy_kl_is_the_mean_over_states_and_ignores_a_shift_of_the_logits():
    behaviour = np.log([[[0.5, 0.5], [0.9, 0.1]]])  # [N=1, K=2, A=2]
    current = np.log([[[0.5, 0.5], [0.5, 0.5]]])
    expected = (0.0 + 0.9 * np.log(0.9 / 0.5) + 0.1 * np.log(0.1 / 0.5)) / 2
    np.testing.assert_allclose(selection.policy_kl(behaviour, current), [expected])
    np.testing.assert_allclose(selection.policy_kl(behaviour, behaviour + 7.0), [0.0], atol=1e-12)


def test_distance_to_mean_averages_each_candidates_states():
    features = np.array([[[0.0, 0.0], [3.0, 4.0]], [[1.0, 0.0], [1.0, 0.0]]])  # [N=2, K=2, F=2]
    np.testing.assert_allclose(selection.distance_to_mean(features, np.zeros(2)), [2.5, 1.0])

"""PixelBandit-v0: what it shows, what it rewards, and how accuracy is read from returns."""

import gymnasium as gym
import numpy as np
import pytest

import environments
import pixel_games


def square_third(frame):
    """The third of the screen holding the square (found in the pixels, below the bar)."""
    ys, xs = np.nonzero(frame[2 * pixel_games.BAR_ROWS :, :, 0] == pixel_games.BRIGHT)
    assert len(xs) == pixel_games.SQUARE**2
    centre = xs.min() + pixel_games.SQUARE / 2
    return min(int(centre * 3 // pixel_games.SIZE), 2)


def test_frames_look_like_preprocessed_atari_and_reward_the_squares_third():
    env = gym.make(pixel_games.ID)
    frame, _ = env.reset(seed=0)
    assert frame.shape == (84, 84, 4) and frame.dtype == np.uint8
    assert all(np.array_equal(frame[..., 0], frame[..., i]) for i in range(4))
    for step in range(1, pixel_games.STEPS_PER_EPISODE + 1):
        right = square_third(frame)
        frame, reward, terminated, truncated, _ = env.step(right)
        assert reward == 1.0 and not truncated
        assert terminated == (step == pixel_games.STEPS_PER_EPISODE)
        if not terminated:  # the bar shows the steps taken
            assert np.count_nonzero(frame[0, :, 0] == pixel_games.BRIGHT) == 4 * step
    frame, _ = env.reset(seed=1)
    wrong = (square_third(frame) + 1) % 3
    assert env.step(wrong)[1:3] == (0.0, True)  # a wrong pick ends the game


def test_a_random_policy_is_right_a_third_of_the_time():
    env = environments.create_vector_environment(pixel_games.ID, num_envs=4, seed=0)
    env.initial()
    rng = np.random.default_rng(0)
    returns = []
    while len(returns) < 3000:
        output = env.step(rng.integers(0, 3, 4))
        returns += output.info.episode_return[output.info.game_over].tolist()
    assert pixel_games.accuracy(returns) == pytest.approx(1 / 3, abs=0.02)
    assert np.mean(returns) == pytest.approx(0.5, abs=0.05)


def test_accuracy_counts_one_wrong_pick_per_game_that_ended_early():
    assert pixel_games.accuracy([20, 20]) == 1.0
    assert pixel_games.accuracy([0, 0, 3]) == 3 / 6
    assert pixel_games.accuracy([9, 20]) == 29 / 30

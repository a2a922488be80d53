"""pixel_games: what PixelBandit-v0 and PixelCatch-v0 show, what they reward, and how accuracy
is read from returns."""

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


def ball_position(frame):
    """(top row, left column) of the ball in one frame (above the paddle's rows)."""
    rows = pixel_games.SIZE - pixel_games.CATCH_PADDLE_ROWS
    ys, xs = np.nonzero(frame[:rows] == pixel_games.BRIGHT)
    return ys.min(), xs.min()


def test_catch_stacks_the_last_four_frames_and_rewards_at_the_end_only():
    env = gym.make(pixel_games.ID_CATCH)
    frames, _ = env.reset(seed=3)
    assert frames.shape == (84, 84, 4) and frames.dtype == np.uint8
    rewards, done = [], False
    while not done:
        previous = frames
        frames, reward, done, truncated, _ = env.step(1)  # the paddle stays
        rewards.append(reward)
        assert not truncated
        # Oldest first: the newest frame of the last observation is now the one before last.
        np.testing.assert_array_equal(frames[..., 2], previous[..., 3])
        if not done:  # the ball fell by CATCH_FALL between the two newest frames
            (y0, _), (y1, _) = ball_position(frames[..., 2]), ball_position(frames[..., 3])
            assert y1 - y0 == pixel_games.CATCH_FALL
    assert len(rewards) == 19 and rewards[:-1] == [0.0] * 18 and rewards[-1] in (-1.0, 1.0)


@pytest.mark.parametrize(
    "policy, expected_return",
    [("random", -0.5), ("tracker", 1.0)],
)
def test_catch_a_random_paddle_misses_most_balls_and_a_tracking_one_none(policy, expected_return):
    env = gym.make(pixel_games.ID_CATCH)
    rng, returns = np.random.default_rng(0), []
    for game in range(400):
        env.reset(seed=game)
        done, game_return = False, 0.0
        while not done:
            state = env.unwrapped
            paddle_centre = state._paddle_x + pixel_games.CATCH_PADDLE / 2
            offset = state._ball_x + pixel_games.SQUARE / 2 - paddle_centre
            tracking = 1 if abs(offset) < 3 else (0 if offset < 0 else 2)
            action = rng.integers(3) if policy == "random" else tracking
            _, reward, done, _, _ = env.step(action)
            game_return += reward
        returns.append(game_return)
    assert np.mean(returns) == pytest.approx(expected_return, abs=0.1)

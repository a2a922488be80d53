"""Environments against references: Gymnasium itself, raw ALE frames preprocessed here with NumPy
and OpenCV from the definition, the rules of Pong and Breakout, and ale-py's C++ vector env."""

import ale_py
import cv2
import gymnasium as gym
import numpy as np
import pytest

import environments

gym.register_envs(ale_py)
# Without no-ops a game's start is deterministic, so two implementations can be compared.
BREAKOUT_NO_NOOPS = environments.AtariSettings("BreakoutNoFrameskip-v4", noop_max=0)


def run(env, actions):
    """Steps `env` with each action; -> list of StepOutputs."""
    return [env.step(action) for action in actions]


def random_actions(num_actions, num_steps, batch=(), seed=0):
    return np.random.default_rng(seed).integers(0, num_actions, size=(num_steps, *batch))


def assert_outputs_equal(expected, actual):
    for name, x, y in zip(expected._fields, expected, actual, strict=True):
        if name == "info":
            assert_outputs_equal(x, y)
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)
            assert np.asarray(x).dtype == np.asarray(y).dtype, name


def test_cartpole_matches_gymnasium_with_auto_reset():
    env = environments.create_environment("CartPole-v1", seed=7)
    assert env.num_actions == 2
    assert env.observation_spec == ((4,), np.float32)
    reference = gym.make("CartPole-v1")
    expected_observation, _ = reference.reset(seed=7)
    first = env.initial()
    np.testing.assert_array_equal(first.observation, expected_observation)
    assert (first.reward, first.done, tuple(first.info)) == (0, False, (0, 0, False))

    episode_step, num_episodes = 0, 0
    for action in random_actions(2, 100, seed=1):
        output = env.step(action)
        expected_observation, reward, terminated, truncated, _ = reference.step(int(action))
        done = terminated or truncated
        episode_step += 1
        if done:  # The finished episode's totals, and already the next episode's observation.
            expected_observation, _ = reference.reset()
        np.testing.assert_array_equal(output.observation, expected_observation)
        assert output.observation.dtype == np.float32
        assert (output.reward, output.done, output.info.game_over) == (reward, done, done)
        assert (output.info.episode_step, output.info.episode_return) == (episode_step,) * 2
        if done:
            episode_step, num_episodes = 0, num_episodes + 1
    assert num_episodes >= 3
    env.close()


def test_batched_cartpole_shapes_and_per_env_seeds():
    env = environments.create_vector_environment("CartPole-v1", num_envs=3, seed=5)
    singles = [environments.create_environment("CartPole-v1", seed=5 + i) for i in range(3)]
    assert (env.num_envs, env.num_actions, env.observation_spec) == (3, 2, ((4,), np.float32))
    actions = random_actions(2, 30, batch=(3,))
    outputs = [env.initial()] + run(env, actions)
    for i, single in enumerate(singles):
        single_outputs = [single.initial()] + run(single, actions[:, i])
        for batched, expected in zip(outputs, single_outputs, strict=True):
            np.testing.assert_array_equal(batched.observation[i], expected.observation)
            assert batched.info.episode_return[i] == expected.info.episode_return
    last = outputs[-1]
    assert last.observation.shape == (3, 4) and last.observation.dtype == np.float32
    assert last.reward.shape == (3,) and last.reward.dtype == np.float32
    assert last.done.shape == (3,) and last.done.dtype == bool
    assert [field.dtype for field in last.info] == [np.float32, np.int32, bool]


@pytest.mark.parametrize("width, height", [(84, 84), (64, 48)])
def test_atari_observations(width, height):
    env = environments.create_environment("PongNoFrameskip-v4", 0, width=width, height=height)
    assert env.observation_spec == ((height, width, 4), np.uint8)
    assert env.num_actions == 6
    first = env.initial().observation
    assert first.shape == (height, width, 4) and first.dtype == np.uint8
    # The stack starts with zeros before the game's first frame.
    assert not first[..., :3].any() and first[..., 3].min() > 0
    later = run(env, [0] * 3)[-1].observation
    assert later.min() > 0 and later.max() <= 255
    env.close()


def test_atari_frames_match_raw_ale_reference():
    """Action repeat 4, max of the last two frames, INTER_AREA resize, stack of 4; raw rewards."""
    env = environments.AtariEnvironment(BREAKOUT_NO_NOOPS, 0)
    reference = gym.make(
        "ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0, obs_type="grayscale"
    )
    reference.reset(seed=0)
    frame, *_ = reference.step(1)  # FIRE on reset.

    def preprocess(frame):
        return cv2.resize(frame, (84, 84), interpolation=cv2.INTER_AREA)

    expected = np.zeros((84, 84, 4), np.uint8)
    expected[..., 3] = preprocess(frame)
    np.testing.assert_array_equal(env.initial().observation, expected)
    for action in random_actions(4, 60):
        frames, reward = [], 0
        for _ in range(4):
            frame, frame_reward, *_ = reference.step(int(action))
            frames.append(frame)
            reward += frame_reward
        expected = np.concatenate(
            [expected[..., 1:], preprocess(np.maximum(frames[2], frames[3]))[..., None]], axis=-1
        )
        output = env.step(action)
        assert not output.info.game_over
        np.testing.assert_array_equal(output.observation, expected)
        assert output.reward == reward


def test_pong_random_game_ends_once_with_the_score():
    env = environments.create_environment("PongNoFrameskip-v4", seed=3)
    env.initial()
    rewards, outputs = [], []
    for action in random_actions(6, 3000, seed=3):
        outputs.append(env.step(action))
        rewards.append(outputs[-1].reward)
        if outputs[-1].info.game_over:
            break
    game_over = [output.info.game_over for output in outputs]
    assert game_over == [False] * (len(outputs) - 1) + [True]
    assert [output.done for output in outputs] == game_over  # Pong has no lives.
    # Raw rewards; the game ends when one side has 21 points.
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    assert 21 in (rewards.count(1.0), rewards.count(-1.0))
    last = outputs[-1].info
    assert last.episode_return == sum(rewards) and -21 <= last.episode_return < 21
    assert last.episode_step == len(outputs)
    # Auto-reset: the next step belongs to the new game.
    after = env.step(0).info
    assert (after.episode_step, after.game_over) == (1, False)
    env.close()


def breakout_game(is_test):
    """One Breakout game (5 lives) under random actions; -> list of StepOutputs."""
    env = environments.create_environment("BreakoutNoFrameskip-v4", seed=1, is_test=is_test)
    env.initial()
    outputs = []
    for action in random_actions(4, 3000, seed=1):
        outputs.append(env.step(action))
        if outputs[-1].info.game_over:
            return outputs
    raise AssertionError("no game over in 3000 steps")


def test_episodic_life_in_training_only():
    train, test = breakout_game(is_test=False), breakout_game(is_test=True)
    # Life losses end learning episodes only: the game itself plays on identically.
    assert len(train) == len(test)
    for train_output, test_output in zip(train, test, strict=True):
        np.testing.assert_array_equal(train_output.observation, test_output.observation)
        assert train_output.reward == test_output.reward
    life_losses = [i for i, o in enumerate(train) if o.done and not o.info.game_over]
    assert len(life_losses) == 4  # 5 lives: 4 losses, then the game over.
    assert [o.done for o in test] == [o.info.game_over for o in test]
    assert [o.info.game_over for o in train].count(True) == 1
    # The statistics run over the whole game, across life losses.
    returns = np.cumsum([o.reward for o in train])
    for i, output in enumerate(train):
        assert output.info.episode_step == i + 1
        assert output.info.episode_return == pytest.approx(returns[i])
    assert train[-1].info.episode_return > 0  # Random play in Breakout scores a few bricks.


def test_atari_auto_reset_observation_is_the_new_games_first():
    def new_env():
        return environments.AtariEnvironment(
            environments.AtariSettings("Breakout-v4", is_test=True, noop_max=0), 0
        )

    env = new_env()
    env.initial()
    for action in random_actions(4, 3000, seed=2):
        output = env.step(action)
        if output.info.game_over:
            break
    assert output.done and output.info.episode_step > 1
    # Without no-ops a game's start is deterministic: compare with a fresh game's first frame.
    np.testing.assert_array_equal(output.observation, new_env().initial().observation)
    after = env.step(0)
    assert (after.info.episode_step, after.info.episode_return) == (1, after.reward)


def test_vector_env_matches_single_envs():
    """ale-py's C++ vector env (the training path) against B Python AtariEnvironments."""
    vector = environments.AtariVectorEnvironment(BREAKOUT_NO_NOOPS, 2, 0)
    singles = environments.BatchedEnvironment(
        [environments.AtariEnvironment(BREAKOUT_NO_NOOPS, i) for i in range(2)]
    )
    assert (vector.num_actions, vector.observation_spec) == (4, ((84, 84, 4), np.uint8))
    assert_outputs_equal(singles.initial(), vector.initial())
    num_life_losses = num_game_overs = 0
    for actions in random_actions(4, 500, batch=(2,)):
        expected, actual = singles.step(actions), vector.step(actions)
        assert_outputs_equal(expected, actual)
        num_game_overs += actual.info.game_over.sum()
        num_life_losses += (actual.done & ~actual.info.game_over).sum()
    assert num_game_overs >= 2 and num_life_losses >= 8
    vector.close()


def test_vector_env_shapes_and_seeds():
    env = environments.create_vector_environment(
        "PongNoFrameskip-v4", 3, seed=4, width=64, height=48
    )
    output = env.initial()
    assert output.observation.shape == (3, 48, 64, 4) and output.observation.dtype == np.uint8
    output = run(env, random_actions(6, 5, batch=(3,)))[-1]
    assert output.reward.shape == (3,) and output.reward.dtype == np.float32
    assert output.done.shape == (3,) and output.done.dtype == bool
    assert [field.shape for field in output.info] == [(3,)] * 3
    assert [field.dtype for field in output.info] == [np.float32, np.int32, bool]
    env.close()


def test_same_seed_same_observations():
    def observations(env, actions):
        outputs = [env.initial()] + run(env, actions)
        return np.stack([output.observation for output in outputs])

    def single(seed):
        return environments.create_environment("Breakout-v4", seed)

    def vector(seed, num_envs):
        return environments.create_vector_environment("Breakout-v4", num_envs, seed)

    actions = random_actions(4, 100, batch=(2,))
    first = observations(single(3), actions[:, 0])
    np.testing.assert_array_equal(first, observations(single(3), actions[:, 0]))
    assert not np.array_equal(first, observations(single(4), actions[:, 0]))  # Other no-ops.
    pair = observations(vector(3, 2), actions)
    np.testing.assert_array_equal(pair, observations(vector(3, 2), actions))
    # Env i of a vector env is seeded with seed + i.
    np.testing.assert_array_equal(pair[:, 1:], observations(vector(4, 1), actions[:, 1:]))


@pytest.mark.parametrize(
    "level_name, expected",
    [
        ("PongNoFrameskip-v4", "ALE/Pong-v5"),
        ("Breakout-v4", "ALE/Breakout-v5"),
        ("SpaceInvadersDeterministic-v4", "ALE/SpaceInvaders-v5"),
        ("MsPacmanNoFrameskip-v4", "ALE/MsPacman-v5"),
        ("ALE/Pong-v5", "ALE/Pong-v5"),
        ("CartPole-v1", None),
        ("ALE/Pongg-v5", None),
    ],
)
def test_atari_id(level_name, expected):
    assert environments.atari_id(level_name) == expected


def test_classic_ids_get_the_atari_preprocessing():
    env = environments.create_environment("SpaceInvadersDeterministic-v4", 0)
    assert (env.num_actions, env.observation_spec) == (6, ((84, 84, 4), np.uint8))
    assert environments.action_repeat("PongNoFrameskip-v4") == 4
    assert environments.action_repeat("CartPole-v1") == 1


@pytest.mark.parametrize("level_name", ["Pongg-v4", "PongNoFrameskip-v9", "ALE/Pong-v4", "Nope"])
def test_unknown_ids_name_the_known_families(level_name):
    with pytest.raises(environments.UnknownEnvironmentError) as error:
        environments.create_environment(level_name, 0)
    message = str(error.value)
    assert repr(level_name) in message
    for family in ["<Game>NoFrameskip-v4", "ALE/<Game>-v5", "CartPole-v1", "Pong, Pooyan"]:
        assert family in message


def test_continuous_actions_are_rejected():
    with pytest.raises(ValueError, match="Pendulum-v1.*Box.*only Discrete"):
        environments.create_environment("Pendulum-v1", 0)

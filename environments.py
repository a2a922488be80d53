"""Environments: Gymnasium and Atari (ale-py) behind one stepping interface.

An environment has `num_actions`, `observation_spec` (shape, numpy dtype) of one observation,
`initial() -> StepOutput`, `step(action) -> StepOutput` and `close()`. Single environments
return unbatched values; vector environments (`create_vector_environment`) return [B] arrays.
Episodes reset automatically: on `done` the observation is already the next episode's first.

Atari preprocessing (DeepMind style, as in ale-py's C++ `AtariVectorEnv`, which the vector form
uses and `AtariEnvironment` reimplements frame by frame in Python):
  - a real reset presses FIRE once (games whose action set has FIRE) and then waits a random
    number (up to 30) of no-op frames;
  - an agent step repeats the action for 4 frames; the observation is the max over the last two
    grayscale frames (removes sprite flicker), resized with OpenCV INTER_AREA and stacked with
    the 3 previous ones into uint8 [H, W, 4] (zeros before the game's first frame);
  - rewards are raw (unclipped); the learner clips them if it wants to;
  - episodic life in training: a lost life is `done` for learning, but the game just goes on
    (no reset, no hidden steps) and the StepOutputInfo statistics cover the whole game;
  - a game is also over after 108000 frames (30 minutes of play).

Screens, for videos: a single environment's `screen()` is its native RGB screen, uint8 [H, W, 3]
(the emulator's 210x160 for Atari, not the preprocessed observation; for Gymnasium envs their
`rgb_array` rendering, made with `screens=True`), and `screen_fps` the screens per second of
real play at one screen per agent step. A vector environment made with `screens=True` shows its
environment 0's.
"""

import collections
import dataclasses
import re

import ale_py
import cv2
import gymnasium as gym
import numpy as np
from ale_py.vector_env import AtariVectorEnv
from gymnasium.envs.registration import load_env_creator

import pixel_games  # noqa: F401 - registers PixelBandit-v0 and PixelCatch-v0 with Gymnasium.

gym.register_envs(ale_py)

# Statistics of the current *game* (for Atari with episodic life: the full game, not one life).
#   episode_return: float32, running sum of raw (unclipped) rewards of the game so far,
#                   including this step's reward.
#   episode_step:   int32, number of agent steps of the game so far, including this step.
#   game_over:      bool, True on the step that ends the game (the statistics above are then the
#                   finished game's totals); always implies `done`.
StepOutputInfo = collections.namedtuple("StepOutputInfo", "episode_return episode_step game_over")

# One environment step, as in scalable_agent's StepOutput. Shapes for a batch of B envs:
#   reward:      float32 [B], raw reward of the step.
#   info:        StepOutputInfo of [B] tensors.
#   done:        bool [B], an episode boundary for learning (episodic life: a lost life too).
#                On done, `observation` is already the first observation of the next
#                episode (auto-reset), as in the original.
#   observation: [B, ...], e.g. uint8 [B, 84, 84, 4] for Atari, float32 [B, 4] for CartPole.
StepOutput = collections.namedtuple("StepOutput", "reward info done observation")

ACTION_REPEAT = 4
FRAME_STACK = 4
NOOP_MAX = 30
MAX_FRAMES_PER_GAME = 108_000
ATARI_FRAMES_PER_SECOND = 60  # the console's (NTSC) frame rate
DEFAULT_RENDER_FPS = 50  # for Gymnasium envs whose metadata states no render_fps

# Classic gym Atari ids; the suffix only names the game: this module's arguments decide frame
# skipping and sticky actions.
_CLASSIC_ATARI_ID = re.compile(r"(?P<game>[A-Za-z]+?)(?:NoFrameskip|Deterministic)?-v[04]")


@dataclasses.dataclass(frozen=True)
class AtariSettings:
    """How an Atari game is played and preprocessed (both Atari classes take one).

    level_name: an Atari level (see `atari_id`). is_test: no episodic life (a `done` is a game
    over), for evaluation. width, height: of the preprocessed frames. sticky_actions:
    repeat_action_probability 0.25. noop_max: a real reset waits up to this many no-op frames
    (0: none, which makes a game's start deterministic).
    """

    level_name: str
    is_test: bool = False
    width: int = 84
    height: int = 84
    sticky_actions: bool = False
    noop_max: int = NOOP_MAX

    @property
    def repeat_action_probability(self):
        return 0.25 if self.sticky_actions else 0.0

    @property
    def frame_shape(self):
        """Shape of one preprocessed observation: [height, width, FRAME_STACK]."""
        return (self.height, self.width, FRAME_STACK)


class UnknownEnvironmentError(ValueError):
    """`level_name` names no environment this module can run."""


def atari_id(level_name):
    """The `ALE/<Game>-v5` id that an Atari level name denotes, or None if it is not Atari."""
    if level_name.startswith("ALE/"):
        return level_name if level_name in gym.registry else None
    match = _CLASSIC_ATARI_ID.fullmatch(level_name)
    if match and f"ALE/{match['game']}-v5" in gym.registry:
        return f"ALE/{match['game']}-v5"
    return None


def action_repeat(level_name):
    """Emulator frames per agent step: 4 for Atari, 1 otherwise."""
    return ACTION_REPEAT if atari_id(level_name) else 1


def _unknown_level_error(level_name):
    games = sorted(name[len("ALE/") : -len("-v5")] for name in gym.registry if name[:4] == "ALE/")
    others = [name for name, spec in gym.registry.items() if "ale_py" not in str(spec.entry_point)]
    return UnknownEnvironmentError(
        f"Unknown level_name {level_name!r}. Known families: "
        "Atari classic ids '<Game>NoFrameskip-v4', '<Game>-v4', '<Game>Deterministic-v4' "
        "(e.g. PongNoFrameskip-v4) and ALE ids 'ALE/<Game>-v5' (e.g. ALE/Pong-v5), for <Game> in "
        f"{', '.join(games)}; registered Gymnasium ids with a Box observation and Discrete "
        f"actions, such as CartPole-v1 (registered: {', '.join(others)})."
    )


class _GameStatistics:
    """Running return and length of the current game of each of `shape` environments."""

    def __init__(self, shape):
        self._shape = shape

    def reset(self):
        """Starts new games; returns the all-zero StepOutputInfo of `initial()`."""
        self._return = np.zeros(self._shape, np.float32)
        self._step = np.zeros(self._shape, np.int32)
        return StepOutputInfo(self._return, self._step, np.zeros(self._shape, bool))

    def update(self, reward, game_over):
        """Counts one step; `reward` float [shape], `game_over` bool [shape]. -> StepOutputInfo."""
        self._return = (self._return + reward).astype(np.float32)
        self._step = self._step + np.int32(1)
        info = StepOutputInfo(self._return, self._step, np.asarray(game_over, bool))
        # A finished game's totals are reported once; the next step starts from zero.
        self._return = np.where(game_over, np.float32(0), self._return)
        self._step = np.where(game_over, np.int32(0), self._step)
        return info


class _SingleEnvironment:
    """initial/step bookkeeping of one environment; subclasses define `_reset` and `_act`."""

    def initial(self):
        self._statistics = _GameStatistics(())
        return StepOutput(np.float32(0), self._statistics.reset(), np.bool_(False), self._reset())

    def step(self, action):
        """action: int scalar. -> StepOutput of scalars and one observation."""
        reward, game_over, life_lost, observation = self._act(int(action))
        info = self._statistics.update(reward, game_over)
        if game_over:
            observation = self._reset()
        return StepOutput(np.float32(reward), info, np.bool_(game_over or life_lost), observation)


def _renders_rgb(level_name):
    """Whether the registered Gymnasium env `level_name` declares the `rgb_array` render mode."""
    entry_point = gym.spec(level_name).entry_point
    creator = entry_point if callable(entry_point) else load_env_creator(entry_point)
    return "rgb_array" in getattr(creator, "metadata", {}).get("render_modes", [])


class GymEnvironment(_SingleEnvironment):
    """Any Gymnasium environment with a Box observation and Discrete actions, e.g. CartPole-v1.

    screens: made with render_mode="rgb_array", so that `screen()` works.
    """

    def __init__(self, level_name, seed, screens=False):
        if screens and not _renders_rgb(level_name):
            raise UnknownEnvironmentError(
                f"{level_name!r} has no 'rgb_array' render mode: it shows no screen to record."
            )
        self._env = gym.make(level_name, **({"render_mode": "rgb_array"} if screens else {}))
        observation_space, action_space = self._env.observation_space, self._env.action_space
        if not isinstance(action_space, gym.spaces.Discrete) or action_space.start != 0:
            raise UnknownEnvironmentError(
                f"{level_name!r} has action space {action_space}; only Discrete(n) actions "
                "numbered from 0 are supported."
            )
        if not isinstance(observation_space, gym.spaces.Box):
            raise UnknownEnvironmentError(
                f"{level_name!r} has observation space {observation_space}; only Box "
                "observations are supported."
            )
        self.num_actions = int(action_space.n)
        self.observation_spec = (observation_space.shape, observation_space.dtype)
        self.screen_fps = self._env.metadata.get("render_fps") or DEFAULT_RENDER_FPS
        self._seed = seed

    def _reset(self):
        observation, _ = self._env.reset(seed=self._seed)
        self._seed = None  # Seed the first episode only; later ones continue its random stream.
        return observation

    def _act(self, action):
        observation, reward, terminated, truncated, _ = self._env.step(action)
        return reward, terminated or truncated, False, observation

    def screen(self):
        """The current RGB screen, uint8 [H, W, 3] (e.g. [400, 600, 3] for CartPole)."""
        return self._env.render()

    def close(self):
        self._env.close()


class AtariEnvironment(_SingleEnvironment):
    """One Atari game with the preprocessing described in the module docstring.

    Observations: uint8 [height, width, 4], oldest frame first. A real reset waits
    1..settings.noop_max no-op frames after FIRE. ale-py 0.12's C++ env draws 0..noop_max-1
    instead and counts the FIRE frame among them: nearly the same spread of start states, not
    the same random stream.
    """

    def __init__(self, settings, seed):
        self._env = gym.make(
            atari_id(settings.level_name),
            frameskip=1,
            repeat_action_probability=settings.repeat_action_probability,
            full_action_space=False,
            obs_type="grayscale",
            max_num_frames_per_episode=None,  # Counted here, from the end of the reset.
        )
        self._ale = self._env.unwrapped.ale
        self._action_set = self._ale.getMinimalActionSet()
        self._fire_on_reset = "FIRE" in self._env.unwrapped.get_action_meanings()
        self._episodic_life = not settings.is_test
        self._noop_max = settings.noop_max
        self._size = (settings.width, settings.height)
        self.num_actions = len(self._action_set)
        self.observation_spec = (settings.frame_shape, np.dtype(np.uint8))
        self.screen_fps = ATARI_FRAMES_PER_SECOND / ACTION_REPEAT
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._last_two_frames = np.zeros((2, *self._ale.getScreenDims()), np.uint8)
        self._stack = np.zeros(self.observation_spec[0], np.uint8)

    def _push_frame(self):
        frame = self._last_two_frames.max(axis=0)
        self._stack[..., :-1] = self._stack[..., 1:]
        self._stack[..., -1] = cv2.resize(frame, self._size, interpolation=cv2.INTER_AREA)
        return self._stack.copy()

    def _reset(self):
        self._env.reset(seed=self._seed)
        self._seed = None  # Seed the first game only; later ones continue its random stream.
        if self._fire_on_reset:
            self._ale.act(ale_py.Action.FIRE)
        num_noops = self._rng.integers(1, self._noop_max + 1) if self._noop_max else 0
        for _ in range(num_noops):
            self._ale.act(ale_py.Action.NOOP)
            if self._ale.game_over():
                self._ale.reset_game()
        self._ale.getScreenGrayscale(self._last_two_frames[0])
        self._last_two_frames[1] = 0
        self._stack[:] = 0
        self._lives = self._ale.lives()
        self._frames = 0
        return self._push_frame()

    def _act(self, action):
        reward = 0
        for repeat in range(ACTION_REPEAT):
            reward += self._ale.act(self._action_set[action])
            self._frames += 1
            game_over = self._ale.game_over() or self._frames >= MAX_FRAMES_PER_GAME
            if game_over:
                break  # The observation is replaced by the next game's first one anyway.
            if repeat >= ACTION_REPEAT - 2:  # Keep the last two frames for the max.
                self._ale.getScreenGrayscale(self._last_two_frames[repeat - ACTION_REPEAT + 2])
        lives, previous_lives = self._ale.lives(), self._lives
        self._lives = lives
        # Losing the last life is the game over, not a life loss (as in the C++ env).
        life_lost = self._episodic_life and 0 < lives < previous_lives
        return reward, game_over, life_lost, self._push_frame()

    def screen(self):
        """The emulator's current RGB screen, uint8 [210, 160, 3]."""
        return self._ale.getScreenRGB()

    def close(self):
        self._env.close()


def _stack(outputs):
    """Stacks B unbatched StepOutputs into one StepOutput of [B] arrays."""
    reward, info, done, observation = zip(*outputs, strict=True)
    info = StepOutputInfo(*(np.stack(field) for field in zip(*info, strict=True)))
    return StepOutput(np.stack(reward), info, np.stack(done), np.stack(observation))


class BatchedEnvironment:
    """B single environments stepped one after the other in this process."""

    def __init__(self, environments):
        self._environments = environments
        self.num_envs = len(environments)
        self.num_actions = environments[0].num_actions
        self.observation_spec = environments[0].observation_spec
        self.screen_fps = environments[0].screen_fps

    def initial(self):
        return _stack([environment.initial() for environment in self._environments])

    def step(self, actions):
        """actions: int [B]. -> StepOutput of [B] arrays."""
        actions = np.asarray(actions)
        return _stack(
            [env.step(action) for env, action in zip(self._environments, actions, strict=True)]
        )

    def screen(self):
        """Environment 0's current RGB screen, uint8 [H, W, 3]."""
        return self._environments[0].screen()

    def close(self):
        for environment in self._environments:
            environment.close()


def ale_vector_env(settings, num_envs, **options):
    """ale-py's C++ AtariVectorEnv for `settings` (AtariSettings); `options` go to it as they are
    (e.g. num_threads)."""
    return AtariVectorEnv(
        gym.spec(atari_id(settings.level_name)).kwargs["game"],
        num_envs,
        autoreset_mode="SameStep",
        max_num_frames_per_episode=MAX_FRAMES_PER_GAME,
        repeat_action_probability=settings.repeat_action_probability,
        img_height=settings.height,
        img_width=settings.width,
        stack_num=FRAME_STACK,
        frameskip=ACTION_REPEAT,
        noop_max=settings.noop_max,
        episodic_life=False,
        reward_clipping=False,
        **options,
    )


class AtariVectorEnvironment:
    """B Atari games stepped in ale-py's C++ threads, same outputs as B AtariEnvironments.

    The C++ env does the frame work (FIRE + no-op reset, action repeat, max-pool, INTER_AREA
    resize, stacking, auto-reset in the same step). It runs without its own episodic-life mode,
    which would reset the game on a life loss; lives are followed here instead.
    """

    def __init__(self, settings, num_envs, seed):
        self._env = ale_vector_env(settings, num_envs)
        self._episodic_life = not settings.is_test
        self._seed = seed
        self.num_envs = num_envs
        self.num_actions = int(self._env.single_action_space.n)
        self.observation_spec = (settings.frame_shape, np.dtype(np.uint8))
        self._statistics = _GameStatistics((num_envs,))

    def initial(self):
        # An int seed gives env i the seed `seed + i`.
        observation, info = self._env.reset(seed=self._seed)
        self._seed = None  # Seed the first games only; later ones continue their random streams.
        self._lives = info["lives"]
        done = np.zeros(self.num_envs, bool)
        reward = np.zeros(self.num_envs, np.float32)
        return StepOutput(reward, self._statistics.reset(), done, self._channels_last(observation))

    def step(self, actions):
        """actions: int [B]. -> StepOutput of [B] arrays."""
        observation, reward, terminated, truncated, info = self._env.step(
            np.asarray(actions, np.int32)
        )
        game_over = terminated | truncated
        # After a game over the C++ env reports the next game's lives.
        lives, previous_lives = info["lives"], self._lives
        self._lives = lives
        life_lost = self._episodic_life & ~game_over & (lives > 0) & (lives < previous_lives)
        reward = reward.astype(np.float32)
        info = self._statistics.update(reward, game_over)
        return StepOutput(reward, info, game_over | life_lost, self._channels_last(observation))

    @staticmethod
    def _channels_last(observation):
        """[B, 4, H, W] -> [B, H, W, 4], C-contiguous like the single environments' frames.

        Stacking the 4 frames is cheaper than copying the transposed view."""
        return np.stack([observation[:, frame] for frame in range(observation.shape[1])], axis=-1)

    def close(self):
        self._env.close()


def create_environment(
    level_name, seed, is_test=False, width=84, height=84, sticky_actions=False, screens=False
):
    """One environment. `width`, `height`, `sticky_actions` apply to Atari only.

    is_test: Atari without episodic life (a `done` is a game over), for evaluation.
    screens: Gymnasium envs made able to render `screen()` (Atari ones always are).
    """
    if atari_id(level_name):
        return AtariEnvironment(
            AtariSettings(level_name, is_test, width, height, sticky_actions), seed
        )
    if level_name in gym.registry:
        return GymEnvironment(level_name, seed, screens)
    raise _unknown_level_error(level_name)


def observation_shape(level_name):
    """The shape of one observation of `level_name`: an Atari game's preprocessed frames at the
    default size, found without starting the emulator; any other env's observation space,
    read from an instance made and closed at once.

    Raises UnknownEnvironmentError when `level_name` names no environment or cannot be made
    here (e.g. a dependency it needs is not installed)."""
    if atari_id(level_name):
        return AtariSettings(level_name).frame_shape
    if level_name not in gym.registry:
        raise _unknown_level_error(level_name)
    try:
        env = gym.make(level_name)
    except gym.error.Error as e:
        raise UnknownEnvironmentError(f"{level_name!r} cannot be made here: {e}") from e
    try:
        return tuple(env.observation_space.shape or ())
    finally:
        env.close()


def create_vector_environment(
    level_name,
    num_envs,
    seed,
    is_test=False,
    width=84,
    height=84,
    sticky_actions=False,
    screens=False,
):
    """num_envs environments with seeds seed + i, stepped together: StepOutputs of [B] arrays.

    screens: with `screen()` and `screen_fps` of environment 0; Atari games are then
    AtariEnvironments stepped in this process (the C++ vector env shows no screen), whose
    no-op starts draw from another random stream than the C++ env's.
    """
    if atari_id(level_name) and not screens:
        return AtariVectorEnvironment(
            AtariSettings(level_name, is_test, width, height, sticky_actions), num_envs, seed
        )
    return BatchedEnvironment(
        [
            create_environment(
                level_name, seed + i, is_test, width, height, sticky_actions, screens
            )
            for i in range(num_envs)
        ]
    )

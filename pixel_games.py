"""A small pixel task on Atari-shaped frames: does an agent learn from pixels, in minutes?

`PixelBandit-v0` (registered with Gymnasium on import) shows uint8 frames [84, 84, 4] like
preprocessed Atari observations: Pong's grey background (87) with one small bright square
(4x4 pixels, the brightness of Pong's ball, 236) at a random place, the same in all four
stacked frames. Each step the agent picks one of 3 actions; the right one is the third of the
screen (left, middle, right) the square is in. A right pick scores 1 and shows a new frame; a
wrong pick ends the game, as a missed ball does in Pong, and so does the STEPS_PER_EPISODE-th
right pick. A bar along the top rows grows with every step (like a game's score display), so
the frame also shows how much of the game is left, which the value depends on.

Chance is 1/3. A game's return is its number of right picks, so over many games
  accuracy = sum(returns) / (sum(returns) + number of games that ended before the last step),
`accuracy(returns)` below. A random policy's mean return is about 0.5; accuracy 0.9 gives ~7.

It isolates what Pong needs first and a vector task never exercises: a small, image-dependent
feature (16 of 7056 pixels) must drive the policy through the conv torso. The frames are what
Atari preprocessing produces, so the same agents, transport and learner carry them.
"""

import gymnasium as gym
import numpy as np

ID = "PixelBandit-v0"
SIZE = 84
FRAME_STACK = 4
SQUARE = 4
BACKGROUND, BRIGHT = 87, 236
NUM_ACTIONS = 3
STEPS_PER_EPISODE = 20
BAR_ROWS, BAR_STEP = 2, 4  # The bar: the top BAR_ROWS rows, BAR_STEP pixels longer per step.


def accuracy(returns):
    """The fraction of right picks over the games whose `returns` are given."""
    returns = np.asarray(returns)
    wrong_picks = np.count_nonzero(returns < STEPS_PER_EPISODE)
    return float(returns.sum() / (returns.sum() + wrong_picks))


class PixelBandit(gym.Env):
    """The task of the module docstring, as a Gymnasium environment."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, FRAME_STACK), np.uint8)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self._correct_action = 0
        self._steps = 0

    def _draw(self):
        """A new frame; remembers which action it rewards."""
        x = self.np_random.integers(0, SIZE - SQUARE + 1)
        y = self.np_random.integers(2 * BAR_ROWS, SIZE - SQUARE + 1)  # clear of the bar
        frame = np.full((SIZE, SIZE, FRAME_STACK), BACKGROUND, np.uint8)
        frame[:BAR_ROWS, : self._steps * BAR_STEP] = BRIGHT
        frame[y : y + SQUARE, x : x + SQUARE] = BRIGHT
        # The square's centre decides its third of the screen.
        self._correct_action = min(int((x + SQUARE / 2) * NUM_ACTIONS // SIZE), NUM_ACTIONS - 1)
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return self._draw(), {}

    def step(self, action):
        correct = int(action) == self._correct_action
        self._steps += 1
        done = not correct or self._steps >= STEPS_PER_EPISODE
        return self._draw(), float(correct), done, False, {}


if ID not in gym.registry:
    gym.register(ID, entry_point=PixelBandit)

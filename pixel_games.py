"""Small pixel tasks on Atari-shaped frames: does an agent learn from pixels, in minutes?

Both are registered with Gymnasium on import.

`PixelBandit-v0` shows uint8 frames [84, 84, 4] like
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

`PixelCatch-v0` adds what the bandit leaves out and Pong needs next: time. A ball (Pong's
4x4 square) falls from the top at a random column, CATCH_FALL pixels a step, drifting
CATCH_DRIFT pixels sideways (bouncing off the walls); a paddle (CATCH_PADDLE pixels wide, on the
bottom rows) moves left, stays or moves right, CATCH_PADDLE_STEP pixels a step. The game ends
when the ball reaches the paddle's rows, ~19 steps in: +1 if the paddle is under it, -1 if not,
and 0 on every step before. So the reward comes many steps after the actions that earned it, and
the four stacked frames are the last four frames (the ball's drift shows only across them),
as in Pong. A random policy catches ~1 ball in 4 (mean return ~ -0.5); a perfect one all.
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


ID_CATCH = "PixelCatch-v0"
CATCH_FALL, CATCH_DRIFT = 4, 2
CATCH_PADDLE, CATCH_PADDLE_ROWS, CATCH_PADDLE_STEP = 16, 4, 6


class PixelCatch(gym.Env):
    """The catch game of the module docstring, as a Gymnasium environment."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, FRAME_STACK), np.uint8)
        self.action_space = gym.spaces.Discrete(3)  # left, stay, right
        self._frames = np.full((SIZE, SIZE, FRAME_STACK), BACKGROUND, np.uint8)

    def _push_frame(self):
        """Draws the ball and paddle as the newest of the stacked frames (oldest first)."""
        frame = np.full((SIZE, SIZE), BACKGROUND, np.uint8)
        frame[self._ball_y : self._ball_y + SQUARE, self._ball_x : self._ball_x + SQUARE] = BRIGHT
        paddle = slice(self._paddle_x, self._paddle_x + CATCH_PADDLE)
        frame[SIZE - CATCH_PADDLE_ROWS :, paddle] = BRIGHT
        self._frames = np.concatenate([self._frames[..., 1:], frame[..., np.newaxis]], axis=-1)
        return self._frames.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._ball_x = int(self.np_random.integers(0, SIZE - SQUARE + 1))
        self._ball_y = 0
        self._drift = CATCH_DRIFT * int(self.np_random.choice([-1, 1]))
        self._paddle_x = int(self.np_random.integers(0, SIZE - CATCH_PADDLE + 1))
        self._frames[:] = BACKGROUND
        for _ in range(FRAME_STACK - 1):  # the first observation's older frames: the start
            self._push_frame()
        return self._push_frame(), {}

    def step(self, action):
        self._paddle_x = int(
            np.clip(self._paddle_x + (int(action) - 1) * CATCH_PADDLE_STEP, 0, SIZE - CATCH_PADDLE)
        )
        self._ball_y += CATCH_FALL
        self._ball_x += self._drift
        if not 0 <= self._ball_x <= SIZE - SQUARE:  # bounce off the wall
            self._drift = -self._drift
            self._ball_x = int(np.clip(self._ball_x, 0, SIZE - SQUARE))
        landed = self._ball_y + SQUARE >= SIZE - CATCH_PADDLE_ROWS
        reward = 0.0
        if landed:
            caught = self._paddle_x - SQUARE < self._ball_x < self._paddle_x + CATCH_PADDLE
            reward = 1.0 if caught else -1.0
        return self._push_frame(), reward, landed, False, {}


if ID_CATCH not in gym.registry:
    gym.register(ID_CATCH, entry_point=PixelCatch)

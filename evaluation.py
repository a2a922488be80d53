"""Evaluation: full games played with a policy, after training (--mode=test) and during it (the
evaluator, --job_name=evaluator).

The games are the environment's test mode (environments.py): no episodic life, up to 30 no-op
frames at each start, at most 108K frames a game. Actions are the policy's samples or its most
likely action (--test_action_selection).

The evaluator is a client of its worker set's learner, as an actor is, that never pushes
unrolls: every --eval_interval_frames of training frames (the learner's count, over all
learners) it takes the newest parameters and plays --eval_games games with them, and once more
with the parameters that end training. Their returns go to TensorBoard under <logdir>/eval (a
run of its own beside the learner's), at the frames those parameters were trained on:
eval/return_mean, eval/return_std, eval/game_frames (mean frames a game) and
eval/parameter_version. With --eval_video_every=K the first game of the first evaluation and of
every K-th one is recorded to <logdir>/videos (video.py).
"""

import concurrent.futures
import os
import time

import numpy as np
import tensorflow as tf
from absl import logging

import environments
import video
from learner_link import LEARNER_GONE

EVAL_SUBDIR = "eval"  # The evaluator's summaries: <logdir>/eval, a TensorBoard run of its own.
VIDEO_SUBDIR = "videos"
_POLL_SECS = 2.0


def create_env(config, screens=False):
    """A vector environment of one test-mode environment of --level_name (config.Config),
    seeded with --seed; `screens`: able to show its screen, for videos."""
    return environments.create_vector_environment(
        config.level_name,
        num_envs=1,
        seed=config.seed,
        is_test=True,
        width=config.width,
        height=config.height,
        sticky_actions=config.sticky_actions,
        screens=screens,
    )


def records_video(evaluation, every):
    """Whether the `evaluation`-th evaluation (counted from 1) records its first game: with
    `every` (--eval_video_every) > 0, every `every`-th one and the first, so that a new run
    shows a video minutes after it starts."""
    return every > 0 and (evaluation == 1 or evaluation % every == 0)


class GamePlayer:
    """Plays whole games of a vector environment of one test-mode environment with `agent`.

    Args:
      agent: the agent (its variables are the policy played).
      env: create_env's, with `screens=True` for recorded games.
      action_selection: "sample" or "greedy" (--test_action_selection).
    """

    def __init__(self, agent, env, action_selection):
        self._agent = agent
        self._env = env
        self._greedy = action_selection == "greedy"
        self._act = tf.function(agent.__call__)
        self._env_output = env.initial()
        self._last_action = np.zeros([1], np.int32)
        self._core_state = agent.initial_state(1)

    @property
    def screen_fps(self):
        return self._env.screen_fps

    def games(self, num_games, recorder=None):
        """Yields (return, agent steps) of each of the next `num_games` games, as each ends.

        recorder: a video.GameRecorder given the screen the agent acts on at each step, or None.
        """
        for _ in range(num_games):
            while True:
                if recorder:
                    recorder.add(self._env.screen())
                agent_output, self._core_state = self._act(
                    self._last_action, self._env_output, self._core_state
                )
                if self._greedy:
                    logits = agent_output.policy_logits.numpy()
                    self._last_action = np.argmax(logits, axis=-1).astype(np.int32)
                else:
                    self._last_action = agent_output.action.numpy()
                self._env_output = self._env.step(self._last_action)
                info = self._env_output.info
                if info.game_over[0]:
                    yield float(info.episode_return[0]), int(info.episode_step[0])
                    break


class Evaluator:
    """The evaluator role (see the module docstring).

    Args:
      config: config.Config.
      agent: the evaluator's local agent, variables created.
      link: learner_link.LearnerLink of the evaluator.
      player: GamePlayer of the agent (its env made with screens=True if videos are recorded).
      frames_per_step: environment frames per agent step (the action repeat).
      name: for log lines, e.g. "evaluator (127.0.0.1:9101)".
    """

    def __init__(self, config, agent, link, player, frames_per_step, name):
        self._config = config
        self._parameters = agent.variables  # the input statistics too
        self._link = link
        self._player = player
        self._frames_per_step = frames_per_step
        self._name = name
        self._writer = tf.summary.create_file_writer(os.path.join(config.logdir, EVAL_SUBDIR))
        self._evaluations = 0

    def run(self):
        """Evaluates until training ends; returns the process exit code.

        The games run on a thread of their own while this one keeps polling the learner, which
        serves the parameters that end training until this evaluator says it holds them (at
        most --learner_wait_secs)."""
        config = self._config
        published = self._link.wait_for_parameters()
        logging.info("%s: connected to learner %s", self._name, self._link.learner_host)
        games = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evaluation")
        running, due_at, evaluated_version = None, 0, None
        while True:
            final = published.frames >= config.total_environment_frames
            if running and (running.done() or final):
                running.result()  # raises what the games raised
                running = None
            due = published.frames >= due_at or final
            if due and running is None and published.version != evaluated_version:
                running = games.submit(self._evaluate, published)
                evaluated_version = published.version
                interval = config.eval_interval_frames
                due_at = (published.frames // interval + 1) * interval
            if final:
                self._link.take_final_parameters()
                if running:
                    running.result()
                logging.info("%s: evaluated the final parameters; exiting", self._name)
                return 0
            time.sleep(_POLL_SECS)
            try:  # the parameters themselves only when they are to be evaluated
                frames = self._link.transport.published_frames()
                if frames >= config.total_environment_frames or (
                    running is None and frames >= due_at
                ):
                    published = self._link.transport.pull_parameters()
            except LEARNER_GONE as e:
                published = self._link.parameters_after_loss(e)
                if published is None:
                    return 0

    def _evaluate(self, published):
        """Plays --eval_games games with `published` (transport.Published) and writes their
        returns at the frames it was trained on."""
        for variable, value in zip(self._parameters, published.parameters, strict=True):
            variable.assign(value)
        self._evaluations += 1
        games = self._config.eval_games
        results = []
        if records_video(self._evaluations, self._config.eval_video_every):
            recorder = video.GameRecorder(
                os.path.join(self._config.logdir, VIDEO_SUBDIR),
                self._config.level_name,
                published.frames,
                1,
                self._player.screen_fps,
            )
            results += self._player.games(1, recorder)
            logging.info("%s: video %s", self._name, recorder.end_game())
            games -= 1
        results += self._player.games(games)
        returns, steps = np.array(results).T
        frames = steps * self._frames_per_step
        with self._writer.as_default(step=published.frames):
            tf.summary.scalar("eval/return_mean", returns.mean())
            tf.summary.scalar("eval/return_std", returns.std())
            tf.summary.scalar("eval/game_frames", frames.mean())
            tf.summary.scalar("eval/parameter_version", published.version)
        self._writer.flush()
        logging.info(
            "%s: %d environment frames (parameters %d): return %.2f +- %.2f over %d games of "
            "%.0f frames",
            self._name,
            published.frames,
            published.version,
            returns.mean(),
            returns.std(),
            len(returns),
            frames.mean(),
        )

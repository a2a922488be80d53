"""The agent interface shared by every network: act one step, or unroll over time.

As in scalable_agent's `Agent`: a torso embeds each frame together with the clipped last reward
and the one-hot last action, an optional recurrent core steps over time (reset where an episode
begins), and two linear heads give the policy logits and the baseline. Optionally the baseline has
a torso of its own (feed-forward agents), so that the value's gradients do not reach the policy's
features, as in DNA's and PPG's separate networks, and its head is PopArt's (popart.py).
"""

import collections
import dataclasses
import functools
import numbers
import threading

import numpy as np
import sonnet as snt
import tensorflow as tf
import tree

from agents.input_normalization import InputNormalizer, scaled_frames
from agents.popart import PopArtValueHead

# action: int32 [B] sampled from the policy; policy_logits: float32 [B, A]; baseline: float32 [B].
# From `Agent.unroll` the same with [T, B] leading dims.
AgentOutput = collections.namedtuple("AgentOutput", "action policy_logits baseline")


INITIALIZATIONS = ("sonnet", "orthogonal")
TORSO_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class Initializers:
    """Weight initialisers (`w_init` of Sonnet's Linear and Conv2D; None: Sonnet's default, a
    truncated normal of stddev 1/sqrt(fan_in), as the IMPALA paper's Sonnet 1 networks)."""

    torso: object  # every hidden layer, conv or linear, followed by a ReLU
    policy: object  # the policy-logits head
    baseline: object  # the value head

    @classmethod
    def named(cls, scheme):
        """ "sonnet", or "orthogonal": orthogonal matrices with gain sqrt(2) for ReLU layers (which
        keeps the activations' scale through the torso), 0.01 for the policy head (the policy
        starts uniform whatever the input) and 1 for the value head, as strong Atari baselines
        (PPO, Cleanba's IMPALA) initialise."""
        if scheme == "sonnet":
            return cls(None, None, None)
        if scheme == "orthogonal":
            orthogonal = snt.initializers.Orthogonal
            return cls(orthogonal(np.sqrt(2)), orthogonal(0.01), orthogonal(1.0))
        raise ValueError(f"unknown initialization {scheme!r}; valid: {', '.join(INITIALIZATIONS)}")


_CAST_VARIABLES_LOCK = threading.Lock()


def _reset_where_done(done, initial_state, state):
    """Per batch element, `initial_state` where `done` (bool [B]) is set, else `state` ([B, N])."""
    return tf.where(done[:, tf.newaxis], initial_state, state)


class Agent(snt.Module):
    """Base class: subclasses define the torso and, if recurrent, the core.

    A subclass defines `_make_torso(name)`: a new module mapping float32 frames
    [N, *OBSERVATION_DIMS] to features [N, F], its layers initialised with
    `self._initializers.torso` (called once, twice with a separate value torso). After calling
    this constructor a recurrent subclass sets `self._core`, an `snt.RNNCore` (None: feed-forward).
    Variables are created on the first call (Sonnet style) and reused afterwards.

    Args (subclasses take the same, but for their own default name, the options as keywords):
      num_actions: A.
      initialization: one of INITIALIZATIONS (see Initializers.named).
      torso_dtype: one of TORSO_DTYPES, the torso's arithmetic. Its variables, the core, the
        heads and everything after them stay float32.
      normalize_input: whether frames are normalised per element by running statistics
        (input_normalization.InputNormalizer, updated by the learner) before the torso.
      normalize_input_prior: the frames of mean 0 and variance 1 the statistics start as.
      separate_value_torso: whether the value head reads a torso of its own.
      popart: whether the value head is PopArt's (popart.PopArtValueHead, whose statistics the
        learner moves), else a plain linear layer.
    """

    # Names of the per-step observation dimensions the torso expects, e.g. ("H", "W", "C").
    OBSERVATION_DIMS = ()

    def __init__(
        self,
        num_actions,
        *,
        initialization="sonnet",
        torso_dtype="float32",
        normalize_input=False,
        normalize_input_prior=0,
        separate_value_torso=False,
        popart=False,
        name=None,
    ):
        super().__init__(name=name)
        # numbers.Integral also admits NumPy ints, e.g. gymnasium's Discrete(n).n.
        if not isinstance(num_actions, numbers.Integral) or num_actions < 1:
            raise ValueError(f"num_actions must be a positive integer, got {num_actions!r}")
        if torso_dtype not in TORSO_DTYPES:
            raise ValueError(
                f"unknown torso dtype {torso_dtype!r}; valid: {', '.join(TORSO_DTYPES)}"
            )
        self._num_actions = int(num_actions)
        self._torso_dtype = tf.as_dtype(torso_dtype)
        self._initializers = Initializers.named(initialization)
        self._torsos_with_variables = set()  # names of the torsos whose variables exist
        self._torso = self._make_torso("torso")
        self._value_torso = self._make_torso("value_torso") if separate_value_torso else None
        self._core = None
        self._policy_logits = snt.Linear(
            self._num_actions, w_init=self._initializers.policy, name="policy_logits"
        )
        value_head = PopArtValueHead if popart else functools.partial(snt.Linear, 1)
        self._baseline = value_head(w_init=self._initializers.baseline, name="baseline")
        self._input_normalizer = (
            InputNormalizer(prior_count=normalize_input_prior) if normalize_input else None
        )

    @property
    def num_actions(self):
        return self._num_actions

    @property
    def input_normalizer(self):
        """The InputNormalizer whose statistics the learner updates, or None."""
        return self._input_normalizer

    @property
    def popart_head(self):
        """The PopArtValueHead whose statistics the learner moves, or None."""
        return self._baseline if isinstance(self._baseline, PopArtValueHead) else None

    @property
    def recurrent(self):
        """Whether the agent has a core stepped over time (its outputs depend on earlier steps)."""
        return self._core is not None

    def describe(self):
        """'MLPAgent, 2 actions': this agent, as errors about agents that do not fit name it."""
        normalized = ", input normalised" if self._input_normalizer is not None else ""
        value_torso = ", separate value torso" if self._value_torso is not None else ""
        popart = ", PopArt value head" if self.popart_head is not None else ""
        return (
            f"{type(self).__name__}, {self._num_actions} actions{normalized}{value_torso}{popart}"
        )

    def _make_torso(self, name):
        raise NotImplementedError(f"{type(self).__name__} defines no torso")

    def initial_state(self, batch_size):
        """The core state at the start of an episode: `()`, or e.g. snt.LSTMState of [B, 256]."""
        if self._core is None:
            return ()
        return self._core.initial_state(batch_size)

    def __call__(self, last_action, env_output, core_state):
        """One acting step, computed as an unroll over T=1 so the two paths cannot diverge.

        Args:
          last_action: int32 [B], the action taken before `env_output.observation`.
          env_output: environments.StepOutput of [B, ...] tensors.
          core_state: nested [B, ...] tensors, from `initial_state` or the previous step.

        Returns:
          (AgentOutput of [B] / [B, A] tensors, new core state).
        """
        actions, env_outputs = tree.map_structure(
            lambda t: tf.expand_dims(t, 0), (last_action, env_output)
        )
        outputs, core_state = self.unroll(actions, env_outputs, core_state)
        return tree.map_structure(lambda t: tf.squeeze(t, 0), outputs), core_state

    def unroll(self, actions, env_outputs, core_state):
        """Runs the agent over T steps of B environments.

        Args:
          actions: int32 [T, B]; `actions[t]` is the last action, taken before observation t.
          env_outputs: environments.StepOutput of [T, B, ...] tensors (reward, done and
            observation are read). `done[t]` means observation t starts a new episode, so the
            core state is reset before step t. T must be static (known when tracing).
          core_state: nested [B, ...] tensors, the state before step 0.

        Returns:
          (AgentOutput of [T, B] / [T, B, A] tensors, core state after step T - 1).
        """
        observation_shape = env_outputs.observation.shape
        if observation_shape.rank != 2 + len(self.OBSERVATION_DIMS):
            raise ValueError(
                f"{type(self).__name__} expects observations of shape "
                f"[T, B, {', '.join(self.OBSERVATION_DIMS)}], got {observation_shape}"
            )
        # The torsos see all T * B frames at once; only the core steps through time.
        policy_inputs, value_inputs = snt.BatchApply(self._embed)(
            actions, env_outputs.reward, env_outputs.observation
        )
        core_outputs, core_state = self._unroll_core(policy_inputs, env_outputs.done, core_state)
        if self._value_torso is None:
            value_inputs = core_outputs
        return snt.BatchApply(self._head)(core_outputs, value_inputs), core_state

    def _embed(self, last_action, reward, observation):
        """The policy's and the value's torso features, each with the clipped last reward and the
        one-hot last action: ([N, F+1+A], [N, F+1+A]; the one tensor twice without a separate value
        torso).

        Args:
          last_action: int32 [N]. reward: float32 [N]. observation: [N, *OBSERVATION_DIMS],
          uint8 frames (scaled to [0, 1] here) or floats (used as they are).
        """
        frames = scaled_frames(observation)
        if self._input_normalizer is not None:
            frames = self._input_normalizer(frames)
        clipped_reward = tf.clip_by_value(tf.cast(reward, tf.float32), -1.0, 1.0)
        one_hot_last_action = tf.one_hot(last_action, self._num_actions)

        def embedding(torso):
            features = self._features(torso, frames)
            return tf.concat([features, clipped_reward[:, tf.newaxis], one_hot_last_action], 1)

        policy_embedding = embedding(self._torso)
        if self._value_torso is None:
            return policy_embedding, policy_embedding
        return policy_embedding, embedding(self._value_torso)

    def _features(self, torso, frames):
        """`torso`'s features float32 [N, F] of float32 frames [N, *OBSERVATION_DIMS], computed
        in the torso's dtype: in bfloat16, from its float32 variables cast as they are read, so
        that their gradients and the optimizer stay float32."""
        if self._torso_dtype == tf.float32:
            return torso(frames)
        # The getter patches the torso's layer classes while it is active: one thread at a time.
        with _CAST_VARIABLES_LOCK:
            if torso.name not in self._torsos_with_variables:
                torso(frames)  # Sonnet creates variables in the first input's dtype.
                self._torsos_with_variables.add(torso.name)
            torso_modules = (torso, *torso.submodules)
            cast = functools.partial(tf.cast, dtype=self._torso_dtype)
            with snt.custom_variable_getter(cast, instances=torso_modules):
                features = torso(tf.cast(frames, self._torso_dtype))
        return tf.cast(features, tf.float32)

    def _unroll_core(self, inputs, done, core_state):
        """Steps the core over time: inputs [T, B, F], done bool [T, B] -> outputs [T, B, F']."""
        if self._core is None:
            return inputs, core_state
        num_steps = done.shape[0]
        if num_steps is None:
            raise ValueError(
                f"{type(self).__name__}.unroll needs a static number of steps T, got done of "
                f"shape {done.shape}"
            )
        initial_state = self.initial_state(tf.shape(done)[1])
        outputs = []
        # A Python loop over the static T (unrolled once when traced): no state-reset support in
        # the cores' own unroll helpers, and variables are created on the first step.
        for t in range(num_steps):
            reset = functools.partial(_reset_where_done, done[t])
            core_state = tree.map_structure(reset, initial_state, core_state)
            output, core_state = self._core(inputs[t], core_state)
            outputs.append(output)
        return tf.stack(outputs), core_state

    def _head(self, core_output, value_input):
        """Policy logits [N, A] of `core_output` [N, F'], baseline [N] of `value_input` (the same
        tensor, or the value torso's embedding) and an action [N] sampled from the policy."""
        policy_logits = self._policy_logits(core_output)
        baseline = tf.squeeze(self._baseline(value_input), axis=-1)
        action = tf.squeeze(tf.random.categorical(policy_logits, 1, dtype=tf.int32), axis=-1)
        return AgentOutput(action, policy_logits, baseline)

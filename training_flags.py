"""The training flags: defined once here, read by experiment.py, forwarded by the frontend.

Flag names follow the original IMPALA/Horovod scripts so their users' commands keep working.
Every flag defined through `_training_flag` is part of `TRAINING_FLAG_NAMES`, the one list the
frontend (run_experiment_mm_raw.py) forwards unchanged to every learner and actor.
"""

from absl import flags

TRAINING_FLAG_NAMES = []


def _training_flag(define, name, *args, **kwargs):
    """define(name, *args, **kwargs), e.g. flags.DEFINE_integer, and records the name."""
    define(name, *args, **kwargs)
    TRAINING_FLAG_NAMES.append(name)


# Where things go.
_training_flag(flags.DEFINE_string, "logdir", "/tmp/impala", "Checkpoints and summaries.")

# Environment.
_training_flag(
    flags.DEFINE_string,
    "level_name",
    "PongNoFrameskip-v4",
    "Gymnasium id: classic Atari ids (PongNoFrameskip-v4), ALE/Pong-v5, or any env with a Box "
    "observation and a Discrete action space (CartPole-v1).",
)
_training_flag(flags.DEFINE_integer, "width", 84, "Width of preprocessed Atari frames.")
_training_flag(flags.DEFINE_integer, "height", 84, "Height of preprocessed Atari frames.")
_training_flag(flags.DEFINE_bool, "sticky_actions", False, "Atari: repeat_action_probability 0.25.")
_training_flag(flags.DEFINE_integer, "num_envs_per_actor", 8, "Environments each actor steps.")
_training_flag(flags.DEFINE_integer, "seed", 1, "Random seed (offset per actor and env).")

# Agent and training schedule.
_training_flag(flags.DEFINE_string, "agent_name", "SimpleConvNetAgent", "See agents.AGENTS.")
_training_flag(
    flags.DEFINE_integer,
    "total_environment_frames",
    10_000_000,
    "Environment frames (agent steps x action repeat, summed over all learners) to train for.",
)
_training_flag(flags.DEFINE_integer, "batch_size", 32, "Unrolls per learner batch.")
_training_flag(flags.DEFINE_integer, "unroll_length", 20, "Agent steps T per unroll.")
_training_flag(
    flags.DEFINE_integer,
    "queue_capacity",
    64,
    "Unrolls the learner's queue holds; with the prefetched batch it bounds the policy lag.",
)

# Loss.
_training_flag(flags.DEFINE_float, "entropy_cost", 0.01, "Entropy cost.")
_training_flag(flags.DEFINE_float, "baseline_cost", 0.5, "Baseline cost.")
_training_flag(flags.DEFINE_float, "discounting", 0.99, "Discount factor.")
_training_flag(
    flags.DEFINE_enum,
    "reward_clipping",
    "abs_one",
    ["abs_one", "soft_asymmetric"],
    "How the learner clips rewards.",
)

# Optimizer (RMSProp, learning rate decayed linearly to 0 over total_environment_frames).
_training_flag(flags.DEFINE_float, "learning_rate", 0.0006, "Initial learning rate.")
_training_flag(flags.DEFINE_float, "decay", 0.99, "RMSProp decay (rho).")
_training_flag(flags.DEFINE_float, "momentum", 0.0, "RMSProp momentum.")
_training_flag(flags.DEFINE_float, "epsilon", 0.01, "RMSProp epsilon.")
_training_flag(
    flags.DEFINE_float, "gradients_clipping", 40.0, "Global-norm gradient clipping; negative = off."
)

# Operations.
_training_flag(flags.DEFINE_integer, "checkpoint_secs", 300, "Seconds between checkpoints.")
_training_flag(flags.DEFINE_integer, "log_secs", 10, "Seconds between learner log lines.")
_training_flag(
    flags.DEFINE_integer,
    "batch_timeout_secs",
    300,
    "A learner that gets no batch from its actors for this long logs an error and shuts the "
    "whole job down (so other learners never hang inside an allreduce).",
)
_training_flag(
    flags.DEFINE_integer,
    "learner_wait_secs",
    600,
    "How long an actor waits for its learner (at start and after losing it) before giving up.",
)
_training_flag(flags.DEFINE_integer, "test_num_episodes", 10, "Episodes played in --mode=test.")
_training_flag(
    flags.DEFINE_enum,
    "test_action_selection",
    "sample",
    ["sample", "greedy"],
    "--mode=test: sample from the policy or take its most likely action.",
)


def forwarded_flag_args(flag_values=flags.FLAGS):
    """Every training flag as `--name=value`, for the frontend to pass to each worker."""
    return [flag_values[name].serialize() for name in TRAINING_FLAG_NAMES]

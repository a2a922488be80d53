"""The training configuration: one frozen dataclass, each setting documented once, here.

Every field of `Config` is also a command-line flag of the same name (`define_flags`), so the
flags and the configuration cannot drift apart; the names follow the original IMPALA/Horovod
scripts so their users' commands keep working. Processes parse their flags once and pass the
`Config` built from them (`from_flags`) to the learner, the actor and the loss. The frontend
forwards every field unchanged to every worker (`flag_args`).

  config = Config()                                  # the defaults
  config = dataclasses.replace(config, batch_size=8) # a variation, e.g. in a test
"""

import dataclasses

from absl import flags


def setting(default, help, choices=None):  # noqa: A002 - the name absl uses.
    """A Config field with its flag help (and allowed values, for an enum flag)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything a learner or an actor needs to know besides its place in the cluster."""

    # Where things go.
    logdir: str = setting("/tmp/impala", "Checkpoints and summaries.")

    # Environment.
    level_name: str = setting(
        "PongNoFrameskip-v4",
        "Gymnasium id: classic Atari ids (PongNoFrameskip-v4), ALE/Pong-v5, or any env with a "
        "Box observation and a Discrete action space (CartPole-v1, PixelBandit-v0).",
    )
    width: int = setting(84, "Width of preprocessed Atari frames.")
    height: int = setting(84, "Height of preprocessed Atari frames.")
    sticky_actions: bool = setting(False, "Atari: repeat_action_probability 0.25.")
    num_envs_per_actor: int = setting(8, "Environments each actor steps.")
    seed: int = setting(1, "Random seed (offset per actor and env).")

    # Agent and training schedule.
    agent_name: str = setting("SimpleConvNetAgent", "See agents.AGENTS.")
    initialization: str = setting(
        "orthogonal",
        "Weight initialisation: 'sonnet' (truncated normal, stddev 1/sqrt(fan_in), as the IMPALA "
        "paper) or 'orthogonal' (gain sqrt(2) for ReLU layers, 0.01 policy head, 1 value head).",
        choices=["sonnet", "orthogonal"],
    )
    total_environment_frames: int = setting(
        10_000_000,
        "Environment frames (agent steps x action repeat, summed over all learners) to train for.",
    )
    batch_size: int = setting(32, "Unrolls per learner batch.")
    unroll_length: int = setting(20, "Agent steps T per unroll.")
    queue_capacity: int = setting(
        64, "Unrolls the learner's queue holds; with the prefetched batch it bounds the policy lag."
    )

    # Loss.
    entropy_cost: float = setting(0.01, "Entropy cost.")
    baseline_cost: float = setting(0.5, "Baseline cost.")
    discounting: float = setting(0.99, "Discount factor.")
    vtrace_lambda: float = setting(
        1.0,
        "V-trace's lambda (c_i = lambda * min(1, rho_i)): on-policy its targets are "
        "lambda-returns; 1 is the IMPALA paper's V-trace.",
    )
    normalize_advantages: bool = setting(
        False,
        "Scale the policy-gradient advantages of each batch to zero mean and unit standard "
        "deviation (as PPO does), so that the policy's step does not shrink with the rewards.",
    )
    policy_clip: float = setting(
        0.0,
        "PPO's clipped surrogate in place of IMPALA's policy gradient: the ratio pi/mu of each "
        "step is clipped to [1 - this, 1 + this] and the advantages are lambda-returns of the "
        "values stored by the actor, as PPO's (APPO and IMPACT do the same with V-trace value "
        "targets); keeps reused experience (replay, --epochs in bench.inprocess) from moving "
        "the policy too far; 0: off.",
    )
    reward_clipping: str = setting(
        "abs_one", "How the learner clips rewards.", choices=["abs_one", "soft_asymmetric"]
    )

    # Optimizer (the learning rate decays linearly to 0 over total_environment_frames).
    optimizer: str = setting(
        "adam",
        "'rmsprop' (Sonnet's, as TF1's: g / sqrt(ms + epsilon)) or 'adam' (g' / (sqrt(v') + "
        "epsilon), betas 0.9 and 0.999).",
        choices=["rmsprop", "adam"],
    )
    learning_rate: float = setting(0.0006, "Initial learning rate.")
    decay: float = setting(0.99, "RMSProp decay (rho).")
    momentum: float = setting(0.0, "RMSProp momentum.")
    epsilon: float = setting(
        1e-5, "The optimizer's epsilon (the IMPALA paper's RMSProp: 0.01, inside the root)."
    )
    gradients_clipping: float = setting(40.0, "Global-norm gradient clipping; negative = off.")

    # Experience replay (replay.py): each learner replays its own actors' unrolls.
    replay_size: int = setting(
        0, "Unrolls each learner's replay memory holds; 0: no replay (plain IMPALA)."
    )
    replay_ratio: float = setting(
        1.0,
        "Replayed unrolls per on-policy unroll: a batch holds --batch_size on-policy unrolls and "
        "round(batch_size * replay_ratio) replayed ones (once the memory holds "
        "max(that, replay_size // 10)).",
    )
    replay_prioritized: bool = setting(
        False, "Sample replayed unrolls by priority (their V-trace errors), not uniformly."
    )
    replay_alpha: float = setting(0.6, "Prioritized replay: priority exponent alpha.")
    replay_beta: float = setting(
        0.4,
        "Prioritized replay: importance-sampling exponent beta at the start, annealed linearly "
        "to 1 over total_environment_frames.",
    )
    replay_trust_region: float = setting(
        0.0,
        "LASER's trust region: steps whose behaviour policy is further than this KL(mu || pi) "
        "from the current policy are left out of the V-trace targets; 0: off.",
    )

    # Operations.
    checkpoint_secs: int = setting(300, "Seconds between checkpoints.")
    log_secs: int = setting(10, "Seconds between learner log lines.")
    batch_timeout_secs: int = setting(
        300,
        "A learner that gets no batch from its actors for this long logs an error and shuts the "
        "whole job down (so other learners never hang inside an allreduce).",
    )
    learner_wait_secs: int = setting(
        600,
        "How long an actor waits for its learner (at start and after losing it) before giving up.",
    )
    test_num_episodes: int = setting(10, "Episodes played in --mode=test.")
    test_action_selection: str = setting(
        "sample",
        "--mode=test: sample from the policy or take its most likely action.",
        choices=["sample", "greedy"],
    )


FIELDS = dataclasses.fields(Config)
NAMES = tuple(field.name for field in FIELDS)

_DEFINE = {
    str: flags.DEFINE_string,
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
    bool: flags.DEFINE_bool,
}


def define_flags(flag_values=flags.FLAGS):
    """Defines one flag per Config field (idempotent: flags already defined are kept)."""
    for field in FIELDS:
        if field.name in flag_values:
            continue
        help_text, choices = field.metadata["help"], field.metadata["choices"]
        if choices:
            flags.DEFINE_enum(
                field.name, field.default, choices, help_text, flag_values=flag_values
            )
        else:
            _DEFINE[field.type](field.name, field.default, help_text, flag_values=flag_values)


def from_flags(flag_values=flags.FLAGS):
    """The Config the parsed flags describe."""
    return Config(**{name: flag_values[name].value for name in NAMES})


def flag_args(config):
    """`config` as `--name=value` arguments, every field, for the frontend to pass to workers."""
    args = []
    for name in NAMES:
        value = getattr(config, name)
        args.append(
            f"--{name}={value}" if not isinstance(value, bool) else f"--{'no' * (not value)}{name}"
        )
    return args

"""The training configuration: one frozen dataclass, each setting documented once, here.

Every field of `Config` is also a command-line flag of the same name (`define_flags`), so the
flags and the configuration cannot drift apart; the names follow the original IMPALA/Horovod
scripts so their users' commands keep working. Processes parse their flags once and pass the
`Config` built from them (`from_flags`) to the learner, the actor and the loss. The defaults
depend on the environment family of --level_name (`environment_family`): `Config`'s own are the
image family's (Atari), `VECTOR_DEFAULTS` replace some of them for vector observations
(CartPole); a flag given always wins. The frontend resolves them once and forwards every field
to every worker (`flag_args`); a worker started by hand resolves them the same way. Each numeric
field declares its bounds (or why it has none), checked as the flags are parsed: the frontend
and every worker refuse the same values, naming the flag, before anything starts.

  config = Config()                                  # the defaults
  config = dataclasses.replace(config, batch_size=8) # a variation, e.g. in a test
"""

import dataclasses
import functools
import math
import os
import tempfile

from absl import flags


def setting(
    default,
    help,  # noqa: A002
    choices=None,
    lower_bound=None,
    upper_bound=None,
    greater_than=None,
    less_than=None,
    unbounded=None,
):
    """A Config field with its flag help (absl's name) and allowed values: an enum flag's
    choices; a numeric flag's bounds, inclusive (`lower_bound`, `upper_bound`) or strict
    (`greater_than`, `less_than`), or `unbounded`: why every value of it has a meaning."""
    return dataclasses.field(
        default=default,
        metadata={
            "help": help,
            "choices": choices,
            "lower_bound": lower_bound,
            "upper_bound": upper_bound,
            "greater_than": greater_than,
            "less_than": less_than,
            "unbounded": unbounded,
        },
    )


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything a learner or an actor needs to know besides its place in the cluster.

    The defaults, the image family's (`VECTOR_DEFAULTS` replace some for vector observations),
    are PPO's Atari recipe on this learner with smaller updates, which learn Pong faster than
    PPO's own updates or the IMPALA paper's settings (IMPALA_PAPER below): each
    agent step is learned from ~3 times (replay ratio 2) under the clipped surrogate; each
    optimizer step is on 2 unrolls of 32 steps (64 steps, summed over all learners: one learner
    trains its batch of 2 on-policy + 4 replayed unrolls in 3 minibatches of 2 unrolls, two
    learners theirs in 6 of one unroll each); lambda 0.95, normalised advantages, Adam at
    2.5e-4 without gradient clipping; inputs normalised by their running statistics, the value
    term by its targets' running variance.
    """

    # Where things go.
    logdir: str = setting("/tmp/impala", "Checkpoints and summaries.")

    # Environment.
    level_name: str = setting(
        "PongNoFrameskip-v4",
        "Gymnasium id: classic Atari ids (PongNoFrameskip-v4), ALE/Pong-v5, or any env with a "
        "Box observation and a Discrete action space (CartPole-v1, PixelBandit-v0). Its "
        "observations choose the defaults of the flags not given: images (rank 2 or more) keep "
        "those shown here, vectors (rank 1) take config.VECTOR_DEFAULTS.",
    )
    width: int = setting(84, "Width of preprocessed Atari frames.", lower_bound=1)
    height: int = setting(84, "Height of preprocessed Atari frames.", lower_bound=1)
    sticky_actions: bool = setting(False, "Atari: repeat_action_probability 0.25.")
    num_envs_per_actor: int = setting(8, "Environments each actor steps.", lower_bound=1)
    parameter_refresh_steps: int = setting(
        0,
        "Actors also load the learner's newest parameters every this many steps inside an "
        "unroll (0: only before each unroll). More environments per actor batch its inference "
        "better but stretch an unroll's wall time, and with it the policy lag, which refreshing "
        "takes part of back. V-trace corrects each step with the behaviour logits it was acted "
        "with.",
        lower_bound=0,
    )
    # Non-negative: numpy's generators refuse negative seeds.
    seed: int = setting(1, "Random seed (offset per actor and env).", lower_bound=0)

    # Agent and training schedule.
    agent_name: str = setting("SimpleConvNetAgent", "See agents.AGENTS.")
    torso_dtype: str = setting(
        "float32",
        "The torso's arithmetic (convolutions and hidden layers): 'bfloat16' from float32 "
        "variables, the heads, the loss and the optimizer staying float32; 'auto': bfloat16 on "
        "each host whose CPU computes it natively (AVX512_BF16 or AMX), else float32.",
        choices=["float32", "bfloat16", "auto"],
    )
    normalize_input: bool = setting(
        True,
        "Normalise each element of the observations by its running mean and deviation, which "
        "the learner updates from every fresh batch and ships to the actors with the "
        "parameters (agents/input_normalization.py); --nonormalize_input: frames are only "
        "scaled to [0, 1].",
    )
    normalize_input_prior: int = setting(
        1000,
        "--normalize_input's statistics start as this many observations of mean 0 and variance "
        "1 (the frames as scaled), which the observations folded in then outweigh: elements "
        "that did not change in the first batches are not scaled to +-5 at once. 0: the first "
        "batch's statistics replace the start.",
        lower_bound=0,
    )
    separate_value_torso: bool = setting(
        False,
        "The value head reads a torso of its own (the same layers, other variables; feed-forward "
        "agents): the value's gradients then shape only its own features, not the policy's (as "
        "the separate networks of DNA and PPG); twice the torso's work per step.",
    )
    initialization: str = setting(
        "orthogonal",
        "Weight initialisation: 'sonnet' (truncated normal, stddev 1/sqrt(fan_in), as the IMPALA "
        "paper) or 'orthogonal' (gain sqrt(2) for ReLU layers, 0.01 policy head, 1 value head).",
        choices=["sonnet", "orthogonal"],
    )
    total_environment_frames: int = setting(
        10_000_000,
        "Environment frames (agent steps x action repeat, summed over all learners) to train for.",
        lower_bound=1,
    )
    batch_size: int = setting(2, "On-policy unrolls per learner batch.", lower_bound=1)
    unroll_length: int = setting(32, "Agent steps T per unroll.", lower_bound=1)
    queue_capacity: int = setting(
        8,
        "Unrolls the learner's queue holds; with the prefetched batch it bounds the policy lag.",
        lower_bound=1,
    )
    xla: str = setting(
        "auto",
        "Compile the learner's loss-and-gradients and its update with XLA (each minibatch; the "
        "allreduce between them is Horovod's): 'on', 'off', or 'auto': train the first batches "
        "with both in turn and keep the one that costs less CPU on this machine "
        "(step_choice.py: which one is cheaper depends on the CPU).",
        choices=["auto", "on", "off"],
    )
    minibatch_unrolls: int = setting(
        2,
        "Unrolls per optimizer step, over all learners (PPO's minibatch): each learner shuffles "
        "its batch (on-policy and replayed unrolls) and trains it in minibatches of its share "
        "(this / learners unrolls; one when there are more learners), one step each with the "
        "gradients summed over the learners; 0: one step on each learner's whole batch. Each "
        "step's loss sums over its steps: scale --epsilon and --gradients_clipping with them. "
        "64-step updates learn Pong faster than 128-step ones.",
        lower_bound=0,
    )

    # Loss.
    entropy_cost: float = setting(0.01, "Entropy cost.", lower_bound=0.0)
    baseline_cost: float = setting(0.5, "Baseline cost.", lower_bound=0.0)
    normalize_value_loss: bool = setting(
        True,
        "Divide the value term by the running variance of the V-trace targets (learner.py), so "
        "that --baseline_cost weighs it against the policy term alike whatever the scale of a "
        "game's returns (as Sample Factory's normalised returns do).",
    )
    value_loss_divisor: str = setting(
        "variance",
        "With --normalize_value_loss, what of the V-trace targets' running moments divides the "
        "value term: their variance (the term free of the returns' scale) or their std (a game "
        "with larger returns keeps a heavier term, between the variance's and the raw term).",
        choices=["variance", "std"],
    )
    popart: bool = setting(
        False,
        "PopArt's value head (agents/popart.py): the value in units of its targets' running "
        "moments, which the learner moves after each batch while keeping the values as they "
        "were; the value term is divided by the targets' variance whatever "
        "--normalize_value_loss says (refused with --value_loss_divisor=std).",
    )
    discounting: float = setting(0.99, "Discount factor.", lower_bound=0.0, upper_bound=1.0)
    vtrace_lambda: float = setting(
        0.95,
        "V-trace's lambda (c_i = lambda * min(1, rho_i)): on-policy its targets are "
        "lambda-returns; 1 is the IMPALA paper's V-trace.",
        lower_bound=0.0,
        upper_bound=1.0,
    )
    normalize_advantages: bool = setting(
        True,
        "Scale the policy-gradient advantages of each batch to zero mean and unit standard "
        "deviation (as PPO does), so that the policy's step does not shrink with the rewards.",
    )
    # Below 1: the ratio's lower clip, 1 - this, stays positive.
    policy_clip: float = setting(
        0.1,
        "PPO's clipped surrogate in place of IMPALA's policy gradient: the ratio pi/mu of each "
        "step is clipped to [1 - this, 1 + this] and the advantages are lambda-returns of the "
        "values stored by the actor, as PPO's (APPO and IMPACT do the same with V-trace value "
        "targets); keeps reused experience (replay) from moving the policy too far; 0: off.",
        lower_bound=0.0,
        less_than=1.0,
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
    learning_rate: float = setting(2.5e-4, "Initial learning rate.", greater_than=0.0)
    # Below 1: at 1 the mean square never moves from its start.
    decay: float = setting(0.99, "RMSProp decay (rho).", lower_bound=0.0, less_than=1.0)
    # Below 1: at 1 or more past gradients never fade and the steps grow without bound.
    momentum: float = setting(0.0, "RMSProp momentum.", lower_bound=0.0, less_than=1.0)
    epsilon: float = setting(
        6.4e-4,
        "The optimizer's epsilon; the losses are sums over the steps of an update (all "
        "learners' minibatches), so a mean-loss epsilon times those steps (PPO's 1e-5 x 64; "
        "the IMPALA paper's RMSProp: 0.01, inside the root).",
        greater_than=0.0,
    )
    gradients_clipping: float = setting(
        0.0,
        "Global-norm gradient clipping of the summed loss (PPO's 0.5 is 32 for 64 steps per "
        "update); 0 or negative: off.",
        unbounded="a positive value is the clipping norm, any other turns clipping off",
    )

    # Experience replay (replay.py): each learner replays its own actors' unrolls.
    replay_size: int = setting(
        64,
        "Unrolls each learner's replay memory holds; 0: no replay (plain IMPALA).",
        lower_bound=0,
    )
    replay_ratio: float = setting(
        2.0,
        "Replayed unrolls per on-policy unroll: a batch holds --batch_size on-policy unrolls and "
        "round(batch_size * replay_ratio) replayed ones (once the memory holds "
        "max(that, replay_size // 10)).",
        lower_bound=0.0,
    )
    replay_sampling: str = setting(
        "uniform",
        "How replayed unrolls are drawn from the memory (replay_mixing.py): 'uniform'; "
        "'prioritized' by their V-trace errors; 'elite': of candidates drawn uniformly, those "
        "whose stored behaviour policy is closest (KL) to the current one at a few states; "
        "'attentive': of candidates, those whose states are most like the on-policy batch's.",
        choices=["uniform", "prioritized", "elite", "attentive"],
    )
    # At most 16: the candidates' states go through the network at every learner batch.
    replay_candidates: int = setting(
        4,
        "Elite and attentive sampling: candidates drawn (uniformly, without replacement, at most "
        "the whole memory) per replayed unroll, lambda: each batch chooses R of lambda x R.",
        lower_bound=1,
        upper_bound=16,
    )
    replay_elite_strategy: int = setting(
        1,
        "Elite sampling's choice among the candidates, by distance: 1 the closest; 2 sorted, cut "
        "into R groups, the closest of each; 3 as 1 and 4 as 2, the least replayed so far first.",
        lower_bound=1,
        upper_bound=4,
    )
    replay_anneal: float = setting(
        0.0,
        "Elite and attentive sampling: lambda shrinks linearly over training toward 1 (every "
        "candidate chosen: uniform replay), by this share of the way at the end of the frame "
        "budget; 0: never, 1: uniform replay at the end.",
        lower_bound=0.0,
        upper_bound=1.0,
    )
    replay_alpha: float = setting(
        0.6, "Prioritized replay: priority exponent alpha.", lower_bound=0.0
    )
    replay_beta: float = setting(
        0.4,
        "Prioritized replay: importance-sampling exponent beta at the start, annealed linearly "
        "to 1 over total_environment_frames.",
        lower_bound=0.0,
        upper_bound=1.0,
    )
    replay_trust_region: float = setting(
        0.0,
        "LASER's trust region: steps whose behaviour policy is further than this KL(mu || pi) "
        "from the current policy are left out of the V-trace targets; 0: off.",
        lower_bound=0.0,
    )

    # Operations.
    intra_op_threads: int = setting(
        0,
        "TF kernel (intra-op) threads of each worker; 0: its share of the host's cores, so that "
        "the workers sharing them do not preempt one another (host_tuning.kernel_threads).",
        lower_bound=0,
    )
    actor_niceness: int = setting(
        10,
        "Niceness an actor adds to its own when it starts (0: none), so that a learner on its "
        "host, the bottleneck, gets the cores first.",
        lower_bound=0,
        upper_bound=19,
    )
    learner_realtime: str = setting(
        "auto",
        "Run the learner's threads (not Horovod's) under SCHED_FIFO, so that actors on its host "
        "run on the cores it leaves: 'auto' when its own actors share its host, 'on' always, "
        "'off' never; refused without CAP_SYS_NICE or the kernel's real-time throttling.",
        choices=["auto", "on", "off"],
    )
    pin_learners: bool = setting(
        True,
        "Give each of several learners on one host an equal share of its cores of its own, as "
        "they wait for one another at every minibatch's allreduce; a lone learner keeps all.",
    )
    checkpoint_secs: int = setting(300, "Seconds between checkpoints.", lower_bound=1)
    max_failed_checkpoints: int = setting(
        3,
        "Checkpoints in a row that may fail to be written (a full disk, an unwritable "
        "directory; each one line, tried again --checkpoint_secs later) before the learners "
        "stop, with status 5.",
        lower_bound=1,
    )
    log_secs: int = setting(
        10, "Seconds between learner log lines; 0: after every step.", lower_bound=0
    )
    batch_timeout_secs: int = setting(
        300,
        "A learner that gets no batch from its actors for this long logs an error and shuts the "
        "whole job down (so other learners never hang inside an allreduce).",
        lower_bound=1,
    )
    step_timeout_secs: int = setting(
        900,
        "A learner step that takes longer than this (besides waiting for its batch) is taken "
        "to be stuck: the learner logs so, prints the stacks of its threads and exits with "
        "status 4, for the frontend's supervisor to restart the learners from the last "
        "checkpoint; 0: no limit.",
        lower_bound=0,
    )
    # At least 1: at 0 an actor gives up at its first look at a learner still starting.
    learner_wait_secs: int = setting(
        600,
        "How long an actor waits for its learner (at start and after losing it) before giving up "
        "(exit 7: the frontend's supervisor restarts it), or while its learner's parameters, once "
        "they moved, stay at one version and its unrolls wait; a learner waits at least as long "
        "for its first batch.",
        lower_bound=1,
    )
    test_num_episodes: int = setting(10, "Episodes played in --mode=test.", lower_bound=1)
    test_action_selection: str = setting(
        "sample",
        "--mode=test and the evaluator: sample from the policy or take its most likely action.",
        choices=["sample", "greedy"],
    )

    # Evaluation during training (the evaluator job, evaluation.py).
    eval_interval_frames: int = setting(
        500_000,
        "The evaluator plays --eval_games full games with the newest parameters every this many "
        "environment frames of training (over all learners), and with the final ones.",
        lower_bound=1,
    )
    eval_games: int = setting(5, "Full games of each evaluation.", lower_bound=1)
    eval_video_every: int = setting(
        5,
        "The evaluator records the first game of its first evaluation and of every this many "
        "evaluations as an MP4 in <logdir>/videos; 0: none.",
        lower_bound=0,
    )


# The IMPALA paper's Atari settings (Espeholt et al. 2018, and DeepMind's scalable_agent): one
# use of each frame in batches of 32 unrolls of 20 steps, RMSProp (epsilon 0.01 inside the root)
# at 6e-4, Sonnet's initialisation, clipping at 40, frames only scaled.
# `dataclasses.replace(Config(), **IMPALA_PAPER)`, or these as flags.
IMPALA_PAPER = {
    "batch_size": 32,
    "minibatch_unrolls": 0,
    "unroll_length": 20,
    "queue_capacity": 64,
    "replay_size": 0,
    "policy_clip": 0.0,
    "vtrace_lambda": 1.0,
    "normalize_advantages": False,
    "normalize_input": False,
    "optimizer": "rmsprop",
    "learning_rate": 6e-4,
    "epsilon": 0.01,
    "gradients_clipping": 40.0,
    "initialization": "sonnet",
    "normalize_value_loss": False,
}


# The vector family's defaults (low-dimensional observations, such as CartPole's 4 numbers), in
# place of Config's, which are tuned for Atari frames; the same recipe otherwise.
VECTOR_DEFAULTS = {
    "agent_name": "MLPAgent",  # the conv torsos need frames
    # Config's 2.5e-4 is PPO's for the Atari network; an MLP learns CartPole faster at this
    # (rl-baselines3-zoo's tuned PPO for CartPole also starts at 1e-3, for Atari at 2.5e-4).
    "learning_rate": 1e-3,
    # A vector task's run is short: its budget (over which the learning rate decays) and an
    # evaluation every tenth of it.
    "total_environment_frames": 500_000,
    "eval_interval_frames": 50_000,
    # Each agent step learned from ~4 times: the ratio the vector family's learning was measured
    # at (the image family's 2 comes from Atari games, docs/performance.md).
    "replay_ratio": 3.0,
    # The value term's scale, the clipping and the input statistics' start the vector family's
    # learning was measured at; the image family's come from Atari games (docs/performance.md).
    "normalize_value_loss": False,
    "gradients_clipping": 32.0,
    "normalize_input_prior": 0,
}
# Each family's defaults in place of Config's; Config's own are the image family's.
FAMILY_DEFAULTS = {"image": {}, "vector": VECTOR_DEFAULTS}


@functools.lru_cache
def environment_family(level_name):
    """('image' or 'vector', why): the family of `level_name` by the rank of its observations,
    vector for rank 1 (e.g. CartPole's [4]), image for more (Atari's, the pixel games'
    [84, 84, 4]). A level that cannot be made here (no such env, a dependency missing) is of the
    image family, Config's defaults; it fails as the worker makes its environment."""
    import environments  # Gymnasium and ale-py: only once a configuration is resolved.

    try:
        shape = environments.observation_shape(level_name)
    except environments.UnknownEnvironmentError:
        return "image", f"{level_name}: no environment that can be made here"
    return ("vector" if len(shape) == 1 else "image"), f"{level_name}: observation shape {shape}"


def configure(settings):
    """The Config of `settings` (field: value, e.g. the flags given) over the defaults of the
    family of their level_name (Config's default level when they name none)."""
    family, _ = environment_family(settings.get("level_name", Config.level_name))
    return Config(**{**FAMILY_DEFAULTS[family], **settings})


def defaults_line(config):
    """One line for the logs: the family whose defaults `config` started from, why, and the
    settings the families choose that `config` changes (flags given, or forwarded from the
    frontend)."""
    family, why = environment_family(config.level_name)
    defaults = Config(**FAMILY_DEFAULTS[family])
    changed = {
        name: getattr(config, name)
        for name in NAMES
        if name in FAMILY_FIELDS and getattr(config, name) != getattr(defaults, name)
    }
    return (
        f"training defaults: the {family} family's ({why}); changed by flags: "
        f"{' '.join(flag_args(changed)) or 'none'}"
    )


class ConfigError(ValueError):
    """Settings that do not fit together (or not the cluster): one line naming the flag."""


def learner_minibatch_unrolls(minibatch_unrolls, num_learners):
    """Unrolls in each learner's minibatch: its share of --minibatch_unrolls over
    `num_learners` learners (at least one; 0: its whole batch).

    Raises ConfigError when the unrolls do not split evenly over the learners."""
    if minibatch_unrolls and minibatch_unrolls > num_learners and minibatch_unrolls % num_learners:
        raise ConfigError(
            f"--minibatch_unrolls={minibatch_unrolls} does not split evenly over "
            f"{num_learners} learners: give a multiple of {num_learners} (each learner's share "
            "of an update is whole unrolls)"
        )
    return max(1, minibatch_unrolls // num_learners) if minibatch_unrolls else 0


def check_logdir(logdir, writable=True):
    """Raises ConfigError, naming --logdir, the path and why, unless `logdir` is a directory (or
    could be made one) that this process can write in (only read: not `writable`).

    Creates nothing: writing is probed with a temporary directory in `logdir`, or in its
    nearest existing parent, removed at once."""
    if not logdir:
        raise ConfigError("--logdir is empty: give the directory for checkpoints and summaries")
    path = os.path.abspath(logdir)
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "it is a file" if existing == path else f"{existing} is a file"
        raise ConfigError(f"--logdir={logdir}: {what}, not a directory")
    if not writable:
        return
    try:
        with tempfile.TemporaryDirectory(prefix=".logdir_check_", dir=existing):
            pass
    except OSError as e:
        raise ConfigError(
            f"--logdir={logdir}: not writable: cannot create anything in {existing} ({e.strerror})"
        ) from e


FIELDS = dataclasses.fields(Config)
NAMES = tuple(field.name for field in FIELDS)
FAMILY_FIELDS = frozenset(name for defaults in FAMILY_DEFAULTS.values() for name in defaults)

_DEFINE = {
    str: flags.DEFINE_string,
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
    bool: flags.DEFINE_bool,
}


def is_number(field):
    """Whether `field` is a numeric setting (bool, though an int, is not)."""
    return field.type in (int, float)


def _check_number(field, value):
    """absl validator of a numeric field: a finite value within its strict bounds (absl itself
    checks the inclusive ones)."""
    greater_than, less_than = field.metadata["greater_than"], field.metadata["less_than"]
    if not math.isfinite(value):
        raise flags.ValidationError(f"{value} is not a finite number")
    if greater_than is not None and not value > greater_than:
        raise flags.ValidationError(f"{value} is not greater than {greater_than:g}")
    if less_than is not None and not value < less_than:
        raise flags.ValidationError(f"{value} is not less than {less_than:g}")
    return True


def _help(field):
    """The flag's help: the field's, with its strict bounds (absl adds the inclusive ones)."""
    strict = [
        f"{relation} {field.metadata[key]:g}"
        for key, relation in (("greater_than", "greater than"), ("less_than", "less than"))
        if field.metadata[key] is not None
    ]
    return field.metadata["help"] + (f" ({', '.join(strict)})" if strict else "")


def define_flags(flag_values=flags.FLAGS):
    """Defines one flag per Config field, its allowed values checked as the flags are parsed
    (idempotent: flags already defined are kept)."""
    for field in FIELDS:
        if field.name in flag_values:
            continue
        help_text, choices = _help(field), field.metadata["choices"]
        if choices:
            flags.DEFINE_enum(
                field.name, field.default, choices, help_text, flag_values=flag_values
            )
        elif is_number(field):
            _DEFINE[field.type](
                field.name,
                field.default,
                help_text,
                lower_bound=field.metadata["lower_bound"],
                upper_bound=field.metadata["upper_bound"],
                flag_values=flag_values,
            )
            flags.register_validator(
                field.name, functools.partial(_check_number, field), flag_values=flag_values
            )
        else:
            _DEFINE[field.type](field.name, field.default, help_text, flag_values=flag_values)
        if field.name == "popart":
            flags.register_multi_flags_validator(
                ["popart", "value_loss_divisor"],
                _check_popart,
                "--popart divides the value term by its targets' variance, its own units: "
                "drop --value_loss_divisor=std",
                flag_values=flag_values,
            )


def _check_popart(values):
    """absl validator: --popart goes with the variance as the value term's divisor."""
    return not values["popart"] or values["value_loss_divisor"] == "variance"


def given_flags(flag_values=flags.FLAGS):
    """The training flags given on the command line (absl's `present`) or set in code, as
    field: value."""
    return {
        name: flag_values[name].value
        for name in NAMES
        if flag_values[name].present or not flag_values[name].using_default_value
    }


def from_flags(flag_values=flags.FLAGS):
    """The Config the parsed flags describe: those given over the defaults of their level's
    family (`configure`)."""
    return configure(given_flags(flag_values))


def flag_args(settings):
    """`settings` as `--name=value` arguments: a Config gives every field (the frontend passes
    them to workers), a dict of some fields (e.g. IMPALA_PAPER) gives those."""
    if isinstance(settings, Config):
        settings = {name: getattr(settings, name) for name in NAMES}
    return [
        f"--{name}={value}" if not isinstance(value, bool) else f"--{'no' * (not value)}{name}"
        for name, value in settings.items()
    ]

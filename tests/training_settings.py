"""Training flags the end-to-end tests share, and the learners' last line they read."""

import re

import config

# CartPole on the IMPALA paper's settings (one use of each frame, IMPALA's plain policy gradient,
# RMSProp with epsilon 0.01, Sonnet's initialisation): the tests that run a training without
# judging what it learns (stalls, checkpoints, video, minibatches across ranks, shutdown) use it,
# so that this recipe, which the vector family's defaults leave out, still runs end to end.
CARTPOLE_SETTINGS = {
    **config.IMPALA_PAPER,
    "level_name": "CartPole-v1",
    "agent_name": "MLPAgent",
    "batch_size": 16,
    "unroll_length": 20,
    "num_envs_per_actor": 8,
    "gradients_clipping": -1.0,
    "entropy_cost": 0.01,
    "log_secs": 5,
    "batch_timeout_secs": 120,
    "learner_wait_secs": 120,
}
CARTPOLE = config.flag_args(CARTPOLE_SETTINGS)

# The tests that judge learning train the vector family's own defaults, the main job's recipe
# (the clipped surrogate with replay): IMPALA's recipe plateaus too close to the tests' bars in
# their budgets to clear them every run (docs/history.md).
CARTPOLE_LEARNING = config.flag_args(
    {
        "level_name": "CartPole-v1",
        "log_secs": 5,
        "batch_timeout_secs": 120,
        "learner_wait_secs": 120,
    }
)
# Two learners (one actor each) train to this budget.
CARTPOLE_TWO_LEARNERS_FRAMES = 200_000
CARTPOLE_TWO_LEARNERS = [
    *CARTPOLE_LEARNING,
    f"--total_environment_frames={CARTPOLE_TWO_LEARNERS_FRAMES}",
]

# A learner rank's last line (of two): (rank, global frames, why it stopped, its own frames,
# steps, the digest of its parameters).
STOPPED = re.compile(
    r"\[learner rank (\d)/2\] stopped at (\d+) environment frames \((.*?)\); this learner "
    r"trained on (\d+) frames in (\d+) steps; parameter digest (\w+)"
)

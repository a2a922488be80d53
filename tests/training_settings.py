"""Training flags the end-to-end tests share."""

import config

# CartPole, learnt in a few hundred thousand frames by one or two learners, on the IMPALA paper's
# settings (one use of each frame, RMSProp with epsilon 0.01, Sonnet's initialisation), with which
# the learning rates and bars of the tests were measured: these tests cover IMPALA's policy
# gradient without replay, which the vector family's defaults (config.VECTOR_DEFAULTS: the
# clipped surrogate with replay, measured by bench.learning's cartpole run) leave out. The
# settings named nowhere here take the vector family's defaults.
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

# The single-learner CartPole tests: Adam (epsilon 1e-5, orthogonal initialisation) at 0.001.
# With RMSProp at 0.003 the mean of the last 20 games ranged 115-500 over 15 runs (one CI run fell
# short of the 150 bar, its policy stuck near 115 as the learning rate decayed); with this,
# 220-300 without replay (6 runs) and 250-405 with replay ratio 1 (4 runs), each run 1 learner +
# 2 actors to 400K frames with 2 cores shared.
CARTPOLE_ADAM = config.flag_args(
    {
        **CARTPOLE_SETTINGS,
        "optimizer": "adam",
        "epsilon": 1e-5,
        "initialization": "orthogonal",
        "learning_rate": 0.001,
    }
)

# Two learners (one actor each), as CARTPOLE_ADAM: 8 unrolls per learner, so that each summed
# step sees 16, as the single-learner tests' steps do; 600K frames. A queue of 2 batches bounds
# the policy lag, which otherwise follows the machine's load (docs/history.md).
CARTPOLE_TWO_LEARNERS = [
    *CARTPOLE_ADAM,
    "--batch_size=8",
    "--queue_capacity=16",
    "--total_environment_frames=600000",
]

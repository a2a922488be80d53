"""Training flags the end-to-end tests share."""

# CartPole, learnt in a few hundred thousand frames by one or two learners. The optimizer is the
# IMPALA paper's (RMSProp, epsilon 0.01, Sonnet's initialisation), with which the learning rates
# of the tests were measured; the defaults are tuned for pixels.
CARTPOLE = [
    "--optimizer=rmsprop",
    "--epsilon=0.01",
    "--initialization=sonnet",
    "--level_name=CartPole-v1",
    "--agent_name=MLPAgent",
    "--batch_size=16",
    "--unroll_length=20",
    "--num_envs_per_actor=8",
    "--gradients_clipping=-1",
    "--entropy_cost=0.01",
    "--log_secs=5",
    "--batch_timeout_secs=120",
    "--learner_wait_secs=120",
]

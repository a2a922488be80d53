"""The learner's step: V-trace loss on a batch, gradients summed over Horovod ranks, clipping,
update.

Words (docs/architecture.md has the glossary): an *update* is one optimizer step on one
minibatch of unrolls; a *batch step* (the learner's step) trains one batch, as one or several
updates; an *agent step* is one action in one environment (T of them per unroll).

Public so that the learner, the tests and the benchmarks all run the very same step:

  optimizer = make_optimizer(config, learning_rate)   # learning_rate: a tf.Variable
  create_optimizer_state(optimizer, agent)            # before restoring or broadcasting it
  step = make_batch_step(agent, optimizer, config, hvd)
  unrolls = config_lib.learner_minibatch_unrolls(config.minibatch_unrolls, hvd.size())
  outputs, priorities = train_in_minibatches(step, batch, weights, unrolls, rng)
                              # batch: Unroll of [B, T+1, ...] arrays, weights: float32 [B]
                              # (1: on-policy); make_update's update is one minibatch's
"""

import functools

import numpy as np
import sonnet as snt
import tensorflow as tf

import losses
import step_choice
import unrolls
import vtrace


def vtrace_loss(agent, unroll, config, unroll_weights=None):
    """Total IMPALA loss of a time-major batch and its parts.

    Args:
      agent: the learner's agent.
      unroll: Unroll with env_outputs/agent_outputs [T+1, B, ...], agent_state [B, ...]. The
        behaviour policy is the logits stored in the unroll (agent_outputs.policy_logits), for
        on-policy and replayed unrolls alike.
      config: config.Config (discounting, reward_clipping, vtrace_lambda, normalize_advantages,
        policy_clip, baseline_cost, entropy_cost, replay_trust_region).
      unroll_weights: optional float32 [B] scaling each unroll's loss terms (replay's
        importance weights).

    Returns:
      (total_loss, dict of scalar loss parts, dict of statistics: scalars `entropy_fraction`,
      the mean entropy per step over its maximum ln A; `mean_abs_log_rho`, the mean
      |log pi(a|x) / mu(a|x)| of the taken actions; `clipped_rho_fraction`, the fraction of
      importance weights above V-trace's rho_bar = 1; `trust_region_fraction`, the fraction of
      steps left out by the trust region; and `priorities` [B], replay's priority of each
      unroll from its V-trace value errors).

    With config.replay_trust_region > 0 (LASER's trust region), a step whose behaviour policy
    is further than that from the current policy (KL(mu || pi) of the step's action
    distributions) is left out of the V-trace targets: its importance weight is set to 0, which
    removes its temporal difference, cuts the trace there and zeroes its policy gradient.
    """
    learner_outputs, _ = agent.unroll(
        unroll.agent_outputs.action, unroll.env_outputs, unroll.agent_state
    )
    bootstrap_value = learner_outputs.baseline[-1]  # [B]
    # Shift so that step t holds the action chosen on observation t and what it led to:
    # agent_outputs[t + 1] was computed on env_outputs[t] and produced env_outputs[t + 1].
    behaviour = tf.nest.map_structure(lambda t: t[1:], unroll.agent_outputs)
    rewards = unroll.env_outputs.reward[1:]
    done = unroll.env_outputs.done[1:]
    learner_outputs = tf.nest.map_structure(lambda t: t[:-1], learner_outputs)

    discounts = tf.cast(~done, tf.float32) * config.discounting  # [T, B]
    log_rhos = vtrace.log_probs_from_logits_and_actions(
        learner_outputs.policy_logits, behaviour.action
    ) - vtrace.log_probs_from_logits_and_actions(behaviour.policy_logits, behaviour.action)
    kept = tf.ones_like(log_rhos, tf.bool)
    if config.replay_trust_region > 0:
        kept = behaviour_kl(behaviour.policy_logits, learner_outputs.policy_logits) <= (
            config.replay_trust_region
        )
    kept_log_rhos = tf.where(kept, log_rhos, -float("inf"))  # rho = 0 outside the trust region
    clipped_rewards = losses.clip_rewards(rewards, config.reward_clipping)
    vtrace_returns = vtrace.from_importance_weights(
        log_rhos=kept_log_rhos,
        discounts=discounts,
        rewards=clipped_rewards,
        values=learner_outputs.baseline,
        bootstrap_value=bootstrap_value,
        trace_lambda=config.vtrace_lambda,
    )
    value_errors = vtrace_returns.vs - learner_outputs.baseline
    if config.policy_clip > 0:
        # PPO's advantages: lambda-returns of the values the behaviour policy computed as it
        # acted (stored in the unroll), the same however often the unroll is learned from. The
        # current values, fitted to this very unroll by the passes before, would leave little
        # in the advantages but noise (which normalisation would then scale up). PPO's clipped
        # ratio takes the place of V-trace's truncated rho.
        pg_advantages = vtrace.from_importance_weights(
            log_rhos=tf.zeros_like(log_rhos),
            discounts=discounts,
            rewards=clipped_rewards,
            values=behaviour.baseline,
            bootstrap_value=tf.stop_gradient(bootstrap_value),
            trace_lambda=config.vtrace_lambda,
        ).pg_advantages
    else:
        pg_advantages = vtrace_returns.pg_advantages
    if config.normalize_advantages:
        mean, variance = tf.nn.moments(pg_advantages, axes=[0, 1])
        pg_advantages = (pg_advantages - mean) / (tf.sqrt(variance) + 1e-8)
    if config.policy_clip > 0:
        policy_loss = losses.clipped_policy_loss(
            kept_log_rhos, pg_advantages, config.policy_clip, unroll_weights
        )
    else:
        policy_loss = losses.policy_gradient_loss(
            learner_outputs.policy_logits, behaviour.action, pg_advantages, unroll_weights
        )
    parts = {
        "policy_gradient": policy_loss,
        "baseline": losses.baseline_loss(value_errors, unroll_weights),
        "entropy": losses.entropy_loss(learner_outputs.policy_logits, unroll_weights),
    }
    total = (
        parts["policy_gradient"]
        + config.baseline_cost * parts["baseline"]
        + config.entropy_cost * parts["entropy"]
    )
    num_steps = tf.cast(tf.size(rewards), tf.float32)
    num_actions = tf.cast(tf.shape(learner_outputs.policy_logits)[-1], tf.float32)
    entropy = -losses.entropy_loss(learner_outputs.policy_logits)  # unweighted
    stats = {
        "entropy_fraction": entropy / (num_steps * tf.math.log(num_actions)),
        "mean_abs_log_rho": tf.reduce_mean(tf.abs(log_rhos)),
        "clipped_rho_fraction": tf.reduce_mean(tf.cast(log_rhos > 0, tf.float32)),
        "trust_region_fraction": 1 - tf.reduce_mean(tf.cast(kept, tf.float32)),
        "priorities": losses.unroll_priorities(value_errors),
    }
    return total, parts, tf.nest.map_structure(tf.stop_gradient, stats)


def behaviour_kl(behaviour_logits, target_logits):
    """KL(mu || pi) of each step's action distributions: [T, B, A] logits -> [T, B]."""
    behaviour_log_policy = tf.nn.log_softmax(behaviour_logits)
    return tf.reduce_sum(
        tf.exp(behaviour_log_policy) * (behaviour_log_policy - tf.nn.log_softmax(target_logits)),
        axis=-1,
    )


def local_gradients(agent, config, unroll, unroll_weights=None):
    """Gradients of the V-trace loss on this rank's batch, not averaged (XLA-compilable).

    Args:
      agent: the agent.
      config: config.Config (see vtrace_loss).
      unroll: Unroll of batch-major [B, T+1, ...] tensors (as dequeued).
      unroll_weights: optional float32 [B] (see vtrace_loss).

    Returns:
      (list of gradients, one per agent.trainable_variables; this rank's total loss; its parts
      and statistics, see vtrace_loss).
    """
    with tf.GradientTape() as tape:
        total, parts, stats = vtrace_loss(
            agent, unrolls.to_time_major(unroll), config, unroll_weights
        )
    return tape.gradient(total, agent.trainable_variables), total, parts, stats


def sum_over_ranks(hvd, gradients):
    """The gradients summed over all Horovod ranks (one grouped allreduce; none for 1 rank): the
    gradients of the loss summed over every rank's minibatch, so that --epsilon and
    --gradients_clipping refer to the steps of an update whatever the number of learners."""
    if hvd.size() == 1:
        return gradients
    return hvd.grouped_allreduce(gradients, op=hvd.Sum)


def loss_gradients(agent, unroll, config, hvd, unroll_weights=None):
    """local_gradients summed over all Horovod ranks: (gradients, total, parts, stats)."""
    gradients, total, parts, stats = local_gradients(agent, config, unroll, unroll_weights)
    return sum_over_ranks(hvd, gradients), total, parts, stats


def apply_gradients(optimizer, config, variables, gradients):
    """Clips `gradients` to config.gradients_clipping (global norm; <= 0: no clipping) and applies
    them to `variables` (XLA-compilable); returns their global norm before clipping."""
    gradient_norm = tf.linalg.global_norm(gradients)
    if config.gradients_clipping > 0:
        gradients, _ = tf.clip_by_global_norm(
            gradients, config.gradients_clipping, use_norm=gradient_norm
        )
    optimizer.apply(gradients, variables)
    return gradient_norm


class FusedAdam(snt.optimizers.Adam):
    """Sonnet's Adam (the same update, slots and checkpoint layout), applied with TF's fused
    kernel for less CPU per update: ResourceApplyAdam makes one pass over each variable where
    Sonnet's update runs ~10 ops.

    The kernel adds its epsilon to sqrt(v) before the bias correction; given epsilon x
    sqrt(1 - beta2^t) it adds Sonnet's (and PyTorch's) epsilon to sqrt(v / (1 - beta2^t)).
    """

    def apply(self, updates, parameters):
        """Applies `updates` (dense gradients, one per parameter) to `parameters`."""
        self._initialize(parameters)
        self.step.assign_add(1)
        step = tf.cast(self.step, tf.float32)
        beta1_power, beta2_power = self.beta1**step, self.beta2**step
        for update, parameter, m, v in zip(updates, parameters, self.m, self.v, strict=True):
            tf.raw_ops.ResourceApplyAdam(
                var=parameter.handle,
                m=m.handle,
                v=v.handle,
                beta1_power=beta1_power,
                beta2_power=beta2_power,
                lr=tf.cast(self.learning_rate, tf.float32),
                beta1=self.beta1,
                beta2=self.beta2,
                epsilon=self.epsilon * tf.sqrt(1 - beta2_power),
                grad=update,
            )


def make_optimizer(config, learning_rate):
    """The optimizer of `config`; `learning_rate` is a tf.Variable the learner schedules."""
    if config.optimizer == "adam":
        return FusedAdam(learning_rate=learning_rate, epsilon=config.epsilon)
    return snt.optimizers.RMSProp(
        learning_rate=learning_rate,
        decay=config.decay,
        momentum=config.momentum,
        epsilon=config.epsilon,
    )


def create_optimizer_state(optimizer, agent):
    """Creates the optimizer's slots with a zero update (which changes no variable), so that
    checkpoint restore and the Horovod broadcast cover them from the first step.

    Adam's step count is set back to 0 after it: counted, the zero update would shrink the
    bias-corrected first real steps (the first to 0.74 of a fresh Adam's, the next ones less).
    """
    variables = agent.trainable_variables
    optimizer.apply([tf.zeros_like(v) for v in variables], variables)
    if hasattr(optimizer, "step"):  # Adam's; RMSProp keeps none
        optimizer.step.assign(0)


class SingleProcess:
    """Stands in for Horovod (the `hvd` argument) in one process, as the benchmarks and tests
    run the step: one rank, nothing to average."""

    @staticmethod
    def size():
        return 1

    @staticmethod
    def rank():
        return 0


def single_process_step(agent, config):
    """(the learner's batch step in one process, as a tf.function of train_batch; its
    learning-rate variable, at config.learning_rate): the benchmarks' learner without Horovod."""
    learning_rate = tf.Variable(config.learning_rate)
    optimizer = make_optimizer(config, learning_rate)
    create_optimizer_state(optimizer, agent)
    step = make_batch_step(agent, optimizer, config, SingleProcess)
    return step, learning_rate


def make_update(agent, optimizer, config, hvd, xla):
    """One update on a minibatch: update(unroll [B, T+1, ...], unroll_weights float32 [B])
    -> (dict of scalars: the loss parts, `total`, `gradient_norm` (before clipping) and the
    scalar statistics of vtrace_loss; the replay priorities [B] of the unrolls).

    With `xla` the loss-and-gradients and the clip-and-update are each compiled by XLA,
    separately: Horovod's allreduce between them has no XLA kernel on CPU. Compiled once (the
    functions are made here, not per call) for each minibatch shape.
    """
    variables = agent.trainable_variables
    gradients_of = tf.function(functools.partial(local_gradients, agent, config), jit_compile=xla)
    apply = tf.function(
        functools.partial(apply_gradients, optimizer, config, variables), jit_compile=xla
    )

    def update(unroll, unroll_weights):
        gradients, total, parts, stats = gradients_of(unroll, unroll_weights)
        gradient_norm = apply(sum_over_ranks(hvd, gradients))
        priorities = stats.pop("priorities")
        return dict(parts, **stats, total=total, gradient_norm=gradient_norm), priorities

    return update


def make_batch_step(agent, optimizer, config, hvd):
    """The learner's batch step, a tf.function of train_batch over make_update's updates:
    step(unroll, unroll_weights, order, minibatches); run it with train_in_minibatches.

    XLA as --xla says; with 'auto' a step_choice.CheaperStep of the two that keeps the one
    that costs this machine less CPU."""

    def batch_step(xla):
        return tf.function(
            functools.partial(train_batch, make_update(agent, optimizer, config, hvd, xla))
        )

    if config.xla != "auto":
        return batch_step(config.xla == "on")
    return step_choice.CheaperStep({"xla": batch_step(True), "plain": batch_step(False)}, hvd)


def train_batch(update, unroll, unroll_weights, order, minibatches):
    """The learner's step on one batch: one update per minibatch of whole unrolls, as
    PPO's minibatches, all in one graph (wrap it in tf.function): one Python call per batch,
    which costs less CPU and wall time than a call per minibatch.

    Args:
      update: an update of make_update.
      unroll: Unroll of batch-major [N, T+1, ...] tensors; N static.
      unroll_weights: float32 [N], each unroll's loss weight.
      order: int32 [N], a permutation of 0..N-1: the unrolls in this order are split into
        min(minibatches, N) consecutive minibatches (sizes differing by at most one).
      minibatches: a Python int (each count is a graph of its own); 1: one update on the batch
        as it is.

    Returns:
      (dict of scalars: each output of the updates, averaged over them; float32 priorities [N]
      in the batch's order).
    """
    num_unrolls = unroll_weights.shape[0]
    parts = np.array_split(np.arange(num_unrolls), min(minibatches, num_unrolls))
    if len(parts) == 1:
        return update(unroll, unroll_weights)
    outputs, priorities = [], []
    for part in parts:
        positions = order[part[0] : part[-1] + 1]
        minibatch = tf.nest.map_structure(lambda t: tf.gather(t, positions), unroll)  # noqa: B023
        update_outputs, update_priorities = update(minibatch, tf.gather(unroll_weights, positions))
        outputs.append(update_outputs)
        priorities.append(update_priorities)
    means = {name: tf.reduce_mean(tf.stack([o[name] for o in outputs])) for name in outputs[0]}
    return means, tf.scatter_nd(order[:, None], tf.concat(priorities, 0), [num_unrolls])


def train_in_minibatches(batch_step, batch, weights, unrolls_per_minibatch, rng):
    """Runs `batch_step` (of make_batch_step) on a batch with its unrolls shuffled.

    Args:
      batch: Unroll of batch-major [N, T+1, ...] numpy arrays.
      weights: float32 [N], each unroll's loss weight.
      unrolls_per_minibatch: the batch is trained in ceil(N / this) minibatches (sizes
        differing by at most one); 0: one update on the whole batch
        (config.learner_minibatch_unrolls).
      rng: numpy Generator of the shuffle.

    Returns:
      (dict of floats: each output of the updates, averaged over them; float32 numpy priorities
      [N] in the batch's order).
    """
    order = rng.permutation(len(weights)).astype(np.int32)
    minibatches = -(-len(weights) // unrolls_per_minibatch) if unrolls_per_minibatch else 1
    outputs, priorities = batch_step(batch, weights, order, minibatches)
    return {name: float(value) for name, value in outputs.items()}, priorities.numpy()

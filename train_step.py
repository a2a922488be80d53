"""The learner's step: the actor-critic loss of a batch (PPO's clipped surrogate on V-trace
targets by default; its terms in losses.py), gradients summed over Horovod ranks, clipping,
update.

Words (docs/architecture.md has the glossary): an *update* is one optimizer step on one
minibatch of unrolls; a *batch step* (the learner's step) trains one batch, as one or several
updates; an *agent step* is one action in one environment (T of them per unroll).

Public so that the learner, the tests and the benchmarks all run the very same step:

  optimizer = make_optimizer(config, learning_rate)   # learning_rate: a tf.Variable
  create_optimizer_state(optimizer, agent)            # before restoring or broadcasting it
  step = make_batch_step(agent, optimizer, config, hvd, value_target_moments(config))
  unrolls = config_lib.learner_minibatch_unrolls(config.minibatch_unrolls, hvd.size())
  outputs, priorities = train_in_minibatches(step, batch, weights, unrolls, rng)
                              # batch: Unroll of [B, T+1, ...] arrays, weights: float32 [B]
                              # (1: on-policy); make_update's update is one minibatch's
"""

import functools
import typing

import numpy as np
import sonnet as snt
import tensorflow as tf

import agents
import losses
import step_choice
import unrolls
import vtrace
from agents.running_moments import RunningMoments

# The floor of --normalize_value_loss's divisor: targets that do not vary yet (no reward seen)
# would weigh the value term without bound; 1e-2 is a deviation of 0.1 in clipped rewards' units.
MIN_TARGET_VARIANCE = 1e-2


class Steps(typing.NamedTuple):
    """A time-major batch's T agent steps, aligned: step t holds the action chosen on observation
    t and what it led to."""

    learner: agents.AgentOutput  # The learner's outputs on observations 0..T-1, [T, B, ...].
    behaviour: agents.AgentOutput  # The actors' as stored (action, logits, values), [T, B, ...].
    rewards: tf.Tensor  # float32 [T, B], clipped as --reward_clipping says.
    discounts: tf.Tensor  # float32 [T, B]: --discounting, 0 where an episode ended.
    bootstrap_value: tf.Tensor  # float32 [B], the learner's value of observation T.


def aligned_steps(agent, unroll, config):
    """The Steps of `unroll` (env_outputs/agent_outputs [T+1, B, ...], agent_state [B, ...]), the
    learner's outputs computed by `agent` on it; config: reward_clipping, discounting."""
    learner_outputs, _ = agent.unroll(
        unroll.agent_outputs.action, unroll.env_outputs, unroll.agent_state
    )
    # agent_outputs[t + 1] was computed on env_outputs[t] and produced env_outputs[t + 1].
    return Steps(
        learner=tf.nest.map_structure(lambda t: t[:-1], learner_outputs),
        behaviour=tf.nest.map_structure(lambda t: t[1:], unroll.agent_outputs),
        rewards=losses.clip_rewards(unroll.env_outputs.reward[1:], config.reward_clipping),
        discounts=tf.cast(~unroll.env_outputs.done[1:], tf.float32) * config.discounting,
        bootstrap_value=learner_outputs.baseline[-1],
    )


def raw_advantages(steps, vtrace_returns, config):
    """The policy term's advantages before any normalisation, float32 [T, B]: PPO's with
    --policy_clip > 0, V-trace's (`vtrace_returns`, of the current values) with 0."""
    if config.policy_clip > 0:
        # Lambda-returns of the values the behaviour policy computed as it acted (stored in the
        # unroll), the same however often the unroll is learned from. The current values,
        # fitted to this very unroll by the passes before, would leave little in the advantages
        # but noise (which normalisation would then scale up). PPO's clipped ratio takes the
        # place of V-trace's truncated rho.
        advantages = losses.lambda_return_advantages(
            steps.discounts,
            steps.rewards,
            steps.behaviour.baseline,
            steps.bootstrap_value,
            config.vtrace_lambda,
        )
    else:
        advantages = vtrace_returns.pg_advantages
    return advantages


def actor_critic_loss(agent, unroll, config, unroll_weights=None, target_variance=None):
    """The learner's loss of a time-major batch: the policy term (PPO's clipped surrogate by
    default, IMPALA's policy gradient with --policy_clip=0) + baseline_cost x the value term (the
    squared error to V-trace's targets, over `target_variance` if given) + entropy_cost x the
    entropy term.

    With config.replay_trust_region > 0 (LASER's trust region), a step whose behaviour policy
    is further than that from the current policy (losses.trust_region) is left out of the
    V-trace targets: its importance weight is set to 0, which removes its temporal difference,
    cuts the trace there and zeroes its policy term.

    Args:
      agent: the learner's agent.
      unroll: Unroll with env_outputs/agent_outputs [T+1, B, ...], agent_state [B, ...]. The
        behaviour policy is the logits stored in the unroll (agent_outputs.policy_logits), for
        on-policy and replayed unrolls alike.
      config: config.Config (discounting, reward_clipping, vtrace_lambda, normalize_advantages,
        policy_clip, baseline_cost, entropy_cost, replay_trust_region).
      unroll_weights: optional float32 [B] scaling each unroll's loss terms (replay's
        importance weights).
      target_variance: optional float32 scalar, the running variance of the value targets
        (--normalize_value_loss); the value term is divided by it (value_term_divisor).

    Returns:
      (total loss; dict of its scalar parts `policy_gradient`, `baseline`, `entropy`; dict of
      statistics without gradient: the scalars of losses.value_statistics and
      losses.policy_statistics, and `priorities` [B],
      replay's priority of each unroll from its V-trace value errors).
    """
    steps = aligned_steps(agent, unroll, config)
    logits = steps.learner.policy_logits  # [T, B, A]
    behaviour_logits = steps.behaviour.policy_logits
    log_rhos = losses.log_importance_ratios(logits, behaviour_logits, steps.behaviour.action)
    kept = losses.trust_region(behaviour_logits, logits, config.replay_trust_region)
    kept_log_rhos = tf.where(kept, log_rhos, -float("inf"))  # rho = 0 outside the trust region
    vtrace_returns = vtrace.from_importance_weights(
        log_rhos=kept_log_rhos,
        discounts=steps.discounts,
        rewards=steps.rewards,
        values=steps.learner.baseline,
        bootstrap_value=steps.bootstrap_value,
        trace_lambda=config.vtrace_lambda,
    )
    value_errors = vtrace_returns.vs - steps.learner.baseline  # [T, B]
    advantages = raw_advantages(steps, vtrace_returns, config)
    stats = losses.value_statistics(steps.learner.baseline, vtrace_returns.vs, advantages)
    if config.normalize_advantages:
        advantages = losses.normalized(advantages)
    parts = {
        "policy_gradient": losses.policy_loss(
            kept_log_rhos,
            logits,
            steps.behaviour.action,
            advantages,
            config.policy_clip,
            unroll_weights,
        ),
        "baseline": losses.baseline_loss(value_errors, unroll_weights),
        "entropy": losses.entropy_loss(logits, unroll_weights),
    }
    if target_variance is not None:
        parts["baseline"] /= value_term_divisor(target_variance, config)
    total = (
        parts["policy_gradient"]
        + config.baseline_cost * parts["baseline"]
        + config.entropy_cost * parts["entropy"]
    )
    stats.update(losses.policy_statistics(logits, log_rhos, kept, config.policy_clip))
    stats["priorities"] = losses.unroll_priorities(value_errors)
    return total, parts, tf.nest.map_structure(tf.stop_gradient, stats)


def value_term_divisor(target_variance, config):
    """The value term's divisor with --normalize_value_loss or --popart: the targets' running
    variance (a float32 scalar) floored at MIN_TARGET_VARIANCE, or its square root as
    --value_loss_divisor says (PopArt's units: the variance)."""
    floored = tf.maximum(target_variance, MIN_TARGET_VARIANCE)
    return tf.sqrt(floored) if config.value_loss_divisor == "std" else floored


def follow_value_targets(agent, target_moments):
    """Moves the agent's PopArt value head (--popart) to the targets' running moments, its
    values kept as they were: std = sqrt(the floored variance), so that the head's units are
    those of the value term (value_term_divisor). Nothing without a PopArt head."""
    head = agent.popart_head
    if head is not None:
        floored = tf.maximum(target_moments.variance, MIN_TARGET_VARIANCE)
        head.preserve_outputs(target_moments.mean, tf.sqrt(floored))


def local_gradients(agent, config, unroll, unroll_weights=None, target_moments=None):
    """Gradients of the actor-critic loss on this rank's batch, not averaged (XLA-compilable).

    Args:
      agent: the agent.
      config: config.Config (see actor_critic_loss).
      unroll: Unroll of batch-major [B, T+1, ...] tensors (as dequeued).
      unroll_weights: optional float32 [B] (see actor_critic_loss).
      target_moments: optional RunningMoments of the value targets (--normalize_value_loss),
        whose variance divides the value term (value_term_divisor).

    Returns:
      (list of gradients, one per agent.trainable_variables; this rank's total loss; its parts
      and statistics, see actor_critic_loss).
    """
    with tf.GradientTape() as tape:
        total, parts, stats = actor_critic_loss(
            agent,
            unrolls.to_time_major(unroll),
            config,
            unroll_weights,
            None if target_moments is None else target_moments.variance,
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
    step = make_batch_step(agent, optimizer, config, SingleProcess, value_target_moments(config))
    return step, learning_rate


def value_target_moments(config):
    """The running moments (scalar) of the value targets whose variance divides the value term
    with --normalize_value_loss or --popart, variables created; None without either."""
    if not (config.normalize_value_loss or config.popart):
        return None
    moments = RunningMoments(name="value_target_moments")
    moments.create_variables([])
    return moments


def make_update(agent, optimizer, config, hvd, xla, target_moments=None):
    """One update on a minibatch: update(unroll [B, T+1, ...], unroll_weights float32 [B])
    -> (dict of scalars: the loss parts, `total`, `gradient_norm` (before clipping) and the
    scalar statistics of actor_critic_loss; the replay priorities [B] of the unrolls).

    With `xla` the loss-and-gradients and the clip-and-update are each compiled by XLA,
    separately: Horovod's allreduce between them has no XLA kernel on CPU. Compiled once (the
    functions are made here, not per call) for each minibatch shape. `target_moments`: see
    local_gradients.
    """
    variables = agent.trainable_variables
    gradients_of = tf.function(
        functools.partial(local_gradients, agent, config, target_moments=target_moments),
        jit_compile=xla,
    )
    apply = tf.function(
        functools.partial(apply_gradients, optimizer, config, variables), jit_compile=xla
    )

    def update(unroll, unroll_weights):
        gradients, total, parts, stats = gradients_of(unroll, unroll_weights)
        gradient_norm = apply(sum_over_ranks(hvd, gradients))
        priorities = stats.pop("priorities")
        return dict(parts, **stats, total=total, gradient_norm=gradient_norm), priorities

    return update


def make_batch_step(agent, optimizer, config, hvd, target_moments=None):
    """The learner's batch step, a tf.function of train_batch over make_update's updates:
    step(unroll, unroll_weights, order, minibatches); run it with train_in_minibatches.
    `target_moments`: see local_gradients.

    XLA as --xla says; with 'auto' a step_choice.CheaperStep of the two that keeps the one
    that costs this machine less CPU."""

    def batch_step(xla):
        return tf.function(
            functools.partial(
                train_batch, make_update(agent, optimizer, config, hvd, xla, target_moments)
            )
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

"""A known-good reference for Atari: PPO (Schulman et al. 2017) with the standard Atari settings,
in PyTorch, on this project's own environment wrapper (`environments.create_vector_environment`).

It exists to bisect a learning failure: if this learns Pong on our environments while our
learner does not, the defect is on the learner's side; if this does not learn either, it is in
the environment pipeline. Written from the PPO paper's Atari hyperparameters (Table 5) and the
usual implementation details (orthogonal initialisation, GAE, advantage normalisation, clipped
value loss, linearly annealed Adam), not copied from another code base.

Run it in its own virtualenv (PyTorch must not enter the project's), see bench/reference_setup.sh:

  bash bench/reference_setup.sh                   # /tmp/impala_reference_venv, once
  /tmp/impala_reference_venv/bin/python bench/reference_ppo.py --frames=4000000 \\
      [--level_name=PongNoFrameskip-v4] [--output=/tmp/impala_bench_learning/reference_ppo.csv]

Prints one line every ~50K frames (frames, frames/s, mean return of the last 100 games, policy
entropy as a fraction of its maximum) and writes `frames,episode_return` per finished game to
--output, the same columns `bench.learning` reads.

For `bench.lockstep` (our learner fed this reference's batches): --initial_weights starts the
network from our SimpleConvNetAgent's weights (an .npz by variable name), and --save_batches
writes each rollout (`batch_00000.npz`, ...: obs [T, N, 84, 84, 4], next_obs, action, logits,
reward, done, next_done, value) and, at the end, this network's logits on the last rollout's
observations (`final_logits.npy`, [T, N, A]).
"""

import argparse
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import environments  # noqa: E402 - the project's own wrapper is what is under test.
from bench.curves import GameLog  # noqa: E402


def orthogonal(layer, gain):
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    """uint8 frames [N, 84, 84, 4] -> policy logits [N, A] and value [N]."""

    def __init__(self, num_actions):
        super().__init__()
        relu_gain = np.sqrt(2)
        self.torso = nn.Sequential(
            orthogonal(nn.Conv2d(4, 32, 8, stride=4), relu_gain),
            nn.ReLU(),
            orthogonal(nn.Conv2d(32, 64, 4, stride=2), relu_gain),
            nn.ReLU(),
            orthogonal(nn.Conv2d(64, 64, 3, stride=1), relu_gain),
            nn.ReLU(),
            nn.Flatten(),
            orthogonal(nn.Linear(64 * 7 * 7, 512), relu_gain),
            nn.ReLU(),
        )
        self.policy = orthogonal(nn.Linear(512, num_actions), 0.01)
        self.value = orthogonal(nn.Linear(512, 1), 1.0)

    def forward(self, frames):
        features = self.torso(frames.permute(0, 3, 1, 2).float() / 255.0)
        return self.policy(features), self.value(features).squeeze(-1)

    @torch.no_grad()
    def load_project_weights(self, weights):
        """Copies our SimpleConvNetAgent's variables (name -> array, Sonnet layouts) in.

        Convs: [kh, kw, in, out] -> [out, in, kh, kw]. The linear layer reads the conv output
        flattened channels-last ([7, 7, 64]) there and channels-first ([64, 7, 7]) here, so its
        input rows are permuted. Our heads also read the last reward and one-hot last action
        after the 512 features: those rows are dropped (bench.lockstep zeroes them).
        """
        by_layer = {name.split("/", 1)[1].removesuffix(":0"): w for name, w in weights.items()}
        convs = [layer for layer in self.torso if isinstance(layer, nn.Conv2d)]
        for i, conv in enumerate(convs):
            conv.weight.copy_(torch.from_numpy(by_layer[f"conv_{i}/w"].transpose(3, 2, 0, 1)))
            conv.bias.copy_(torch.from_numpy(by_layer[f"conv_{i}/b"]))
        linear = self.torso[-2]
        channels_first = by_layer["linear/w"].reshape(7, 7, 64, -1).transpose(2, 0, 1, 3)
        linear.weight.copy_(torch.from_numpy(channels_first.reshape(3136, -1).T))
        linear.bias.copy_(torch.from_numpy(by_layer["linear/b"]))
        for head, name in ((self.policy, "policy_logits"), (self.value, "baseline")):
            head.weight.copy_(torch.from_numpy(by_layer[f"{name}/w"][: head.in_features].T))
            head.bias.copy_(torch.from_numpy(by_layer[f"{name}/b"]))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--level_name", default="PongNoFrameskip-v4")
    parser.add_argument("--frames", type=int, default=4_000_000, help="environment frames")
    parser.add_argument("--num_envs", type=int, default=8)
    parser.add_argument("--num_steps", type=int, default=128, help="agent steps per env per update")
    parser.add_argument("--learning_rate", type=float, default=2.5e-4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--clip", type=float, default=0.1)
    parser.add_argument("--entropy_cost", type=float, default=0.01)
    parser.add_argument("--value_cost", type=float, default=0.5)
    parser.add_argument("--max_grad_norm", type=float, default=0.5)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae_lambda", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--output", default="/tmp/impala_bench_learning/reference_ppo.csv")
    parser.add_argument("--initial_weights", help="our agent's weights (.npz), see bench.lockstep")
    parser.add_argument("--save_batches", help="directory for each rollout, see bench.lockstep")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    env = environments.create_vector_environment(args.level_name, args.num_envs, args.seed)
    frames_per_step = environments.action_repeat(args.level_name)
    net = NatureCNN(env.num_actions)
    if args.initial_weights:
        net.load_project_weights(dict(np.load(args.initial_weights)))
    if args.save_batches:
        os.makedirs(args.save_batches, exist_ok=True)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.learning_rate, eps=1e-5)
    n, s = args.num_envs, args.num_steps
    observations = torch.zeros((s, n, *env.observation_spec[0]), dtype=torch.uint8)
    actions = torch.zeros((s, n), dtype=torch.long)
    log_probs, rewards, dones, values = (torch.zeros((s, n)) for _ in range(4))
    all_logits = torch.zeros((s, n, env.num_actions))
    output = env.initial()
    next_observation = torch.from_numpy(output.observation)
    next_done = torch.zeros(n)
    updates = args.frames // (n * s * frames_per_step)
    frames, games = 0, GameLog(args.output)
    for update in range(updates):
        for group in optimizer.param_groups:  # linear annealing to 0
            group["lr"] = args.learning_rate * (1.0 - update / updates)
        for step in range(s):
            observations[step], dones[step] = next_observation, next_done
            with torch.no_grad():
                logits, value = net(next_observation)
            distribution = torch.distributions.Categorical(logits=logits)
            action = distribution.sample()
            actions[step], log_probs[step], values[step], all_logits[step] = (
                action,
                distribution.log_prob(action),
                value,
                logits,
            )
            output = env.step(action.numpy().astype(np.int32))
            rewards[step] = torch.from_numpy(np.sign(output.reward))
            next_observation = torch.from_numpy(output.observation)
            next_done = torch.from_numpy(output.done.astype(np.float32))
            frames += n * frames_per_step
            games.add(frames, output.info.episode_return[output.info.game_over])
        if args.save_batches:
            rollout = dict(obs=observations, next_obs=next_observation, action=actions)
            rollout.update(logits=all_logits, reward=rewards, value=values)
            rollout.update(done=dones, next_done=next_done)
            np.savez_compressed(  # Atari frames compress ~20x
                os.path.join(args.save_batches, f"batch_{update:05d}.npz"),
                **{name: tensor.numpy() for name, tensor in rollout.items()},
            )

        with torch.no_grad():  # GAE(lambda) advantages, cut where an episode ended
            _, next_value = net(next_observation)
            advantages = torch.zeros((s, n))
            last = torch.zeros(n)
            for t in reversed(range(s)):
                not_done = 1.0 - (next_done if t == s - 1 else dones[t + 1])
                following = next_value if t == s - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * following * not_done - values[t]
                last = delta + args.gamma * args.gae_lambda * not_done * last
                advantages[t] = last
            targets = advantages + values

        flat = [x.reshape(s * n, *x.shape[2:]) for x in (observations, actions, log_probs)]
        flat += [advantages.reshape(-1), targets.reshape(-1), values.reshape(-1)]
        minibatch = s * n // args.minibatches
        for _ in range(args.epochs):
            order = torch.randperm(s * n)
            for i in range(0, s * n, minibatch):
                index = order[i : i + minibatch]
                obs, act, old_log_prob, adv, target, old_value = (x[index] for x in flat)
                logits, value = net(obs)
                distribution = torch.distributions.Categorical(logits=logits)
                ratio = torch.exp(distribution.log_prob(act) - old_log_prob)
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(
                    -adv * ratio, -adv * torch.clamp(ratio, 1 - args.clip, 1 + args.clip)
                ).mean()
                clipped_value = old_value + torch.clamp(value - old_value, -args.clip, args.clip)
                value_loss = (
                    0.5 * torch.max((value - target) ** 2, (clipped_value - target) ** 2).mean()
                )
                entropy = distribution.entropy().mean()
                loss = policy_loss + args.value_cost * value_loss - args.entropy_cost * entropy
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
                optimizer.step()

        games.report(frames, f"entropy {entropy.item() / np.log(env.num_actions):.3f} of max")
    env.close()
    if args.save_batches:  # the trained policy on the last rollout's observations
        with torch.no_grad():
            final_logits, _ = net(observations.reshape(s * n, *observations.shape[2:]))
        np.save(
            os.path.join(args.save_batches, "final_logits.npy"),
            final_logits.reshape(s, n, -1).numpy(),
        )


if __name__ == "__main__":
    main()

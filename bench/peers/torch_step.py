"""PyTorch's update of our default network, as bench/peers/step.py times it beside ours: run in
the peers' virtualenv (torch is there only), one process for the whole measurement.

  .venv-peers/bin/python bench/peers/torch_step.py '<spec JSON>'

spec: {"unrolls": B, "unroll_length": T, "frame": [C, H, W], "num_actions": A, "learning_rate",
"epsilon", "gradients_clipping", "baseline_cost", "entropy_cost", "discounting"} (step.py takes
them from our configuration). Prints one JSON line once built, {"parameters", "torch",
"threads": [intra-op, inter-op]}, then for each line "<n>" read on stdin runs n updates and
prints one JSON line, `timed`'s {"updates", "cpu_secs", "wall_secs"}; ends at stdin's end.

The network is SimpleConvNetAgent layer for layer (agents/simple_conv_net.py, agents/base.py):
uint8 frames [N, C, H, W] / 255 -> conv 32/8/4, 64/4/2, 64/3/1 VALID, each with a ReLU ->
Linear 512, ReLU -> joined with the last reward clipped to [-1, 1] and the one-hot last action
-> policy logits [N, A] and baseline [N]. Frames channels first, the layout torch's convs take
(and SF stores); ours are channels last, as TF's take.

One update, on one fixed random batch: the forward pass over the B x (T+1) frames (the last
one of each unroll gives the bootstrap value, as ours), the loss, the backward pass, the
gradients clipped to their global norm, torch's Adam (our learning rate and epsilon, betas 0.9
and 0.999). The loss is not ours, only of the same kind: the log-probability of each action
taken x its one-step TD advantage + baseline_cost x half the squared TD error - entropy_cost x
the entropy, summed over the B x T steps; ours (V-trace targets, PPO's clipped surrogate on
lambda-return advantages, normalised) does a little more arithmetic per step, all of it tiny
beside the network's.

The project's tests import `serve` and `timed` (step.py times ours with the same `timed`);
torch is imported inside the functions that use it.
"""

import json
import sys
import time


def timed(update, updates):
    """Runs update() `updates` times -> {"updates", "cpu_secs" (this process's CPU time, all
    its threads), "wall_secs"}."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(updates):
        update()
    return {
        "updates": updates,
        "cpu_secs": time.process_time() - cpu,
        "wall_secs": time.perf_counter() - wall,
    }


def serve(hello, run_window, lines, out):
    """Writes `hello`, then run_window(n)'s figures for each line "<n>" of `lines`, one JSON line
    each, flushed: step.py waits for each before it times anything else."""
    print(json.dumps(hello), file=out, flush=True)
    for line in lines:
        print(json.dumps(run_window(int(line))), file=out, flush=True)


def nature_cnn(frame, num_actions):
    """SimpleConvNetAgent in torch: module(frames uint8 [N, C, H, W], reward float32 [N],
    last_action int64 [N]) -> (policy logits [N, A], baseline [N])."""
    import torch
    from torch import nn

    class NatureCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.torso = nn.Sequential(
                nn.Conv2d(frame[0], 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
                nn.Flatten(),
            )
            with torch.no_grad():  # the conv stack's output size: [1, 64 x 7 x 7] for 84x84
                flat = self.torso(torch.zeros(1, *frame)).shape[1]
            self.torso.extend([nn.Linear(flat, 512), nn.ReLU()])
            # The heads see the torso's 512 features, the clipped reward and the one-hot action.
            self.policy_logits = nn.Linear(512 + 1 + num_actions, num_actions)
            self.baseline = nn.Linear(512 + 1 + num_actions, 1)

        def forward(self, frames, reward, last_action):
            features = torch.cat(
                [
                    self.torso(frames.float() / 255.0),
                    reward.clamp(-1.0, 1.0)[:, None],
                    nn.functional.one_hot(last_action, num_actions).float(),
                ],
                dim=1,
            )
            return self.policy_logits(features), self.baseline(features).squeeze(-1)

    return NatureCNN()


def random_batch(spec, generator):
    """Random unrolls, flattened: frames uint8 [B x (T+1), C, H, W], rewards float32 and last
    actions / actions int64 [B x (T+1)], done bool [B, T+1]."""
    import torch

    steps = spec["unrolls"] * (spec["unroll_length"] + 1)
    return {
        "frames": torch.randint(0, 256, (steps, *spec["frame"]), generator=generator).byte(),
        "reward": torch.randn(steps, generator=generator),
        "last_action": torch.randint(0, spec["num_actions"], (steps,), generator=generator),
        "action": torch.randint(0, spec["num_actions"], (steps,), generator=generator),
        "done": torch.rand(spec["unrolls"], spec["unroll_length"] + 1, generator=generator) < 0.1,
    }


def loss(model, batch, spec):
    """The module docstring's loss of `batch` (random_batch's), a scalar tensor."""
    import torch

    shape = (spec["unrolls"], spec["unroll_length"] + 1)
    logits, values = model(batch["frames"], batch["reward"], batch["last_action"])
    logits, values = logits.view(*shape, -1)[:, :-1], values.view(shape)  # [B, T, A], [B, T+1]
    rewards = batch["reward"].view(shape)[:, 1:].clamp(-1.0, 1.0)
    discounts = (~batch["done"][:, 1:]).float() * spec["discounting"]
    targets = (rewards + discounts * values[:, 1:]).detach()  # [B, T]
    errors = targets - values[:, :-1]
    log_probs = torch.log_softmax(logits, dim=-1)
    taken = log_probs.gather(-1, batch["action"].view(shape)[:, 1:, None]).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return (
        -(taken * errors.detach()).sum()
        + spec["baseline_cost"] * 0.5 * (errors**2).sum()
        - spec["entropy_cost"] * entropy.sum()
    )


def main(argv):
    import torch

    # One thread each, before any op: the inter-op pool can only be sized before it starts.
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    spec = json.loads(argv[1])
    generator = torch.Generator().manual_seed(0)
    model = nature_cnn(spec["frame"], spec["num_actions"])
    optimizer = torch.optim.Adam(model.parameters(), lr=spec["learning_rate"], eps=spec["epsilon"])
    batch = random_batch(spec, generator)

    def update():
        optimizer.zero_grad()
        loss(model, batch, spec).backward()
        if spec["gradients_clipping"] > 0:  # as ours: <= 0 is no clipping
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec["gradients_clipping"])
        optimizer.step()

    hello = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
    }
    serve(hello, lambda updates: timed(update, updates), sys.stdin, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)

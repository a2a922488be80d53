"""`--part=step`: our learner's update beside PyTorch's, in CPU ms per trained sample, one thread
each, in one run.

  - ours: one update of the default configuration, as the learner trains it
    (train_step.train_in_minibatches through bench/stages.py's `learner_step`): a minibatch of
    --minibatch_unrolls (2) random unrolls of T+1 (33) steps, T (32) trained samples each, the
    clipped surrogate on V-trace targets, Adam; plain and with XLA (--xla=off and on), and plain
    with the torso in bfloat16 (--torso_dtype=bfloat16). TF's kernel and scheduling pools at one
    thread each, in this process.
  - torch: the same network and batch shape in PyTorch (bench/peers/torch_step.py, in the peers'
    virtualenv, one process of its own): forward, a loss of the same kind, backward, Adam. Its
    parameter count must equal ours, or nothing is timed. torch at one intra-op and one
    inter-op thread.
Each form first runs one window of `updates` updates that is not counted (tracing, XLA's
compilation, the caches), then `rounds` windows of `updates` updates, the three forms in turn
(speed.schedule: every second round reversed), so that a drift of the machine's load weighs on
each alike; each process's CPU time (all its threads) over a window / the samples it trained.
A form's figure is its best window: other work on a shared machine only ever slows one down.
The table gives ours / torch for each of our forms; the target is at most 1.
"""

import dataclasses
import json
import statistics
import subprocess

import numpy as np

import host_tuning
import roles
import train_step
from bench import atari_curves, stages
from bench.peers import speed, systems, torch_step

# TF's kernel (intra-op) and scheduling (inter-op) pools: one thread each, as torch's.
ONE_THREAD = (1, 1)
TORCH_STEP = systems.PEERS_DIR / "torch_step.py"
# form: (XLA, --torso_dtype)
OURS = {
    "ours-plain": (False, "float32"),
    "ours-xla": (True, "float32"),
    "ours-bf16": (False, "bfloat16"),
}
FORMS = (*OURS, "torch")


def parameter_count(variables):
    """Scalars in `variables` (tf.Variables or anything with a static shape)."""
    return sum(int(np.prod(v.shape)) for v in variables)


def torch_spec(config, observation_spec, num_actions):
    """torch_step.py's spec of one update of `config`: its batch shape (frames channels first),
    optimizer and loss settings."""
    height, width, channels = observation_spec[0]  # SimpleConvNetAgent's frames: H, W, C
    return {
        "unrolls": config.minibatch_unrolls,
        "unroll_length": config.unroll_length,
        "frame": [channels, height, width],
        "num_actions": int(num_actions),
        "learning_rate": config.learning_rate,
        "epsilon": config.epsilon,
        "gradients_clipping": config.gradients_clipping,
        "baseline_cost": config.baseline_cost,
        "entropy_cost": config.entropy_cost,
        "discounting": config.discounting,
    }


def parse_reply(line):
    """One JSON line of torch_step.py -> dict; anything else is a RuntimeError quoting it."""
    try:
        reply = json.loads(line)
    except json.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict):
        raise RuntimeError(f"torch_step.py: not a JSON object: {line.strip()!r}")
    return reply


class TorchUpdates:
    """torch_step.py's process (`argv`): `hello` (its first line), window(n) -> its figures of
    n updates. It waits on its stdin between windows: it uses no CPU while ours is timed."""

    def __init__(self, argv):
        # stderr passes through: a failure's traceback is shown as it happens.
        self._process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.hello = self._reply()

    def window(self, updates):
        self._process.stdin.write(f"{updates}\n")
        self._process.stdin.flush()
        return self._reply()

    def _reply(self):
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"torch_step.py exited with {self._process.wait()}")
        return parse_reply(line)

    def close(self):
        """Ends the process: stdin's end ends its loop."""
        self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def our_windows(config):
    """({form: window(n) -> torch_step.timed's figures of n updates} of OURS, the agent's
    parameter count, torch_spec of the update). `config`: one update per call (update_config).
    Sizes this process's TF pools: call it before any TF op."""
    host_tuning.size_thread_pools(ONE_THREAD)
    agent_of_dtype = {}
    windows = {}
    for form, (xla, torso_dtype) in OURS.items():
        if torso_dtype not in agent_of_dtype:
            agent_of_dtype[torso_dtype] = roles.build_agent(
                dataclasses.replace(config, torso_dtype=torso_dtype)
            )
        agent, observation_spec, num_actions, _ = agent_of_dtype[torso_dtype]
        # Each its own optimizer; an agent's variables are all they share (as stages.py's).
        update, samples = stages.learner_step(
            config, train_step.SingleProcess, agent, observation_spec, num_actions, xla
        )
        if samples != samples_per_update(config):
            raise RuntimeError(f"{form}: {samples} samples per call, not one update's")
        windows[form] = lambda updates, update=update: torch_step.timed(update, updates)
    spec = torch_spec(config, observation_spec, num_actions)
    return windows, parameter_count(agent.trainable_variables), spec


def update_config(config):
    """`config` whose learner batch is one update's minibatch: --minibatch_unrolls on-policy
    unrolls, no replay, so that each call of the learner step is one optimizer update."""
    return dataclasses.replace(config, batch_size=config.minibatch_unrolls, replay_size=0)


def samples_per_update(config):
    """Trained samples (agent steps) per update: unrolls x T."""
    return config.minibatch_unrolls * config.unroll_length


def measure(windows, updates, rounds):
    """One warm-up window of each of `windows` ({form: window(n)}), then `rounds` rounds of
    speed.schedule -> [{"form", "round", "updates", "cpu_secs", "wall_secs"}], each printed as
    it is measured."""
    for window in windows.values():
        window(updates)
    results = []
    for round_, form in speed.schedule(list(windows), rounds):
        results.append({"form": form, "round": round_, **windows[form](updates)})
        print(json.dumps(results[-1]), flush=True)
    return results


def summarize(results, samples):
    """{form: {"cpu_ms_per_sample" (best window), "median_cpu_ms_per_sample", "cores" (CPU /
    wall time, all windows: ~1 on one thread), "windows"}} of measure's `results`, `samples`
    trained per update."""
    summary = {}
    for form in dict.fromkeys(r["form"] for r in results):
        mine = [r for r in results if r["form"] == form]
        cpu_ms = [1e3 * r["cpu_secs"] / (r["updates"] * samples) for r in mine]
        summary[form] = {
            "cpu_ms_per_sample": min(cpu_ms),
            "median_cpu_ms_per_sample": statistics.median(cpu_ms),
            "cores": sum(r["cpu_secs"] for r in mine) / sum(r["wall_secs"] for r in mine),
            "windows": len(mine),
        }
    return summary


def ratios(summary):
    """{"plain": ours-plain / torch, "xla": ..., "bf16": ...} of the best windows' CPU ms per
    sample, for each of our forms in `summary` (the target: at most 1)."""
    torch_ms = summary["torch"]["cpu_ms_per_sample"]
    return {
        form.removeprefix("ours-"): summary[form]["cpu_ms_per_sample"] / torch_ms
        for form in OURS
        if form in summary
    }


def table(summary, ours_over_torch):
    """The printed table: a row per form, its ratio to torch's beside ours."""
    rows = [f"{'form':<12}{'CPU ms/sample':>14}{'median':>9}{'cores':>7}{'ours/torch':>12}"]
    for form, figures in summary.items():
        ratio = ours_over_torch.get(form.removeprefix("ours-")) if form in OURS else None
        rows.append(
            f"{form:<12}{figures['cpu_ms_per_sample']:>14.3f}"
            f"{figures['median_cpu_ms_per_sample']:>9.3f}{figures['cores']:>7.2f}"
            f"{'' if ratio is None else f'{ratio:.2f}':>12}"
        )
    return "\n".join(rows)


def compare(config, sf_python, updates, rounds):
    """The module docstring's measurement of `config`'s update (update_config's) -> the result
    dict; prints the machine, both parameter counts, each window, then the table."""
    windows, ours_parameters, spec = our_windows(config)
    cpu_model, native = atari_curves.cpu_model(), host_tuning.native_bfloat16()
    torch_updates = TorchUpdates([sf_python, str(TORCH_STEP), json.dumps(spec)])
    try:
        hello = torch_updates.hello
        print(f"CPU: {cpu_model}; native bfloat16: {', '.join(native) or 'none'}")
        print(f"parameters: ours {ours_parameters:,}, torch {hello['parameters']:,}")
        if hello["parameters"] != ours_parameters:
            raise RuntimeError("the torch network is not ours: its parameter count differs")
        print(f"torch {hello['torch']}, threads {hello['threads']}; batch {json.dumps(spec)}")
        results = measure(windows | {"torch": torch_updates.window}, updates, rounds)
    finally:
        torch_updates.close()
    summary = summarize(results, samples_per_update(config))
    ours_over_torch = ratios(summary)
    print(table(summary, ours_over_torch))
    return {
        "cpu_model": cpu_model,
        "native_bfloat16": native,
        "parameters": ours_parameters,
        "torch": hello["torch"],
        "batch": spec,
        "samples_per_update": samples_per_update(config),
        "updates_per_window": updates,
        "forms": summary,
        "ours_over_torch": ours_over_torch,
        "windows": results,
    }

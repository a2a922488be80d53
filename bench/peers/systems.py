"""The two systems as bench/peers starts them, each a process tree on this host, and what it reads
of a running one: its summaries (the games), its frame count over time, its processes.

  - ours: `python -m bench.learning --runs=<game's run>` (the project's own learning run, its
    settings unchanged; `throughput` adds `--replay_size=0`: each frame trained on once, as SF's
    one epoch, and `--normalize_input`, as SF's recipe normalises its input; levers of time to
    the target: `throughput_bf16` and `defaults_bf16` compute the torso in bfloat16, `replay1`
    and `replay3` use each frame 2 or 4 times instead of the defaults' 3);
  - sf: bench/peers/sf_train.py in the peers' virtualenv, SF's Atari recipe (`defaults`: CleanRL's
    PPO, sync, 8 workers x 1 env, rollout 128, 4 epochs of 4 minibatches of 256) or the same with
    THROUGHPUT's settings.

Both count environment frames (agent steps x 4) and write each game's unclipped full-game
return as `<ALE id>/episode_return` (sf_train.py's docstring for SF's side).
"""

import contextlib
import datetime
import glob
import os
import re
import signal
import sys
import time

import psutil

from bench import atari_suite, cluster
from tools import local_cluster

SYSTEMS = ("ours", "sf")
PEERS_DIR = local_cluster.REPO / "bench" / "peers"
SF_TRAIN = PEERS_DIR / "sf_train.py"
SF_EXPERIMENT = "sf"
# SF tuned for throughput: async APPO, each sample trained on once (1 epoch of 1 minibatch),
# 2 workers x 16 envs stepped as one batch each, a batch = one rollout of every env.
THROUGHPUT = (
    "--async_rl=True",
    "--num_epochs=1",
    "--num_batches_per_epoch=1",
    "--rollout=20",
    "--batch_size=640",
    "--num_workers=2",
    "--num_envs_per_worker=16",
    "--batched_sampling=True",
)
# Each system's configurations: the flags each adds to the system's own command line.
CONFIGS = {
    "ours": {
        "defaults": (),
        "throughput": ("--replay_size=0", "--normalize_input"),
        "throughput_bf16": ("--replay_size=0", "--normalize_input", "--torso_dtype=bfloat16"),
        "defaults_bf16": ("--torso_dtype=bfloat16",),
        "replay1": ("--replay_ratio=1",),
        "replay3": ("--replay_ratio=3",),
    },
    "sf": {"defaults": (), "throughput": THROUGHPUT},
}
CONFIG_NAMES = tuple(dict.fromkeys(name for system in SYSTEMS for name in CONFIGS[system]))
# "<system>-<config>", each configuration name's systems together: the report's order.
CONFIGURATIONS = tuple(
    f"{system}-{name}" for name in CONFIG_NAMES for system in SYSTEMS if name in CONFIGS[system]
)
# SF's log line every 5 s: "[2026-11-27 15:20:01,123][01234] Fps is (...). Total num frames: N."
_SF_FRAMES = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[\d+\] Fps is .*?Total num frames: (\d+)\.",
    re.MULTILINE,
)
STOP_SECS = 60  # from SIGTERM to SIGKILL: bench.learning closes its workers in between


def sf_env(game):
    """SF's env name of `game` (sf_examples.atari.atari_utils.ATARI_ENVS): atari_spaceinvaders."""
    return f"atari_{game.lower()}"


def ours_argv(game, config, output_dir, max_frames):
    """bench.learning's command line training the configuration to `max_frames` frames."""
    argv = [sys.executable, "-m", "bench.learning", f"--runs={atari_suite.run_name(game)}"]
    argv += [f"--output_dir={output_dir}", f"--total_environment_frames={max_frames}"]
    # Waiting for a quiet machine is bench.peers' business, before it starts a run; the Atari
    # suite's curve, which a game's run writes to the docs at its end, is not this run's result.
    argv += ["--load_wait_secs=0", f"--docs_dir={os.path.join(output_dir, 'docs')}"]
    return argv + list(CONFIGS["ours"][config])


def sf_argv(sf_python, game, config, train_dir, max_frames):
    """sf_train.py's command line training the configuration to `max_frames` frames (SF stops
    past them on its own; bench/peers stops it earlier)."""
    argv = [str(sf_python), str(SF_TRAIN), f"--env={sf_env(game)}"]
    argv += [f"--train_dir={train_dir}", f"--experiment={SF_EXPERIMENT}", "--device=cpu"]
    argv += [f"--train_for_env_steps={max_frames}", "--with_wandb=False"]
    # The Atari defaults already, spelled out: frames are counted from them.
    argv += ["--env_frameskip=4", "--summaries_use_frameskip=True"]
    return argv + list(CONFIGS["sf"][config])


class Run:
    """One system's training run in `run_dir`, started at once; stop() ends its whole tree."""

    def __init__(self, system, argv, run_dir):
        self.system = system
        self.run_dir = str(run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        self.process = local_cluster.Process(argv, os.path.join(self.run_dir, f"{system}.log"))
        self.started = time.time()

    def logdir(self):
        """Where its summaries are (None until it made the directory)."""
        if self.system == "sf":
            return os.path.join(self.run_dir, SF_EXPERIMENT, ".summary", "0")
        # bench.learning's run directory: mkdtemp's `<run>_XXXXXXXX`, the only one here.
        found = glob.glob(os.path.join(self.run_dir, "*_*", "logdir"))
        return found[0] if found else None

    def frame_points(self):
        """(unix time, frames) of each of its progress log lines so far."""
        if self.system == "sf":
            return sf_frame_points(_read(os.path.join(self.run_dir, SF_EXPERIMENT, "sf_log.txt")))
        logdir = self.logdir()
        learners_log = os.path.join(os.path.dirname(logdir), "learners.log") if logdir else ""
        return cluster.progress_points(_read(learners_log))

    def processes(self):
        """psutil.Process of the system's processes: ours its workers (bench.learning itself only
        waits), SF its whole tree (its main process runs the training loop's control)."""
        if self.system == "ours":
            return local_cluster.experiment_processes(self.process.popen.pid)
        return _tree(self.process.popen.pid)

    def exit_code(self):
        return self.process.popen.poll()

    def stop(self):
        """SIGTERM to its process group, then SIGKILL to whatever of its tree is left."""
        tree = _tree(self.process.popen.pid)  # before: the children outlive their parent
        self.process.signal(signal.SIGTERM)
        with contextlib.suppress(Exception):
            self.process.popen.wait(timeout=STOP_SECS)
        self.process.kill()
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def sf_frame_points(log):
    """(unix time, frames) of each `Total num frames` line of SF's log (sf_log.txt)."""
    return [
        (datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(frames))
        for stamp, frames in _SF_FRAMES.findall(log)
    ]


def start(system, config, game, run_dir, max_frames, sf_python):
    """Starts the Run of `system`'s configuration `config` on `game` in `run_dir`, to train up to
    `max_frames` frames (SF's from `sf_python`, the peers' virtualenv's interpreter)."""
    if system == "ours":
        argv = ours_argv(game, config, run_dir, max_frames)
    else:
        argv = sf_argv(sf_python, game, config, run_dir, max_frames)
    return Run(system, argv, run_dir)


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _tree(pid):
    """psutil.Process of `pid` and its descendants."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []

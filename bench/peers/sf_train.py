"""Sample Factory 2.1.1 on an Atari game, as bench/peers runs it: in the peers' own virtualenv.

  .venv-peers/bin/python bench/peers/sf_train.py --env=atari_pong --train_dir=DIR ... [SF flags]

SF's own Atari example (sf_examples.atari.train_atari: its env factory and Atari defaults), with
two additions:
  - its env factory first registers the ALE's classic ids (PongNoFrameskip-v4) with gymnasium
    (register_ale_ids), in every process that makes an env: SF's rollout workers are processes
    of their own, and SF's Atari example never imports ale_py.
  - one scalar per finished game, `<ALE id>/episode_return` (bench.learning's tag, so that
    tools/curves.py reads SF's summaries as ours), at SF's frame count of the moment. SF itself
    writes only means: `policy_stats/avg_RecordEpisodeStatistics_reward`, the mean over the last
    --stats_avg (100) games of the return that gymnasium's RecordEpisodeStatistics, the wrapper
    next to the emulator, counted: whole games (below the episodic-life wrapper, so a game is
    all its lives) and unclipped (below the reward clipping). `reward/reward` is the clipped
    return per life, what SF trains on. The per-game scalar is that RecordEpisodeStatistics
    return. Frames: SF's env_steps, agent steps x --env_frameskip (4) with
    --summaries_use_frameskip (the Atari default): environment frames, as this project counts.

Runs only in the peers' virtualenv (sample_factory, torch): the project's tests import the
functions without SF's imports, which are inside main().
"""

import sys

import numpy as np

GAME_TAG = "{level}/episode_return"
# The gymnasium RecordEpisodeStatistics return SF puts in each episodic report (per life: only
# the report of a game's last life has it).
GAME_RETURN = "RecordEpisodeStatistics_reward"


def register_ale_ids():
    """Registers the ALE's v0/v4 ids (PongNoFrameskip-v4, ...) with gymnasium in this process:
    SF's Atari factory makes its env by id, and gymnasium 0.29 alone does not know them. The
    pinned ale-py 0.9.0 registers them as it is imported (checked with these pins); an ale-py
    that does not (the snag seen with other releases) gets them registered explicitly."""
    import ale_py.registration
    import gymnasium

    if "PongNoFrameskip-v4" not in gymnasium.registry:
        ale_py.registration.register_v0_v4_envs()


def make_env(full_env_name, cfg, env_config, render_mode=None):
    """SF's Atari env factory, after registering the ALE ids in this process."""
    from sf_examples.atari.atari_utils import make_atari_env

    register_ale_ids()
    return make_atari_env(full_env_name, cfg, env_config, render_mode=render_mode)


def game_recorder(level_name, episodic_key):
    """SF's episodic-stats handler (runner, msg, policy_id) that writes each finished game's
    return to the policy's summaries as GAME_TAG, at the policy's env_steps (frames)."""
    tag = GAME_TAG.format(level=level_name)

    def record(runner, msg, policy_id):
        # A scalar (non-batched sampling: one env's report) or an array (batched: the games of
        # a whole vector of envs that ended on one step).
        returns = np.ravel(msg[episodic_key].get(GAME_RETURN, []))
        frames = runner.env_steps.get(policy_id, 0)
        for game_return in returns:
            runner.writers[policy_id].add_scalar(tag, float(game_return), frames)

    return record


def main():
    from sample_factory.algo.utils.misc import EPISODIC, ExperimentStatus
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner
    from sf_examples.atari.atari_utils import ATARI_ENVS, atari_env_by_name
    from sf_examples.atari.train_atari import parse_atari_args

    for spec in ATARI_ENVS:
        register_env(spec.name, make_env)
    cfg, runner = make_runner(parse_atari_args())
    level_name = atari_env_by_name(cfg.env).env_id
    runner.register_episodic_stats_handler(game_recorder(level_name, EPISODIC))
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    return status


if __name__ == "__main__":
    sys.exit(main())

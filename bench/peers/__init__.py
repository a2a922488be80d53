"""Time to a target score (Pong +18) beside Sample Factory 2.1.1, the fastest single-machine peer.

  bash bench/peers/setup_sf.sh              # SF's own virtualenv, .venv-peers (once)
  .venv/bin/python -m bench.peers --part=frames --system=sf --config=throughput
  .venv/bin/python -m bench.peers --part=speed
  .venv/bin/python -m bench.peers --part=report

Four configurations (systems.py): each system with its defaults and tuned for throughput.
  - frames (frames.py): one configuration trained until the mean of its last 100 games reaches
    --target or to --max_frames (15M); its curve, bench.learning's CSV, to
    docs/peers/<system>-<config>-<Game>.csv, to be committed.
  - speed (speed.py): frames/s of every configuration in alternating windows of one sitting
    (5 min each, the first 60 s skipped, two rounds), with CPU-seconds per 1M frames and peak
    PSS, to docs/peers/speed-<Game>.json, to be committed.
  - report (report.py): from those files alone, frames to the target, frames/s and hours to
    the target per configuration, ours / SF, and docs/peers/<Game>.png.

SF runs in its own virtualenv (bench/peers/setup_sf.sh; its pins exclude the project's numpy and
gymnasium) through bench/peers/sf_train.py; this package runs in the project's.
"""

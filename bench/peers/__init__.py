"""Time to a target score (Pong +18) beside Sample Factory 2.1.1, the fastest single-machine peer;
and our learner's update beside PyTorch's.

  bash bench/peers/setup_sf.sh              # SF's own virtualenv, .venv-peers (once)
  .venv/bin/python -m bench.peers --part=frames --system=sf --config=throughput
  .venv/bin/python -m bench.peers --part=speed
  .venv/bin/python -m bench.peers --part=report
  .venv/bin/python -m bench.peers --part=step

Configurations (systems.py): each system with its defaults and tuned for throughput; ours also
with the torso in bfloat16 (throughput_bf16, defaults_bf16) and with fewer or more uses of each
frame (replay1, replay3), levers of its time to the target.
  - frames (frames.py): one configuration trained until the mean of its last 100 games reaches
    --target or to --max_frames (15M); its curve, bench.learning's CSV, to
    docs/peers/<system>-<config>-<Game>.csv (a later run's: <Game>-run<N>.csv), to be
    committed.
  - speed (speed.py): frames/s of every configuration in alternating windows of one sitting
    (5 min each, the first 60 s skipped, two rounds), with CPU-seconds per 1M frames and peak
    PSS, to docs/peers/speed-<Game>-<machine>.json (the CPU's kind: intel-xeon, amd-epyc), to
    be committed.
  - report (report.py): from those files alone, per kind of machine: frames to the target (the
    mean of the configuration's runs), frames/s and hours to the target per configuration,
    ours / SF, ours' hours over SF's faster configuration's, and
    docs/peers/<Game>-<machine>.png.
  - step (step.py, torch_step.py): CPU ms per trained sample of one update of the default
    configuration (2 unrolls x 32 steps), ours plain and with XLA against PyTorch's forward,
    backward and Adam step of the same network, one thread each, in alternating windows of one
    run; ours / torch (the target: at most 1). Printed only.

SF runs in its own virtualenv (bench/peers/setup_sf.sh; its pins exclude the project's numpy and
gymnasium) through bench/peers/sf_train.py, and so does torch_step.py (torch is there only); this
package runs in the project's.
"""

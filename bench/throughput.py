"""Throughput of the whole system against the limit this machine allows.

  .venv/bin/python -m bench.throughput [--quick] [training flags] [--actors=2 --learners=1]

(from the repository root). Every training flag (the fields of config.Config) is accepted and
forwarded to the workers; defaults: Config's (Pong, SimpleConvNetAgent, B=2 + 2 replayed
unrolls of T=32, 8 environments per actor). A full run takes ~40 minutes on 2 cores, --quick
~17-22 (the stages are timed twice, and again in each paired round).

First each stage alone in this process (bench/stages.py): the project's own stages (env,
inference, learner) and the raw ones no implementation choice can move (env_raw,
inference_best, learner_best); the learner's are per agent step trained on. A configuration
that trains on each agent step `uses` = (B + replayed) / B times has
  limit = cores / (CPU ms per agent step of env_raw + inference_best + uses x learner_best);
the own stages give the same bound (`CPU ceiling`) and their one-after-another rate
(`ceiling`); the gap between an own stage and its raw one is what there is to cut.
`learner ceiling` = the trained steps/s of a row's learners alone on this host / uses (one
learner: learner_fastest, its step with the machine to itself; several: bench.learner_ranks,
their ranks under mpirun): no system trains faster than its learners alone, so `learner
ceiling / limit` is the most of the limit any system of these learners reaches here.
`packing bound` (stages.packing_bound) adds the actors: the most agent steps/s with every core
busy, the actors at their own stages' CPU and the learner at learner_best's CPU up to its rate,
at learner_fastest's (alternating the two) beyond it: the most of the limit any system of these
actors and learners reaches here, however well it shares the cores.
Then the real system (experiment.py learners and actors as processes on loopback, several
learners under one mpirun) runs for a window after a warm-up; its rate is read from the
learner's `frames N` log lines (absl timestamps) at the start and end of the window: frames
consumed by the learners over all ranks. The default row (--learners, --actors) runs twice:
as configured and with --replay_size=--replay_row_size (0: without replay)
--replay_ratio=--replay_row_ratio, each with its learner steps/s, the learner's peak RSS
(which holds the replay memory) and its own bounds (the learner stage's CPU per trained step
is the configured batch's).
The stages are timed again after the system (the machine's speed drifts by up to ~20 % within
minutes) and each keeps the cheaper of its two measurements.
Printed: the stages, the rows with `achieved / limit`, and, last, one JSON line.
"""

import host_tuning

if __name__ == "__main__":
    # The stages are timed on the workers' allocator (host_tuning.py): re-executes at once.
    host_tuning.use_allocator(reexecute=True)

import dataclasses
import json
import os
import tempfile
import time

import horovod.tensorflow as hvd
import numpy as np
from absl import app, flags

import config as config_lib
import replay
from bench import cluster, learner_ranks
from bench import stages as stages_lib
from roles import build_agent
from tools import local_cluster, summary_reader

flags.DEFINE_integer("actors", 2, "Actors (over all learners) of the default configuration.")
flags.DEFINE_integer("learners", 1, "Learners of the default configuration.")
flags.DEFINE_list("table_actors", ["1", "2", "4"], "Actor counts of the full table.")
flags.DEFINE_list("table_learners", ["1", "2"], "Learner counts of the full table.")
flags.DEFINE_integer(
    "replay_row_size", 0, "The default row runs again with this --replay_size (0: no replay)."
)
flags.DEFINE_float("replay_row_ratio", 1.0, "... and this --replay_ratio.")
flags.DEFINE_bool("quick", False, "Short run: fewer repeats, shorter windows, default row only.")
flags.DEFINE_bool(
    "smoke",
    False,
    "The whole path at once: --quick's rows with one repeat and the shortest windows, to check "
    "that the benchmark runs (its figures mean little).",
)

flags.DEFINE_integer(
    "rounds",
    None,
    "Paired rounds per row (default: 8, quick: 6, smoke: 2): limit stages, system window.",
)
FLAGS = flags.FLAGS

# (seconds per stage window, stage repeats, system warm-up seconds, system window seconds,
#  paired rounds, seconds of a paired round's system window)
FULL = (5.0, 5, 30, 60, 8, 16)
QUICK = (2.0, 3, 15, 20, 6, 12)
SMOKE = (0.5, 1, 4, 6, 2, 6)
LOG_SECS = 2  # The learner's log interval: the resolution of the system window.
# After a paired round's stages, the resumed system runs this long before its window opens.
SETTLE_SECS = 3
STARTUP_TIMEOUT_SECS = 600


def paired_rounds(workers, limit_stages, uses, frames_per_step, rounds, window_secs):
    """`rounds` rounds, each: the system paused while the limit's stages are timed (one window
    each), then the system alone for `window_secs` -> [dict per round: the stages' CPU ms per
    agent step, the round's limit, the system's agent steps/s and its ratio to that limit].

    The machine's speed drifts by up to ~40 % within a minute here (the learner's step alone,
    bench/README.md), so a ratio of a system window to stages timed minutes away moves with
    it; a round's stages and its system window are seconds apart."""
    results = []
    for _ in range(rounds):
        workers.pause()
        try:
            stage_ms = limit_stages.time(window_secs / 4)
        finally:
            workers.resume()
        time.sleep(SETTLE_SECS)
        start = time.time()
        time.sleep(window_secs)
        frames_per_second = cluster.rate_between(workers.learner_log(), start, time.time())
        workers.check_running()
        if frames_per_second is None:
            raise RuntimeError(f"fewer than two progress lines in a {window_secs} s window")
        cpu_ms = stage_ms["env_raw"] + stage_ms["inference_best"] + uses * stage_ms["learner_best"]
        limit = 1e3 * os.cpu_count() / cpu_ms
        steps_per_second = frames_per_second / frames_per_step
        results.append(
            dict(
                stage_ms,
                limit=limit,
                agent_steps_per_s=steps_per_second,
                over_limit=steps_per_second / limit,
            )
        )
    return results


def measure_system(
    config,
    num_learners,
    num_actors,
    frames_per_step,
    warmup_secs,
    window_secs,
    run_dir,
    paired=None,
):
    """Runs the real system; its agent steps/s over the window, CPU use, peak RSS and PSS (the
    largest learner's and actor's, and the total of all workers); then, with `paired` =
    (LimitStages, uses, rounds, window seconds), its `paired_rounds`."""
    load_average = cluster.wait_for_quiet_machine()
    logdir = os.path.join(run_dir, "logdir")
    flag_args = cluster.worker_flags(
        config,
        logdir=logdir,
        total_environment_frames=10**12,
        log_secs=LOG_SECS,
    )
    with local_cluster.WorkerSets(num_learners, num_actors, flag_args, run_dir) as workers:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECS
        while len(cluster.progress_points(workers.learner_log())) < 2:  # the first step is tracing
            workers.check_running()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no learner progress after {STARTUP_TIMEOUT_SECS} s")
            time.sleep(1)
        time.sleep(warmup_secs)
        learners, actors = workers.learner_processes(), workers.actor_processes()
        cpu_before = [stages_lib.cpu_seconds(group) for group in (learners, actors, None)]
        start = time.time()
        time.sleep(window_secs)
        end = time.time()
        cpu_after = [stages_lib.cpu_seconds(group) for group in (learners, actors, None)]
        learner_rss = max(cluster.peak_rss_mb(p) for p in learners)
        actor_rss = max(cluster.peak_rss_mb(p) for p in actors)
        # PSS splits shared pages (TF's libraries, mapped by every worker) among the processes
        # that map them, so the workers' figures add up to what they cost the machine.
        learner_pss, actor_pss = ([cluster.pss_mb(p) for p in g] for g in (learners, actors))
        # From the last progress line before the window to the last one in it (or, should a
        # learner step take longer than the window, to the first one after it).
        while not (
            later := [p for p in cluster.progress_points(workers.learner_log()) if p[0] > start]
        ):
            workers.check_running()
            if time.time() > start + STARTUP_TIMEOUT_SECS:
                raise RuntimeError(f"no learner progress in {STARTUP_TIMEOUT_SECS} s: {run_dir}")
            time.sleep(1)
        points = cluster.progress_points(workers.learner_log())
        rounds = []
        if paired is not None:
            limit_stages, uses, num_rounds, round_secs = paired
            rounds = paired_rounds(
                workers, limit_stages, uses, frames_per_step, num_rounds, round_secs
            )
    first = [p for p in points if p[0] <= start][-1]
    last = [p for p in later if p[0] <= end][-1] if later[0][0] <= end else later[0]
    (t0, frames0), (t1, frames1) = first, last
    # Rank 0's queue size at each of its progress lines in the window (its summaries' steps are
    # the lines' frames).
    queue_sizes = [
        size
        for step, size in summary_reader.scalars(logdir, "queue_size")
        if frames0 <= step <= frames1
    ]
    frames_per_second = (frames1 - frames0) / (t1 - t0)
    cores = [
        (after - before) / (end - start)
        for before, after in zip(cpu_before, cpu_after, strict=True)
    ]
    agent_steps_per_second = frames_per_second / frames_per_step
    return {
        "learners": num_learners,
        "actors": num_actors,
        "replay_size": config.replay_size,
        "replay_ratio": config.replay_ratio if config.replay_size else 0.0,
        "load_average": load_average,
        "agent_steps_per_s": agent_steps_per_second,
        # Every learner step consumes B on-policy unrolls of T steps on each rank.
        "learner_steps_per_s": agent_steps_per_second
        / (config.batch_size * config.unroll_length * num_learners),
        "frames_per_s": frames_per_second,
        "mean_queue": float(np.mean(queue_sizes)),
        # CPU cores busy over the window: the learners, the actors, and anything else.
        "learner_cores": cores[0],
        "actor_cores": cores[1],
        "other_cores": cores[2] - cores[0] - cores[1],
        "learner_peak_rss_mb": learner_rss,
        "actor_peak_rss_mb": actor_rss,
        "learner_pss_mb": max(learner_pss),
        "actor_pss_mb": max(actor_pss),
        "total_pss_mb": sum(learner_pss) + sum(actor_pss),
        "paired_rounds": rounds,
        "paired_over_limit": float(np.median([r["over_limit"] for r in rounds]))
        if rounds
        else None,
    }


def mode():
    """'smoke', 'quick' or 'full': how long the benchmark measures."""
    return "smoke" if FLAGS.smoke else "quick" if FLAGS.quick else "full"


def table_rows():
    rows = [(FLAGS.learners, FLAGS.actors)]
    if mode() == "full":
        for learners in map(int, FLAGS.table_learners):
            for actors in map(int, FLAGS.table_actors):
                if actors >= learners and (learners, actors) not in rows:
                    rows.append((learners, actors))
    return rows


def print_stage(name, stage):
    chosen = ", ".join(
        f"{key} {stage[key]}"
        for key in ("batch", "xla", "threads", "scheduling_threads", "note")
        if key in stage
    )
    print(
        f"  {name:<16}{stage['rate']:>9.0f}{stage['cpu_ms']:>13.3f}{stage['other_cores']:>13.2f}"
        + (f"   ({chosen})" if chosen else "")
    )


def print_paired_rounds(results):
    """Each row's paired rounds, then the median of their ratios."""
    for r in results:
        if not r["paired_rounds"]:
            continue
        replay_column = f"{r['replay_size']}x{r['replay_ratio']:g}" if r["replay_size"] else "off"
        print(
            f"\npaired rounds, {r['learners']} learner(s), {r['actors']} actors, replay "
            f"{replay_column}: the limit's stages timed with the system paused, then the "
            "system's window\n"
            f"  {'round':>5}{'env_raw':>9}{'inference_best':>16}{'learner_best':>14}"
            f"{'limit':>7}{'steps/s':>9}{'/limit':>8}"
        )
        for index, round_ in enumerate(r["paired_rounds"]):
            print(
                f"  {index:>5}{round_['env_raw']:>9.3f}{round_['inference_best']:>16.3f}"
                f"{round_['learner_best']:>14.3f}{round_['limit']:>7.0f}"
                f"{round_['agent_steps_per_s']:>9.0f}{round_['over_limit']:>8.2f}"
            )
        print(f"  median /limit {r['paired_over_limit']:.2f}")


def main(argv):
    del argv
    hvd.init()  # one rank: the learner's train step runs without mpirun
    local_cluster.exit_cleanly_on_termination()
    config = config_lib.from_flags(FLAGS)
    stage_secs, repeats, warmup_secs, window_secs, rounds, round_secs = {
        "full": FULL,
        "quick": QUICK,
        "smoke": SMOKE,
    }[mode()]
    rounds = FLAGS.rounds if FLAGS.rounds is not None else rounds
    work_dir = tempfile.mkdtemp(prefix="impala_bench_throughput_")  # kept: the workers' logs
    print(f"logs and summaries in {work_dir}", flush=True)
    agent, observation_spec, num_actions, frames_per_step = build_agent(config)
    # The stages' learner step is one of the default row's learners.
    stage_config = stages_lib.one_of_learners(config, FLAGS.learners)

    def measure_stages():
        load_average = cluster.wait_for_quiet_machine()
        stages = stages_lib.measure(
            stage_config,
            hvd,
            agent,
            observation_spec,
            num_actions,
            stage_secs,
            repeats,
            # The system's learners share this host with their actors.
            learner_pools=host_tuning.thread_pools(
                config, "learner", FLAGS.learners, actors_on_host=True
            ),
        )
        return dict(stages, load_average=load_average)

    stages_before = measure_stages()
    learner_counts = sorted({learners for learners, _ in table_rows() if learners > 1})

    def learners_alone(when):
        """{count: bench.learner_ranks' figures of `count` learners alone} (several learners'
        learner ceiling), their logs in work_dir."""
        figures = {}
        for count in learner_counts:
            load_average = cluster.wait_for_quiet_machine()
            log_path = os.path.join(work_dir, f"learner_ranks_{count}_{when}.log")
            figures[count] = dict(
                learner_ranks.measure(config, count, log_path, repeats), load_average=load_average
            )
        return figures

    ranks_before = learners_alone("before")
    replay_row_config = dataclasses.replace(
        config, replay_size=FLAGS.replay_row_size, replay_ratio=FLAGS.replay_row_ratio
    )
    rows = [(config, *row) for row in table_rows()]
    rows.insert(1, (replay_row_config, FLAGS.learners, FLAGS.actors))  # beside the default row
    # The limit's stages as chosen above, timed again beside each window of the default row and
    # its twin (the paired rounds).
    limit_stages = stages_lib.LimitStages(
        stage_config, hvd, agent, observation_spec, num_actions, stages_before
    )
    try:
        results = [
            measure_system(
                row_config,
                learners,
                actors,
                frames_per_step,
                warmup_secs,
                window_secs,
                os.path.join(
                    work_dir, f"system_{learners}l_{actors}a_replay{row_config.replay_size}"
                ),
                paired=(
                    limit_stages,
                    replay.uses_per_agent_step(row_config),
                    rounds,
                    round_secs,
                )
                if index < 2 and rounds
                else None,
            )
            for index, (row_config, learners, actors) in enumerate(rows)
        ]
    finally:
        limit_stages.close()
    # This machine's speed drifts by up to ~20 % within minutes (bench/README.md): the stages
    # are timed again after the system and each keeps the better of its two measurements, so
    # the limit is the fastest the machine was seen to run them around the system's windows.
    stages_after = measure_stages()
    stages = stages_lib.better_of(stages_before, stages_after)
    ranks_after = learners_alone("after")
    ranks = {
        count: max(ranks_before[count], ranks_after[count], key=lambda r: r["rate"])
        for count in learner_counts
    }
    for row, (row_config, learners, _) in zip(results, rows, strict=True):
        row["uses_per_agent_step"] = replay.uses_per_agent_step(row_config)
        if learners > 1:  # their ranks' rate together, at one rank's cheapest CPU per step
            learner_forms = [(ranks[learners]["rate"], stages["learner_best"]["cpu_ms"])]
        else:
            learner_forms = [
                (stages[form]["rate"], stages[form]["cpu_ms"])
                for form in ("learner_best", "learner_fastest")
            ]
        row_bounds = stages_lib.bounds(stages, row["uses_per_agent_step"], learner_forms)
        # The most of the limit a system of these learners (and of these actors) can reach on
        # this machine.
        for bound in ("learner_ceiling", "packing_bound"):
            row[f"{bound}_over_limit"] = row_bounds[bound] / row_bounds["limit"]
        for bound, steps_per_s in row_bounds.items():
            row[bound] = steps_per_s
            row[f"achieved_over_{bound}"] = row["agent_steps_per_s"] / steps_per_s

    print(
        f"{FLAGS.level_name}, {FLAGS.agent_name}, T={FLAGS.unroll_length}, B={FLAGS.batch_size}, "
        f"{FLAGS.num_envs_per_actor} envs per actor, {os.cpu_count()} cores "
        f"({mode()} mode)"
    )
    print(
        f"\nstages alone, the better of before and after the system (1-min load "
        f"{stages_before['load_average']}, {stages_after['load_average']}):"
    )
    print(f"  {'stage':<16}{'steps/s':>9}{'CPU ms/step':>13}{'other cores':>13}")
    for name in (
        *("env", "inference", "learner", "env_raw", "inference_best", "learner_best"),
        "learner_fastest",
    ):
        print_stage(name, stages[name])
    for count, alone in ranks.items():
        print(
            f"  {count} learners alone (bench.learner_ranks, each {alone['threads']} kernel "
            f"thread(s)): {alone['rate']:.0f} trained steps/s (xla {alone['xla']})"
        )
    print(
        "  (learner: agent steps trained on, B + replayed unrolls per step)\n"
        "  per row, with `uses` = (B + replayed) / B trainings of each agent step:\n"
        "    limit       = cores / (env_raw + inference_best + uses x learner_best)\n"
        "    CPU ceiling = cores / (env + inference + uses x learner)\n"
        "    ceiling     = 1 / (1/env + 1/inference + uses/learner)\n"
        "    learner ceiling = trained steps/s of the row's learners alone / uses "
        "(learner_fastest for one)\n"
        "    packing bound = the most agent steps/s with every core busy: actors at env + "
        "inference,\n"
        "      the learner at learner_best's CPU up to its rate and at learner_fastest's beyond "
        "(several: their ranks')"
    )
    print(
        f"\n{'learners':>8}{'actors':>7}{'replay':>12}{'uses':>5}{'load':>6}{'steps/s':>9}"
        f"{'frames/s':>10}{'learner steps/s':>16}{'limit':>7}{'/limit':>7}{'/ceiling':>9}"
        f"{'/CPU ceiling':>13}{'learner ceiling /limit':>23}{'packing bound /limit':>21}"
        f"{'queue':>7}{'learner cores':>14}{'actor cores':>12}"
        f"{'other cores':>12}{'learner peak RSS':>17}{'actor peak RSS':>15}"
        f"{'learner PSS':>12}{'actor PSS':>10}{'total PSS':>10}"
    )
    for r in results:
        replay_column = f"{r['replay_size']}x{r['replay_ratio']:g}" if r["replay_size"] else "off"
        print(
            f"{r['learners']:>8}{r['actors']:>7}{replay_column:>12}"
            f"{r['uses_per_agent_step']:>5.1f}{r['load_average']:>6.2f}"
            f"{r['agent_steps_per_s']:>9.0f}{r['frames_per_s']:>10.0f}"
            f"{r['learner_steps_per_s']:>16.2f}{r['limit']:>7.0f}"
            f"{r['achieved_over_limit']:>7.2f}{r['achieved_over_ceiling']:>9.2f}"
            f"{r['achieved_over_cpu_ceiling']:>13.2f}"
            f"{r['learner_ceiling_over_limit']:>23.2f}{r['packing_bound_over_limit']:>21.2f}"
            f"{r['mean_queue']:>7.1f}"
            f"{r['learner_cores']:>14.2f}{r['actor_cores']:>12.2f}{r['other_cores']:>12.2f}"
            f"{r['learner_peak_rss_mb']:>15.0f}MB{r['actor_peak_rss_mb']:>13.0f}MB"
            f"{r['learner_pss_mb']:>10.0f}MB{r['actor_pss_mb']:>8.0f}MB{r['total_pss_mb']:>8.0f}MB"
        )
    print_paired_rounds(results)
    config = {
        "level_name": FLAGS.level_name,
        "agent_name": FLAGS.agent_name,
        "unroll_length": FLAGS.unroll_length,
        "batch_size": FLAGS.batch_size,
        "num_envs_per_actor": FLAGS.num_envs_per_actor,
        "cores": os.cpu_count(),
        "mode": mode(),
    }
    print(
        json.dumps(
            {
                "config": config,
                "stages": stages,
                "stages_before": stages_before,
                "stages_after": stages_after,
                "learners_alone": {"before": ranks_before, "after": ranks_after, "best": ranks},
                "system": results,
            }
        )
    )


if __name__ == "__main__":
    app.run(main)

"""`--part=speed`: the systems side by side in frames/s, in alternating windows of one sitting.

Each window starts one configuration afresh (systems.start), skips its first `skip_secs` (start
up, the first traces, SF's decorrelation) and measures it to the window's end, then stops it:
  - steady frames/s: the frames between its first and last progress line in the measured span
    over the time between them (ours: rank 0's progress lines, every 2 s; SF: its log's `Total
    num frames`, every 5 s);
  - CPU-seconds per 1M frames: the user + system CPU its processes used over the span (a process
    that started within it counts from its start) per frame measured, x 1M;
  - peak PSS: the most the system's processes held together (psutil, proportional set size:
    shared pages split among the processes mapping them), sampled every `sample_secs`.
Each configuration has `rounds` windows; the second round runs the configurations in reverse
order (A B C D, D C B A), so that a drift of the machine's speed over the sitting weighs on each
alike. A configuration's figures are the mean of its windows (peak PSS: the highest). The
result is filed under the machine's kind (machine()): each kind of machine has its own. A run of
some configurations keeps the earlier windows of the others (merged()), each window with the
commit it ran.
"""

import contextlib
import glob
import json
import os
import re
import time

import numpy as np
import psutil

from bench import cluster


def schedule(configurations, rounds):
    """[(round, configuration)] of the windows: each round the configurations in order, every
    second round reversed."""
    return [
        (r, configuration)
        for r in range(rounds)
        for configuration in (configurations if r % 2 == 0 else configurations[::-1])
    ]


def cpu_seconds(processes):
    """{psutil.Process: user + system CPU seconds so far} of the live ones of `processes`."""
    used = {}
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            used[process] = times.user + times.system
    return used


def cpu_used(before, after):
    """CPU seconds used between two cpu_seconds(): a process gone by `after` is not counted, one
    new in `after` counts whole (it started in between)."""
    return sum(seconds - before.get(process, 0.0) for process, seconds in after.items())


def total_pss_mb(processes):
    """PSS of the live ones of `processes` together, in MiB."""
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += cluster.pss_mb(process)
    return total


def measure(run, skip_secs, window_secs, sample_secs):
    """The figures of one window of the Run (started at run.started): module docstring."""
    begin, end = run.started + skip_secs, run.started + window_secs
    _sleep_until(begin)
    cpu_before, peak_pss = cpu_seconds(run.processes()), 0.0
    while time.time() < end and run.exit_code() is None:
        peak_pss = max(peak_pss, total_pss_mb(run.processes()))
        _sleep_until(min(end, time.time() + sample_secs))
    cores = cpu_used(cpu_before, cpu_seconds(run.processes())) / (time.time() - begin)
    fps = cluster.rate_of(run.frame_points(), begin, end)
    return {
        "frames_per_second": fps,
        "cpu_secs_per_1m_frames": cores / fps * 1e6 if fps else None,
        "peak_pss_mb": round(peak_pss),
        "exit_code": run.exit_code(),  # None: it ran the whole window
    }


def _sleep_until(when):
    time.sleep(max(0.0, when - time.time()))


def summarize(windows):
    """{configuration: figures} of the windows' results ([{"configuration", ...figures}]): mean
    frames/s and CPU-seconds per 1M frames over its windows, its highest peak PSS; None where a
    window measured nothing."""
    by_configuration = {}
    for window in windows:
        by_configuration.setdefault(window["configuration"], []).append(window)
    return {name: _figures(of) for name, of in by_configuration.items()}


def _figures(windows):
    def mean(key):
        values = [w[key] for w in windows]
        return None if None in values else float(np.mean(values))

    return {
        "frames_per_second": mean("frames_per_second"),
        "cpu_secs_per_1m_frames": mean("cpu_secs_per_1m_frames"),
        "peak_pss_mb": max(w["peak_pss_mb"] for w in windows),
        "windows": len(windows),
    }


def machine(cpu_model):
    """The machine kind a speed result is filed under, from its CPU's model name: "Intel(R)
    Xeon(R) Processor" -> "intel-xeon". Frames/s is a property of the machine, so each kind
    keeps its own result."""
    words = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b", " ", cpu_model, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-") or "unknown"


def result_path(peers_dir, game, machine_kind):
    """The committed speed result of `game` on `machine_kind`: speed-<Game>-<kind>.json."""
    return os.path.join(peers_dir, f"speed-{game}-{machine_kind}.json")


def machines(peers_dir, game):
    """The machine kinds that have a committed speed result of `game`, sorted."""
    paths = glob.glob(result_path(glob.escape(str(peers_dir)), game, "*"))
    prefix, suffix = len(f"speed-{game}-"), len(".json")
    return sorted(os.path.basename(path)[prefix:-suffix] for path in paths)


def merged(earlier, windows, game):
    """The result of `windows` and of those of `earlier` (a result, or None) whose configuration
    none of `windows` measured: {"game", "windows", "configurations": summarize()}."""
    measured = {window["configuration"] for window in windows}
    kept = [w for w in (earlier or {}).get("windows", []) if w["configuration"] not in measured]
    return {"game": game, "windows": kept + windows, "configurations": summarize(kept + windows)}


def write_result(path, result):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def read_result(path):
    """The speed result written by write_result(), or None if there is none."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)

"""The docs agree with the code: every command-line flag a doc names is defined by an entry point
of this repo (or belongs to a third-party tool the docs show, THIRD_PARTY_FLAGS), and every
repository path it names exists.

Flags are read from the sources, not by importing the entry points (which would import
TensorFlow): `flags.DEFINE_*("name"` in any Python file, config.Config's fields (every one a flag
of experiment.py, the frontend and the benchmarks) and the shell scripts' own options
(scripts/main.sh's `--stop`). A boolean flag's absl form `--noNAME` counts as NAME.
"""

import ast
import functools
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent

# docs/history.md is left out on purpose: a dated record, it names flags and files as they were
# on the day of each sitting (`--minibatches`, `bench/corun.py`, ...).
DOCS = sorted(
    {
        REPO / "README.md",
        REPO / "bench" / "README.md",
        REPO / "sandbox" / "README.md",
        REPO / "docker" / "README.md",
        *(REPO / "docs").glob("*.md"),
    }
    - {REPO / "docs" / "history.md"}
)

# Flags of other programs that the docs show in commands, by program; each one named by a doc
# (test_every_third_party_flag_is_named_by_a_doc keeps the list from outliving its use).
THIRD_PARTY_FLAGS = {
    "absl, every entry point's parser": {"helpfull"},
    "mpirun": {"allow-run-as-root", "oversubscribe", "bind-to", "debug-daemons"},
    "docker and podman": {
        *("rm", "name", "init", "network", "shm-size", "cap-add", "gpus"),
        *("build-arg", "isolation", "external"),
    },
    "debootstrap": {"variant"},
    "Sample Factory 2.1.1 (bench/peers/sf_train.py)": {
        *("env_frameskip", "stats_avg", "summaries_use_frameskip", "train_for_seconds"),
        "normalize_input",
    },
    "sbatch and srun": {
        *("ntasks", "cpus-per-task", "gpus-per-task", "partition", "time", "job-name"),
        *("mem-per-cpu", "het-group", "exact", "mpi", "multi-prog", "export"),
    },
}

# Files the docs name as what a command writes: absent until someone runs it.
WRITTEN_BY_COMMANDS = {
    "docs/atari_results.csv",  # bench.learning --runs=atari --results_csv=...
    "docs/atari_suite.png",  # bench.learning --runs=atari --grid_png=...
    "docs/replay_results.csv",  # bench.replay
}

FLAG = re.compile(r"(?<![\w/-])--([a-zA-Z][\w-]*)")
# A path inside one of the repo's folders (bench/foo.py, docs/x.md, scripts/setup.sh), or a
# top-level Python file; not part of a longer or absolute path (/tmp/impala/videos).
FOLDERS = "agents|bench|docker|docs|frontend|sandbox|scripts|tests|tools"
PATH = re.compile(rf"(?<![\w./<-])((?:{FOLDERS})/[\w./-]*[\w]|[a-z_]+\.py)\b(?![</])")
DEFINE = re.compile(r"flags\.DEFINE_\w+\(\s*\"(\w+)\"")
SHELL_OPTION = re.compile(r"=\s*\"--([\w-]+)\"|^\s*--([\w-]+)\)", re.MULTILINE)


def config_fields():
    """The names of config.Config's fields, from config.py's syntax tree."""
    tree = ast.parse((REPO / "config.py").read_text())
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config")
    return {n.target.id for n in config.body if isinstance(n, ast.AnnAssign)}


def sources(extension):
    """This repo's files ending in .`extension`, outside hidden folders (.venv, .git)."""
    folders = [p for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return [*REPO.glob(f"*.{extension}"), *(p for f in folders for p in f.rglob(f"*.{extension}"))]


@functools.cache
def defined_flags():
    """Every flag of this repo's entry points and of the third-party tools above."""
    names = config_fields()
    for path in sources("py"):
        names |= set(DEFINE.findall(path.read_text()))
    for path in sources("sh"):
        names |= {a or b for a, b in SHELL_OPTION.findall(path.read_text())}
    return names | set().union(*THIRD_PARTY_FLAGS.values())


def problems(text, flags):
    """What `text` (a doc) names that does not exist: unknown flags and missing paths."""
    found = []
    for name in sorted(set(FLAG.findall(text))):
        if name not in flags and not (name.startswith("no") and name[2:] in flags):
            found.append(f"flag --{name}")
    for path in sorted(set(PATH.findall(text)) - WRITTEN_BY_COMMANDS):
        if not (REPO / path).exists():
            found.append(f"path {path}")
    return found


def test_the_checker_finds_a_made_up_flag_and_a_made_up_path():
    flags = defined_flags()
    doc = (
        "Run `python experiment.py --level_name=Pong --nonormalize_advantages --made_up_flag=1`\n"
        "and read `bench/README.md`, `bench/made_up.py`, `made_up_module.py`, /tmp/impala/x.py."
    )
    assert problems(doc, flags) == [
        "flag --made_up_flag",
        "path bench/made_up.py",
        "path made_up_module.py",
    ]


def test_flags_come_from_definitions_config_fields_and_shell_scripts():
    assert "workers_csv_path" in defined_flags()  # the frontend's DEFINE_string
    assert "eval_video_every" in defined_flags()  # a config.Config field
    assert {"stop", "made_up_option"} <= {
        a or b for a, b in SHELL_OPTION.findall('if [ "$arg" = "--stop" ]\n  --made_up_option)')
    }


def test_every_third_party_flag_is_named_by_a_doc():
    named = set().union(*(FLAG.findall(doc.read_text()) for doc in DOCS))
    assert set().union(*THIRD_PARTY_FLAGS.values()) <= named


def test_every_flag_and_path_the_docs_name_exists():
    flags = defined_flags()
    found = {str(doc.relative_to(REPO)): problems(doc.read_text(), flags) for doc in DOCS}
    assert not any(found.values()), {doc: names for doc, names in found.items() if names}

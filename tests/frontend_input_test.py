"""The frontend given bad input: one clear error naming the file, row and field; no secret shown;
nothing started, not even tmux.

Each case runs run_experiment_mm_raw.py as a subprocess, as users run it. The last one starts a
real run against an sshd (in a network namespace, tests/netns_sshd.py) that offers no SFTP.
"""

import gzip
import os
import pathlib
import shutil

import libtmux
import pytest

from exit_codes import EXIT_BAD_INPUT
from tests import netns_sshd
from tests.frontend_runs import frontend, local_csv, write_csv
from tools.local_cluster import free_ports

REPO = pathlib.Path(__file__).resolve().parent.parent
FRONTEND = str(REPO / "run_experiment_mm_raw.py")
HEADER = "job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password"
KEY_HEADER = HEADER + ",ssh_key_path"
REMOTE = "203.0.113.9"  # TEST-NET-3: never this host; a dry run never connects to it.
HEAD, TAIL = "Secret-first-half", "second-half-of-it"  # One password, cut by an unquoted comma.


def learner_row():
    """A learner on this host, by a name its remote actors could reach."""
    return f"learner,{os.uname().nodename},{free_ports(1)[0]},,,,"


def dry_run(tmp_path, path, env=None):
    return frontend(f"--workers_csv_path={path}", f"--logdir={tmp_path}", "--dry_run", env=env)


@pytest.mark.parametrize(
    "header, actor_row, env, error",
    [
        (
            HEADER,
            f"actor,{REMOTE},9001,,22,bob,{HEAD},{TAIL}",
            {},
            "row 2, field 'ssh_password': 8 values for 7 columns: more fields than the header "
            "(an unquoted comma in a password?)",
        ),
        (
            KEY_HEADER,
            f"actor,{REMOTE},9001,,22,bob,{HEAD},{TAIL}",
            {},
            "row 2, field 'ssh_key_path': no such file (the path is not shown",
        ),
        (
            HEADER,
            f"actor,{REMOTE},9001,,22,bob,0",
            {},
            "row 2, field 'ssh_password': the password from the CSV is shorter than 8 characters",
        ),
        (
            HEADER,
            f"actor,{REMOTE},9001,,22,bob,env:IMPT_SHORT",
            {"IMPT_SHORT": "0"},
            "row 2, field 'ssh_password': the password from $IMPT_SHORT is shorter than 8",
        ),
        (
            HEADER,
            f"actor,{REMOTE},9001,,22,bob, {HEAD}",
            {},
            "row 2, field 'ssh_password': starts or ends with a space",
        ),
        (
            HEADER,
            f'actor,{REMOTE},9001,,22,bob,"{HEAD}\nactor,localhost,9002,,,,\nactor,localhost,9003,,,,',
            {},
            "row 2, field 'ssh_password': runs over lines 3-5: a double quote opened in it is "
            "never closed",
        ),
        (
            HEADER,
            "actor,::1,9001,,,,",
            {},
            "row 2, field 'ip': '::1': IPv6 is not supported; use an IPv4 address or a host name",
        ),
        (HEADER, "actor,[::1],9001,,,,", {}, "row 2, field 'ip': '[::1]': IPv6 is not supported"),
        (
            HEADER,
            f"actor,2001:db8::10,9001,,22,bob,{HEAD}",
            {},
            "row 2, field 'ip': '2001:db8::10': IPv6 is not supported",
        ),
    ],
    ids=[
        "comma: more fields",
        "comma: end in the key path",
        "short password",
        "short env: password",
        "space-padded password",
        "quote never closed",
        "IPv6 ::1",
        "IPv6 [::1]",
        "IPv6 remote",
    ],
)
def test_a_bad_row_is_one_error_and_no_plan(tmp_path, header, actor_row, env, error):
    path = tmp_path / "workers.csv"
    path.write_text(f"{header}\n{learner_row()}\n{actor_row}\n")
    code, out, err = dry_run(tmp_path, path, env)
    assert code == 2, out + err
    assert out == ""  # Not even a plan.
    assert f"{path}:3: {error}" in err, err
    assert "Traceback" not in err
    for fragment in (HEAD, TAIL):
        assert fragment not in out + err


def test_a_binary_file_is_one_error_naming_it(tmp_path):
    path = tmp_path / "workers.csv"
    path.write_bytes(
        gzip.compress(f"{HEADER}\n{learner_row()}\nactor,localhost,9001,,,,\n".encode())
    )
    code, out, err = dry_run(tmp_path, path)
    assert (code, out) == (2, "")
    assert err == (
        f"{path}: not a text file: the workers CSV must be UTF-8 text, not a binary or "
        "compressed file\n"
    )


def test_passwords_other_users_can_read_are_warned_of_once(open_dir):
    path = open_dir / "workers.csv"
    path.write_text(f"{HEADER}\n{learner_row()}\nactor,{REMOTE},9001,,22,bob,{HEAD}\n")
    path.chmod(0o644)
    code, out, err = dry_run(open_dir, path)
    assert code == 0, out + err
    warning = (
        f"WARNING: {path} holds SSH passwords and other users can read it (mode 0644): "
        f"chmod 600 {path}, or give the passwords as env:VARNAME"
    )
    assert err.count(warning) == 1, err
    assert HEAD not in out + err
    path.chmod(0o600)
    code, out, err = dry_run(open_dir, path)
    assert code == 0, out + err
    assert "WARNING" not in err


# A CSV or flags the run cannot start with: exit 2, no plan, no tmux server, no launch dir.


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([("learner", "localhost", 1), ("worker", "localhost", 2)], "3: row 2, field 'job'"),
        ([("learner", "localhost", 1), ("actor", "127.0.0.1", 1)], "3: row 2, field 'tf_port'"),
        ([("learner", "localhost", 1)], "2: row 1, field 'job'"),  # A learner with no actor.
        (
            [("learner", "localhost", 1), ("actor", "203.0.113.9", 2, "", 22, "bob")],
            "3: row 2, field 'ssh_password'",
        ),
    ],
)
def test_invalid_csv_is_reported_and_starts_nothing(tmp_path, tmux_socket, rows, expected):
    path = write_csv(tmp_path / "workers.csv", rows)
    code, out, err = frontend(
        f"--workers_csv_path={path}", f"--logdir={tmp_path}", f"--tmux_socket_name={tmux_socket}"
    )
    assert code == 2
    assert f"{path}:{expected}" in err
    assert out == ""  # Not even a plan.
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert not (tmp_path / "launch").exists()


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--max_restarts=-1", "flag --max_restarts=-1: -1 is not a non-negative integer"),
        ("--no_such_flag=1", "Unknown command line flag 'no_such_flag'"),
        ("--dry_run extra", "unexpected arguments ['extra'] (flags are --name=value)"),
    ],
)
def test_a_bad_flag_exits_with_the_status_of_bad_input_in_one_line(tmp_path, flag, message):
    """As the workers' (exit_codes.parse_flags): not absl's exit 1, the status of a crash."""
    code, out, err = frontend(f"--logdir={tmp_path}", *flag.split())
    assert (code, out) == (EXIT_BAD_INPUT, ""), out + err
    assert err.startswith("run_experiment_mm_raw.py: error: ") and message in err, err


def test_a_level_that_cannot_be_made_here_is_refused_naming_the_flag(tmp_path):
    path, _ = local_csv(tmp_path)
    for dry_run_flag in ("--dry_run", "--nodry_run"):
        code, out, err = frontend(
            f"--workers_csv_path={path}",
            f"--logdir={tmp_path}",
            "--level_name=NoSuchGame-v9",
            dry_run_flag,
        )
        assert (code, out) == (2, ""), out + err  # Not even a plan.
        assert err.startswith("--level_name: Unknown level_name 'NoSuchGame-v9'. "), err
        assert not (tmp_path / "launch").exists()


def test_an_update_that_does_not_split_over_the_learners_starts_nothing(tmp_path, tmux_socket):
    path, _ = local_csv(tmp_path)  # 2 learners
    code, out, err = frontend(
        f"--workers_csv_path={path}",
        f"--logdir={tmp_path}",
        f"--tmux_socket_name={tmux_socket}",
        "--minibatch_unrolls=3",
    )
    assert code == 2
    assert f"{path}: --minibatch_unrolls=3 does not split evenly over 2 learners" in err
    assert out == ""
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert not (tmp_path / "launch").exists()


# A remote host whose sshd has no SFTP subsystem: the launcher cannot upload a worker's script.


@pytest.fixture(scope="module")
def host_without_sftp():
    yield from netns_sshd.hosts_for_a_fixture(1, sftp=False)


@pytest.mark.slow
def test_a_host_without_sftp_is_named_with_what_it_lacks(tmp_path, host_without_sftp, tmux_socket):
    hosts = host_without_sftp
    (host,) = hosts.hosts
    learner_port, actor_port = free_ports(2)
    path = tmp_path / "workers.csv"
    path.write_text(
        f"{KEY_HEADER}\nlearner,{host.host_ip},{learner_port},,,,,\n"
        f"actor,{host.ip},{actor_port},,{host.ssh_port},root,,{hosts.user_key}\n"
    )
    repo = tmp_path / "repo"  # Never run: the actor fails before it starts.
    repo.mkdir()
    shutil.copy(REPO / "tests" / "fake_worker.py", repo / "experiment.py")
    code, out, err = frontend(
        f"--workers_csv_path={path}",
        f"--logdir={tmp_path / 'logdir'}",
        f"--tmux_socket_name={tmux_socket}",
        f"--known_hosts={hosts.write_known_hosts(tmp_path / 'known_hosts')}",
        f"--repo_dir={repo}",
        "--startup_check_secs=0",
    )
    assert code == 1, out + err
    assert (
        f"  actor-0-0 (row 2, root@{host.ip} ssh port {host.ssh_port}, auth: key "
        f"{hosts.user_key}, tf port {actor_port}): its sshd offers no SFTP subsystem, needed to "
        "upload the worker script" in out
    ), out + err
    assert "Channel closed" not in out + err
    assert not (tmp_path / "logdir" / "launch" / "run_state.json").exists()  # Stopped.

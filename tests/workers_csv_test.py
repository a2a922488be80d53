"""workers_csv: every bad row is named by file, line, row and field; grouping is round-robin."""

import gzip
import os
import pathlib
import random
import socket

import pytest

from frontend import workers_csv

HEADER = "job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password"
THIS_HOST = frozenset({"localhost", "myhost", "10.1.2.3"})  # As local_addresses() would say.
REMOTE = "203.0.113.7"  # TEST-NET-3: never this host.
EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "sandbox" / "local_workers_example.csv"


def write(tmp_path, *rows, header=HEADER):
    path = tmp_path / "workers.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return str(path)


def load(path, environ=None):
    return workers_csv.load_worker_sets(path, THIS_HOST, environ or {})


def problems(path, environ=None):
    with pytest.raises(workers_csv.CsvError) as error:
        load(path, environ)
    return str(error.value).splitlines()


def test_example_csv_groups_actors_round_robin_as_the_original():
    worker_sets = load(str(EXAMPLE))
    assert [(ws.learner.host, ws.actor_hosts) for ws in worker_sets] == [
        ("localhost:8001", "localhost:9001,localhost:9003"),
        ("localhost:8002", "localhost:9002"),
    ]
    assert all(w.is_local for ws in worker_sets for w in (ws.learner, *ws.actors))


def test_round_robin_matches_a_modulo_reference(tmp_path):
    learners = [f"learner,localhost,{8000 + i},,,," for i in range(3)]
    actors = [f"actor,localhost,{9000 + k},,,," for k in range(8)]
    # Interleave rows: grouping follows the order of actor rows, not of all rows.
    rows = [actors[0], learners[0], *actors[1:4], learners[1], learners[2], *actors[4:]]
    worker_sets = load(write(tmp_path, *rows))
    expected = {i: [9000 + k for k in range(8) if k % 3 == i] for i in range(3)}
    assert {ws.index: [a.tf_port for a in ws.actors] for ws in worker_sets} == expected
    assert [ws.learner.tf_port for ws in worker_sets] == [8000, 8001, 8002]


LEARNER = "learner,localhost,8001,,,,"
ACTOR = "actor,localhost,9001,,,,"


@pytest.mark.parametrize(
    "rows, line, row, field, text",
    [
        ([LEARNER, "worker,localhost,9001,,,,"], 3, 2, "job", "valid jobs: learner, actor"),
        ([LEARNER, "actor,localhost,,,,,"], 3, 2, "tf_port", "'' is not a port number"),
        ([LEARNER, "actor,localhost,90x1,,,,"], 3, 2, "tf_port", "'90x1' is not a port number"),
        ([LEARNER, "actor,localhost,70000,,,,"], 3, 2, "tf_port", "'70000' is not a port"),
        ([LEARNER, "actor,,9001,,,,"], 3, 2, "ip", "empty"),
        ([LEARNER, ACTOR, ACTOR], 4, 3, "tf_port", "also used by row 2 (line 3)"),
        # Every name of this host is the same host.
        ([LEARNER, ACTOR, "actor,127.0.0.1,9001,,,,"], 4, 3, "tf_port", "also used by row 2"),
        ([LEARNER, ACTOR, "actor,10.1.2.3,8001,,,,"], 4, 3, "tf_port", "also used by row 1"),
        ([LEARNER, "learner,localhost,8002,,,,", ACTOR], 3, 2, "job", "gets no actor"),
        ([ACTOR], 2, 1, "job", "has no learner"),
        ([LEARNER, f"actor,{REMOTE},9001,,22,bob,"], 3, 2, "ssh_password", "no credential"),
        ([LEARNER, f"actor,{REMOTE},9001,,,bob,pw"], 3, 2, "ssh_port", "needs its SSH port"),
        ([LEARNER, f"actor,{REMOTE},9001,,ssh,bob,pw"], 3, 2, "ssh_port", "'ssh' is not a port"),
        ([LEARNER, f"actor,{REMOTE},9001,,22,,pw"], 3, 2, "ssh_username", "needs a user"),
        ([LEARNER, f"actor,{REMOTE},9001,,22,bob,env:NO_SUCH"], 3, 2, "ssh_password", "NO_SUCH"),
        ([LEARNER, f"actor,{REMOTE},9001,,22,bob,pw,x"], 3, 2, "ssh_password", "8 values"),
        ([LEARNER, "actor,localhost,9001,0;touch x,,,"], 3, 2, "cuda_visible_devices", "0;touch"),
        ([LEARNER, "actor,localhost,9001,gpu0,,,"], 3, 2, "cuda_visible_devices", "device list"),
        ([LEARNER, 'actor,localhost,9001,"0,,1",,,'], 3, 2, "cuda_visible_devices", "0,,1"),
        ([LEARNER, 'actor,localhost,9001,"0, 1",,,'], 3, 2, "cuda_visible_devices", "0, 1"),
        # A loopback learner cannot be reached by its remote actors.
        ([LEARNER, f"actor,{REMOTE},9001,,22,bob,password"], 2, 1, "ip", "loopback"),
    ],
)
def test_each_bad_row_is_named_by_file_line_row_and_field(tmp_path, rows, line, row, field, text):
    path = write(tmp_path, *rows)
    matching = [p for p in problems(path) if p.startswith(f"{path}:{line}: row {row}, field")]
    assert any(f"field '{field}'" in p and text in p for p in matching), problems(path)


def test_every_problem_is_reported_at_once(tmp_path):
    path = write(tmp_path, LEARNER, "actor,localhost,x,,,,", "boss,localhost,9002,,,,")
    assert problems(path) == [
        f"{path}:3: row 2, field 'tf_port': 'x' is not a port number (an integer in 1..65535)",
        f"{path}:4: row 3, field 'job': 'boss' is not a job; valid jobs: learner, actor, evaluator",
    ]


def test_missing_key_file_and_bad_header(tmp_path):
    header = HEADER + ",ssh_key_path"
    path = write(tmp_path, LEARNER, f"actor,{REMOTE},9001,,22,bob,,/no/key", header=header)
    assert problems(path) == [
        f"{path}:3: row 2, field 'ssh_key_path': no such file (the path is not shown: it may be "
        "the end of a password cut at an unquoted comma)"
    ]
    path = write(tmp_path, LEARNER, header="job,ip,port")
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:1: header: missing column(s) ['tf_port', ")
    assert "unknown column(s) ['port']" in problem


def test_credentials_key_env_password_or_agent(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("not checked here")
    header = HEADER + ",ssh_key_path"
    path = write(
        tmp_path,
        f"learner,{REMOTE},8001,0,22,alice,,{key}",
        "actor,198.51.100.1,9001,,2222,bob,env:BOB_PASSWORD,",
        "actor,198.51.100.2,9001,,22,carol,,",
        "actor,198.51.100.3,9001,,22,dave,s3cret-pass,",
        header=header,
    )
    environ = {"BOB_PASSWORD": "from-env", "SSH_AUTH_SOCK": "/tmp/agent"}
    learner, *actors = [w for ws in load(path, environ) for w in (ws.learner, *ws.actors)]
    assert (learner.auth, learner.password, learner.cuda_visible_devices) == (f"key {key}", "", "0")
    assert [(a.auth, a.password, a.ssh_port) for a in actors] == [
        ("password from $BOB_PASSWORD", "from-env", 2222),
        ("ssh-agent", "", 22),
        ("password from the CSV", "s3cret-pass", 22),
    ]
    assert "s3cret" not in repr(actors[2]) and "from-env" not in repr(actors[0])
    # Without the agent, carol's row has no credential.
    del environ["SSH_AUTH_SOCK"]
    assert [p.split(": ", 1)[1] for p in problems(path, environ)] == [
        "row 3, field 'ssh_password': 198.51.100.2 is not this host and the row has no "
        "credential: give ssh_password (or env:VARNAME), ssh_key_path, or run an ssh-agent"
    ]


def test_local_rows_need_no_ssh_fields_and_own_addresses_are_local(tmp_path):
    path = write(
        tmp_path, "learner,myhost,8001,,,,", "actor,10.1.2.3,9001,,,,", "actor,127.0.0.2,9002,,,,"
    )
    assert all(w.is_local for ws in load(path) for w in (ws.learner, *ws.actors))
    # The real local_addresses() holds what `hostname` and the loopback interface say.
    assert {"localhost", socket.gethostname(), "127.0.0.1"} <= workers_csv.local_addresses()
    assert workers_csv.is_local("127.0.0.2", frozenset())  # All of 127/8 is loopback.
    assert not workers_csv.is_local(REMOTE, workers_csv.local_addresses())


def test_byte_order_mark_and_device_lists_are_accepted(tmp_path):
    """Spreadsheet programs save CSVs with a UTF-8 byte-order mark; device lists may be given."""
    path = tmp_path / "workers.csv"
    rows = [
        HEADER,
        "learner,localhost,8001,0,,,",
        'actor,localhost,9001,"0,1",,,',
        "actor,localhost,9002,,,,",
    ]
    path.write_bytes("\ufeff".encode() + "\n".join(rows).encode() + b"\n")
    (worker_set,) = load(str(path))
    assert worker_set.learner.cuda_visible_devices == "0"
    assert [a.cuda_visible_devices for a in worker_set.actors] == ["0,1", ""]


KEY_HEADER = HEADER + ",ssh_key_path"
HEAD, TAIL = "Secret-first-half", "second-half-of-it"  # One password, cut by an unquoted comma.
REORDERED = "job,ip,cuda_visible_devices,ssh_port,ssh_username,ssh_password,tf_port"


def assert_hidden(error, *fragments):
    """No fragment shows in the error's text; each is among the secrets it hands the frontend."""
    assert not any(fragment in str(error) for fragment in fragments), str(error)
    assert set(fragments) <= set(error.secrets)


@pytest.mark.parametrize(
    "header, rows, field, text",
    [
        # More values than columns: the row is refused as such, none of its values shown.
        (
            HEADER,
            [LEARNER, f"actor,{REMOTE},9001,,22,bob,{HEAD},{TAIL}"],
            "ssh_password",
            "8 values for 7 columns: more fields than the header (an unquoted comma in a "
            "password?)",
        ),
        # As many values as columns: the password's end lands in ssh_key_path.
        (
            KEY_HEADER,
            [LEARNER, f"actor,{REMOTE},9001,,22,bob,{HEAD},{TAIL}"],
            "ssh_key_path",
            "no such file (the path is not shown",
        ),
        # Columns in another order: the end lands in tf_port, whose value is then not shown.
        (
            REORDERED,
            ["learner,localhost,,,,,8001", f"actor,{REMOTE},,22,bob,{HEAD},{TAIL}"],
            "tf_port",
            "'********' is not a port number",
        ),
    ],
)
def test_a_password_cut_by_an_unquoted_comma_never_shows(tmp_path, header, rows, field, text):
    path = write(tmp_path, *rows, header=header)
    with pytest.raises(workers_csv.CsvError) as error:
        load(path)
    assert f"{path}:3: row 2, field '{field}': " in str(error.value)
    assert text in str(error.value)
    assert_hidden(error.value, HEAD, TAIL)


def test_a_quote_never_closed_is_an_error_not_rows_that_vanish(tmp_path):
    path = write(
        tmp_path,
        LEARNER,
        f'actor,{REMOTE},9001,,22,bob,"{HEAD}',
        "actor,localhost,9002,,,,",
        "actor,localhost,9003,,,,",
    )
    with pytest.raises(workers_csv.CsvError) as error:
        load(path)
    assert str(error.value) == (
        f"{path}:3: row 2, field 'ssh_password': runs over lines 3-5: a double quote opened in it "
        "is never closed, so the lines after it were read into it (a value cannot hold a line "
        "break)"
    )
    assert HEAD not in str(error.value)


@pytest.mark.parametrize(
    "password, environ, problem",
    [
        ("0", {}, "the password from the CSV is shorter than 8 characters"),
        ("seven-7", {}, "the password from the CSV is shorter than 8 characters"),
        ("env:PW", {"PW": "0"}, "the password from $PW is shorter than 8 characters"),
        (" spaced-password", {}, "starts or ends with a space"),
        ("spaced-password\t", {}, "starts or ends with a space"),
    ],
)
def test_short_or_space_padded_passwords_are_refused(tmp_path, password, environ, problem):
    path = write(tmp_path, "learner,myhost,8001,,,,", f"actor,{REMOTE},9001,,22,bob,{password}")
    (line,) = problems(path, environ)
    assert line.startswith(f"{path}:3: row 2, field 'ssh_password': {problem}")
    assert "'0'" not in line and "spaced-password" not in line


def test_passwords_are_kept_as_written(tmp_path):
    """Commas and quotes inside double quotes, and an env: password's spaces, are kept."""
    path = write(
        tmp_path,
        "learner,myhost,8001,,,,",
        f'actor,{REMOTE},9001,,22,bob,"a,b ""c"" d"',
        f"actor,{REMOTE},9002,,22,bob,env:PW",
    )
    environ = {"PW": " padded password "}
    (worker_set,) = load(path, environ)
    assert [a.password for a in worker_set.actors] == ['a,b "c" d', " padded password "]


@pytest.mark.parametrize(
    "content",
    [
        gzip.compress(HEADER.encode()),
        random.Random(0).randbytes(300),
        b"\0" * 64,
    ],
    ids=["gzip", "random bytes", "NUL bytes"],
)
def test_a_binary_file_is_one_error_naming_it(tmp_path, content):
    path = tmp_path / "workers.csv.gz"
    path.write_bytes(content)
    assert problems(str(path)) == [
        f"{path}: not a text file: the workers CSV must be UTF-8 text, not a binary or "
        "compressed file"
    ]


@pytest.mark.parametrize("ip", ["::1", "[::1]", "2001:db8::10"])
def test_ipv6_rows_are_refused(tmp_path, ip):
    path = write(tmp_path, LEARNER, f"actor,{ip},9001,,22,bob,long-enough")
    assert problems(path)[0] == (
        f"{path}:3: row 2, field 'ip': {ip!r}: IPv6 is not supported; use an IPv4 address or a "
        "host name"
    )


@pytest.mark.parametrize(
    "ip, problem",
    [
        ("[::1]", "'[::1]': IPv6 is not supported; use an IPv4 address or a host name"),
        (
            "2001:db8::10",
            "'2001:db8::10': IPv6 is not supported; use an IPv4 address or a host name",
        ),
        ("", "empty; give the host's address or name"),
    ],
)
def test_a_row_without_a_usable_host_is_one_error_not_taken_for_a_remote_one(tmp_path, ip, problem):
    """Where such a row runs is unknown: no SSH field or address clash is asked of it."""
    path = write(tmp_path, LEARNER, f"actor,{ip},9001,,,,", f"actor,{ip},9001,,,,")
    assert problems(path) == [
        f"{path}:3: row 2, field 'ip': {problem}",
        f"{path}:4: row 3, field 'ip': {problem}",
    ]


def test_passwords_other_users_can_read_are_warned_of(open_dir):
    path = write(open_dir, LEARNER, f"actor,{REMOTE},9001,,22,bob,long-enough")
    os.chmod(path, 0o644)
    workers = workers_csv.read_workers(path, THIS_HOST, {})
    assert workers_csv.exposed_passwords_warning(path, workers) == (
        f"WARNING: {path} holds SSH passwords and other users can read it (mode 0644): "
        f"chmod 600 {path}, or give the passwords as env:VARNAME"
    )
    os.chmod(path, 0o600)
    assert workers_csv.exposed_passwords_warning(path, workers) == ""
    # Readable, but in a directory only its owner may enter.
    os.chmod(path, 0o644)
    open_dir.chmod(0o700)
    assert workers_csv.exposed_passwords_warning(path, workers) == ""
    # Passwords from the environment are not in the file.
    open_dir.chmod(0o755)
    path = write(open_dir, LEARNER, f"actor,{REMOTE},9001,,22,bob,env:PW")
    os.chmod(path, 0o644)
    workers = workers_csv.read_workers(path, THIS_HOST, {"PW": "long-enough"})
    assert workers_csv.exposed_passwords_warning(path, workers) == ""

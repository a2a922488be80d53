"""The workers CSV: one row per learner, actor or evaluator, validated whole before anything starts.

The header is the original IMPALA+Horovod frontend's, plus an optional `ssh_key_path` column:

    job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password[,ssh_key_path]

Rows on this machine (`localhost`, a loopback address, this host's name or one of its interface
addresses) need no SSH fields. Every other row is remote and needs `ssh_port`, `ssh_username` and a
credential: `ssh_password` (literally, or `env:VARNAME` to read it from that environment variable),
`ssh_key_path`, or a running ssh-agent (`SSH_AUTH_SOCK`). A password in the CSV is taken as
written (surrounding spaces are refused); every password must be long enough to be masked in
output. Hosts are IPv4 addresses or names: IPv6 is refused.

Actors are grouped round-robin under learners in CSV order, exactly as the original: actor k goes
to worker set k % num_learners; so does evaluator k, at most one per worker set. Each worker set
is one distributed-TF cluster {'learner': [its learner], 'actor': [its actors], 'evaluator':
[its evaluator, if any]}; the learners of all sets average gradients.
"""

import csv
import dataclasses
import io
import ipaddress
import os
import pathlib
import socket
import stat

import psutil

from frontend import console

JOBS = ("learner", "actor", "evaluator")
COLUMNS = (
    "job",
    "ip",
    "tf_port",
    "cuda_visible_devices",
    "ssh_port",
    "ssh_username",
    "ssh_password",
)
OPTIONAL_COLUMNS = ("ssh_key_path",)
ENV_PREFIX = "env:"
MIN_PASSWORD_LENGTH = 8  # Shorter ones could not be masked in output without masking words.


class CsvError(ValueError):
    """All problems of a workers CSV, one `PATH:LINE: row N, field 'F': problem` per line.

    No message quotes a secret of the file (read_workers); still, its text has them masked, and
    `secrets` holds them for the frontend to mask in everything else it prints. Values too short
    to mask without masking words too are left out: masked, they would tell what they are.
    """

    def __init__(self, problems, secrets=()):
        self.secrets = tuple(s for s in secrets if len(s.strip()) >= MIN_PASSWORD_LENGTH)
        super().__init__(console.mask(problems, self.secrets))


@dataclasses.dataclass(frozen=True)
class Worker:
    """One validated CSV row. `password` holds the secret itself and never shows in a repr."""

    row: int  # 1-based data row; the header is not a row.
    line: int  # Line in the file, for editors.
    job: str
    ip: str
    tf_port: int
    cuda_visible_devices: str
    is_local: bool
    ssh_port: int | None
    ssh_username: str
    ssh_key_path: str
    password_source: str  # '', 'the CSV' or '$VARNAME': where `password` came from.
    password: str = dataclasses.field(default="", repr=False)

    @property
    def host(self):
        """`ip:tf_port`, the address of this worker's tf.distribute.Server."""
        return f"{self.ip}:{self.tf_port}"

    @property
    def where(self):
        if self.is_local:
            return "this host"
        return f"{self.ssh_username}@{self.ip} ssh port {self.ssh_port}"

    @property
    def auth(self):
        """How SSH logs in, without the secret: 'password from the CSV', 'key PATH', ..."""
        if self.ssh_key_path:
            return f"key {self.ssh_key_path}"
        if self.password_source:
            return f"password from {self.password_source}"
        return "ssh-agent"


@dataclasses.dataclass(frozen=True)
class WorkerSet:
    """One learner, the actors that feed it and the evaluator that plays its policy, if any."""

    index: int
    learner: Worker
    actors: tuple[Worker, ...]
    evaluator: Worker | None = None

    @property
    def actor_hosts(self):
        return ",".join(actor.host for actor in self.actors)

    @property
    def workers(self):
        """Its learner, actors and evaluator (if any), in that order."""
        return (self.learner, *self.actors) + ((self.evaluator,) if self.evaluator else ())


def local_addresses():
    """Host names and interface addresses that mean this machine."""
    names = {"localhost", socket.gethostname()}
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                names.add(address.address.split("%")[0])  # Drop IPv6 zone ids ('fe80::1%eth0').
    return frozenset(names)


def is_local(ip, local_names):
    try:
        if ipaddress.ip_address(ip).is_loopback:
            return True
    except ValueError:
        pass  # A host name, not an address.
    return ip in local_names


def _is_loopback(ip):
    if ip == "localhost":
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def _is_host(ip):
    """Whether the ip column names a host the frontend can use: an IPv4 address or a name
    (IPv6 addresses, bare or in brackets, are refused)."""
    return bool(ip) and ":" not in ip


def _is_device_list(value):
    """Whether `value` is '' or comma-separated device indices, e.g. '0' or '0,1'."""
    return value == "" or all(index.isdigit() for index in value.split(","))


def _port(value):
    """The port number in `value`, or None when it is not one."""
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        return None
    return int(value)


def _read_records(path):
    """The CSV at `path` as (first line, last line, values) per record, the header's first.

    Raises CsvError naming the file when it cannot be read, is not UTF-8 text (a binary or
    compressed file) or is not CSV.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CsvError(f"{path}: cannot read the workers CSV: {e.strerror}") from None
    try:
        # utf-8-sig: spreadsheet programs start a saved CSV with a byte-order mark.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:  # NUL is valid UTF-8, but no text file holds it.
        raise CsvError(
            f"{path}: not a text file: the workers CSV must be UTF-8 text, not a binary or "
            "compressed file"
        )
    reader = csv.reader(io.StringIO(text, newline=""))
    records, last_line = [], 0
    try:
        for values in reader:
            records.append((last_line + 1, reader.line_num, values))
            last_line = reader.line_num
    except csv.Error as e:
        raise CsvError(f"{path}:{last_line + 1}: not valid CSV from this line on: {e}") from None
    return records


def _spans_lines(value):
    return "\n" in value or "\r" in value


def _password(written, environ):
    """(password, where it comes from, problem or '') of a remote row's ssh_password as written.

    The password in the CSV is taken as written, so surrounding spaces are refused rather than
    silently dropped or kept; one from `env:VARNAME` is used exactly as set. Either must be long
    enough to be masked in output without masking ordinary words and numbers too.
    """
    if not written.strip():
        return "", "", ""
    if written != written.strip():
        problem = (
            "starts or ends with a space, which a password in the CSV may not (a space after a "
            "comma would silently become part of it): remove the space, or give the password "
            "as env:VARNAME, which is used exactly as set"
        )
        return "", "the CSV", problem
    if written.startswith(ENV_PREFIX):
        variable = written[len(ENV_PREFIX) :]
        password, source = environ.get(variable, ""), f"${variable}"
        if not password:
            return "", source, f"environment variable {variable!r} is not set or empty"
    else:
        password, source = written, "the CSV"
    if len(password) < MIN_PASSWORD_LENGTH:
        problem = (
            f"the password from {source} is shorter than {MIN_PASSWORD_LENGTH} characters, too "
            "short to be masked safely in output: use a longer one"
        )
        return password, source, problem
    return password, source, ""


def read_workers(path, local_names=None, environ=os.environ):
    """Reads and validates every row of the CSV at `path`; raises CsvError listing all problems.

    Returns the workers in CSV order. `local_names` (default: `local_addresses()`) decides which
    rows run on this machine; `environ` supplies `env:VARNAME` passwords and `SSH_AUTH_SOCK`.
    No message shows a value from the ssh_password column on, nor a password.
    """
    local_names = local_addresses() if local_names is None else local_names
    records = _read_records(path)
    header = _checked_header(path, records)
    rows = [record for record in records[1:] if any(v.strip() for v in record[2])]
    if not rows:
        raise CsvError(f"{path}: no worker rows after the header")
    secrets = _secret_values(header, rows)
    errors, workers = [], []
    first_row_of_address = {}
    for row_number, (line, last_line, values) in enumerate(rows, start=1):
        row = _Row(path, row_number, line, errors)
        if not _fits_header(row, header, values, last_line):
            continue
        values = _named_values(header, values)
        worker = _worker(row, values, local_names, environ, first_row_of_address)
        secrets.append(worker.password)
        workers.append(worker)
    if errors:
        raise CsvError("\n".join(errors), secrets)
    return workers


def _checked_header(path, records):
    """The header's column names, stripped; raises CsvError unless it has every column of
    COLUMNS, maybe OPTIONAL_COLUMNS, and nothing else."""
    _, header_last_line, header = records[0] if records else (1, 1, [])
    if any(map(_spans_lines, header)):
        raise CsvError(
            f"{path}:1: header: a double quote in it is never closed, so lines "
            f"1-{header_last_line} were read into it"
        )
    header = [name.strip() for name in header]
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS + OPTIONAL_COLUMNS]
    if missing or unknown:
        problems = [f"missing column(s) {missing}"] * bool(missing)
        problems += [f"unknown column(s) {unknown}"] * bool(unknown)
        raise CsvError(
            f"{path}:1: header: {'; '.join(problems)}; the header must be "
            f"{','.join(COLUMNS)} with an optional ,{OPTIONAL_COLUMNS[0]}"
        )
    return header


def _secret_columns(header):
    """The columns from ssh_password on: an unquoted comma in a password shifts its end into the
    next columns, so every value there is a secret, never shown."""
    return header[header.index("ssh_password") :]


def _secret_values(header, rows):
    """Every value of the secret columns, as written and stripped, for CsvError to mask."""
    first = header.index("ssh_password")
    return [s for _, _, values in rows for v in values[first:] for s in (v, v.strip())]


@dataclasses.dataclass(frozen=True)
class _Row:
    """A data row being checked: where it is, and where its problems go."""

    path: str
    number: int
    line: int
    errors: list

    def error(self, field, problem):
        where = f"{self.path}:{self.line}: row {self.number}"
        self.errors.append(f"{where}, field '{field}': {problem}")


def _fits_header(row, header, values, last_line):
    """Whether the row's values can be read against the header: no value runs over lines (a
    quote never closed), no more values than columns (an unquoted comma)."""
    spanning = [i for i, v in enumerate(values) if _spans_lines(v)]
    if spanning:
        row.error(
            header[min(spanning[0], len(header) - 1)],
            f"runs over lines {row.line}-{last_line}: a double quote opened in it is never "
            "closed, so the lines after it were read into it (a value cannot hold a line break)",
        )
        return False
    if len(values) > len(header):
        row.error(
            header[-1],
            f"{len(values)} values for {len(header)} columns: more fields than the header (an "
            "unquoted comma in a password?); put a value that holds a comma in double quotes",
        )
        return False
    return True


@dataclasses.dataclass(frozen=True)
class _Values:
    """A row's values by column (every column, '' where missing), and as messages show them:
    never a value that may hold (the end of) a password."""

    value: dict
    shown: dict


def _named_values(header, values):
    value = dict.fromkeys(COLUMNS + OPTIONAL_COLUMNS, "")
    value.update(
        (name, v if name == "ssh_password" else v.strip())
        for name, v in zip(header, values, strict=False)
    )
    secret = set(_secret_columns(header))
    shown = {name: (v and console.MASK) if name in secret else v for name, v in value.items()}
    return _Values(value, shown)


def _worker(row, values, local_names, environ, first_row_of_address):
    """The row's Worker; each problem of its fields goes to `row`."""
    value = values.value
    tf_port = _check_common_fields(row, values)
    local = is_local(value["ip"], local_names)
    ssh_port, password, password_source = None, "", ""
    key_path = os.path.expanduser(value["ssh_key_path"]) if value["ssh_key_path"] else ""
    # A row with no usable host is refused already: whether it needs SSH is not known.
    if _is_host(value["ip"]):
        _check_address_clash(row, value["ip"], tf_port, local, first_row_of_address)
        if not local:
            ssh_port, password, password_source = _check_ssh_fields(row, values, key_path, environ)
    return Worker(
        row=row.number,
        line=row.line,
        job=value["job"],
        ip=value["ip"],
        tf_port=tf_port or 0,
        cuda_visible_devices=value["cuda_visible_devices"],
        is_local=local,
        ssh_port=ssh_port,
        ssh_username=value["ssh_username"],
        ssh_key_path=key_path,
        password_source=password_source,
        password=password,
    )


def _check_common_fields(row, values):
    """Checks what every row needs (job, ip, tf_port, cuda_visible_devices); its tf_port or
    None."""
    value, shown = values.value, values.shown
    if value["job"] not in JOBS:
        row.error("job", f"{shown['job']!r} is not a job; valid jobs: {', '.join(JOBS)}")
    if not value["ip"]:
        row.error("ip", "empty; give the host's address or name")
    elif not _is_host(value["ip"]):
        row.error(
            "ip", f"{shown['ip']!r}: IPv6 is not supported; use an IPv4 address or a host name"
        )
    tf_port = _port(value["tf_port"])
    if tf_port is None:
        row.error("tf_port", f"{shown['tf_port']!r} is not a port number (an integer in 1..65535)")
    if not _is_device_list(value["cuda_visible_devices"]):
        row.error(
            "cuda_visible_devices",
            f"{shown['cuda_visible_devices']!r} is not a device list: leave it empty (no GPU) "
            "or give comma-separated GPU indices such as 0 or 0,1",
        )
    return tf_port


def _check_ssh_fields(row, values, key_path, environ):
    """Checks what a remote row needs: its SSH port, user and a credential; returns (ssh port or
    None, password, where the password came from)."""
    value, shown = values.value, values.shown
    ssh_port = _port(value["ssh_port"])
    if ssh_port is None:
        row.error(
            "ssh_port",
            f"{shown['ssh_port']!r} is not a port number (an integer in 1..65535); "
            f"{shown['ip']} is not this host, so the row needs its SSH port (usually 22)",
        )
    if not value["ssh_username"]:
        row.error("ssh_username", f"empty; {shown['ip']} is not this host, so SSH needs a user")
    password, password_source, problem = _password(value["ssh_password"], environ)
    if problem:
        row.error("ssh_password", problem)
    if key_path and not os.path.isfile(key_path):
        row.error(
            "ssh_key_path",
            "no such file (the path is not shown: it may be the end of a password cut at an "
            "unquoted comma)",
        )
    if not (password_source or key_path or environ.get("SSH_AUTH_SOCK")):
        row.error(
            "ssh_password",
            f"{shown['ip']} is not this host and the row has no credential: give ssh_password "
            "(or env:VARNAME), ssh_key_path, or run an ssh-agent",
        )
    return ssh_port, password, password_source


def _check_address_clash(row, ip, tf_port, local, first_row_of_address):
    """A TF address used by an earlier row is an error; every name of this machine is one host:
    localhost:8001 and 127.0.0.1:8001 clash. `first_row_of_address`: (host, port) -> (row,
    line) of the first row using it, updated."""
    if tf_port is None or not ip:
        return
    address = ("this host" if local else ip, tf_port)
    if address in first_row_of_address:
        other_row, other_line = first_row_of_address[address]
        row.error("tf_port", f"{ip}:{tf_port} is also used by row {other_row} (line {other_line})")
    else:
        first_row_of_address[address] = (row.number, row.line)


def _others_can_read(path):
    """Whether users other than its owner can read the file at `path`: its group or others may
    read it, and pass through every directory above it."""
    path = pathlib.Path(path).resolve()
    directory_modes = [directory.stat().st_mode for directory in path.parents]
    mode = path.stat().st_mode
    return any(
        mode & read and all(directory_mode & search for directory_mode in directory_modes)
        for read, search in (
            (stat.S_IRGRP, stat.S_IXGRP | stat.S_IXOTH),
            (stat.S_IROTH, stat.S_IXOTH),
        )
    )


def exposed_passwords_warning(path, workers):
    """A warning if the CSV at `path` gives `workers` passwords that other users can read, else ''.

    As OpenSSH warns of a private key file that others can read.
    """
    if not any(w.password_source == "the CSV" for w in workers) or not _others_can_read(path):
        return ""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return (
        f"WARNING: {path} holds SSH passwords and other users can read it (mode {mode:04o}): "
        f"chmod 600 {path}, or give the passwords as env:VARNAME"
    )


def split_worker_sets(workers):
    """Actor k (in CSV order) joins learner k % num_learners, as in the original frontend; so does
    evaluator k (load_worker_sets refuses more evaluators than learners)."""
    learners = [w for w in workers if w.job == "learner"]
    actors = [w for w in workers if w.job == "actor"]
    evaluators = [w for w in workers if w.job == "evaluator"]
    return [
        WorkerSet(
            index=i,
            learner=learner,
            actors=tuple(actors[i :: len(learners)]),
            evaluator=evaluators[i] if i < len(evaluators) else None,
        )
        for i, learner in enumerate(learners)
    ]


def load_worker_sets(path, local_names=None, environ=os.environ):
    """Reads, validates and groups the CSV at `path`; raises CsvError listing all problems."""
    workers = read_workers(path, local_names, environ)
    passwords = [w.password for w in workers]
    learners = [w for w in workers if w.job == "learner"]
    actors = [w for w in workers if w.job == "actor"]
    evaluators = [w for w in workers if w.job == "evaluator"]
    if not learners:
        first = workers[0]
        more = f" (nor do the {len(workers) - 1} other rows)" if len(workers) > 1 else ""
        raise CsvError(
            f"{path}:{first.line}: row {first.row}, field 'job': {first.job} {first.host} has "
            f"no learner{more}: the file has no learner row",
            passwords,
        )
    errors = []
    if len(evaluators) > len(learners):
        # Evaluator k joins worker set k % num_learners: the first one too many is set 0's second.
        extra = evaluators[len(learners)]
        errors.append(
            f"{path}:{extra.line}: row {extra.row}, field 'job': a second evaluator for worker "
            f"set 0 (learner row {learners[0].row}): at most one per worker set; evaluator k "
            f"goes to worker set k % {len(learners)} and there are {len(evaluators)} evaluators"
        )
    for worker_set in split_worker_sets(workers):
        learner = worker_set.learner
        prefix = f"{path}:{learner.line}: row {learner.row}"
        if not worker_set.actors:
            errors.append(
                f"{prefix}, field 'job': learner {learner.host} gets no actor: actor k goes to "
                f"learner k % {len(learners)} and there are {len(actors)} actor(s); add actors "
                "or remove learners"
            )
        remote_rows = [w.row for w in worker_set.workers[1:] if not w.is_local]
        if remote_rows and _is_loopback(learner.ip):
            errors.append(
                f"{prefix}, field 'ip': learner {learner.host} is a loopback address, which its "
                f"remote workers (rows {remote_rows}) cannot reach; give an address of this host "
                "that they can reach"
            )
    if errors:
        raise CsvError("\n".join(errors), passwords)
    return split_worker_sets(workers)

"""The workers CSV: one row per learner or actor, validated whole before anything starts.

The header is the original IMPALA+Horovod frontend's, plus an optional `ssh_key_path` column:

    job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password[,ssh_key_path]

Rows on this machine (`localhost`, a loopback address, this host's name or one of its interface
addresses) need no SSH fields. Every other row is remote and needs `ssh_port`, `ssh_username` and a
credential: `ssh_password` (literally, or `env:VARNAME` to read it from that environment variable),
`ssh_key_path`, or a running ssh-agent (`SSH_AUTH_SOCK`).

Actors are grouped round-robin under learners in CSV order, exactly as the original: actor k goes
to worker set k % num_learners. Each worker set is one distributed-TF cluster
{'learner': [its learner], 'actor': [its actors]}; the learners of all sets average gradients.
"""

import csv
import dataclasses
import ipaddress
import os
import socket

import psutil

JOBS = ("learner", "actor")
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


class CsvError(ValueError):
    """All problems of a workers CSV, one `PATH:LINE: row N, field 'F': problem` per line."""


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
    """One learner and the actors that feed it."""

    index: int
    learner: Worker
    actors: tuple[Worker, ...]

    @property
    def actor_hosts(self):
        return ",".join(actor.host for actor in self.actors)


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


def _is_device_list(value):
    """Whether `value` is '' or comma-separated device indices, e.g. '0' or '0,1'."""
    return value == "" or all(index.isdigit() for index in value.split(","))


def _port(value):
    """The port number in `value`, or None when it is not one."""
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        return None
    return int(value)


def read_workers(path, local_names=None, environ=os.environ):
    """Reads and validates every row of the CSV at `path`; raises CsvError listing all problems.

    Returns the workers in CSV order. `local_names` (default: `local_addresses()`) decides which
    rows run on this machine; `environ` supplies `env:VARNAME` passwords and `SSH_AUTH_SOCK`.
    """
    local_names = local_addresses() if local_names is None else local_names
    try:
        # utf-8-sig: spreadsheet programs start a saved CSV with a byte-order mark.
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = [name.strip() for name in next(reader, [])]
            # (line, values) per non-blank row; reader.line_num is the row's last line.
            rows = [(reader.line_num, row) for row in reader if any(v.strip() for v in row)]
    except OSError as e:
        raise CsvError(f"{path}: cannot read the workers CSV: {e.strerror}") from None

    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS + OPTIONAL_COLUMNS]
    if missing or unknown:
        problems = [f"missing column(s) {missing}"] * bool(missing)
        problems += [f"unknown column(s) {unknown}"] * bool(unknown)
        raise CsvError(
            f"{path}:1: header: {'; '.join(problems)}; the header must be "
            f"{','.join(COLUMNS)} with an optional ,{OPTIONAL_COLUMNS[0]}"
        )
    if not rows:
        raise CsvError(f"{path}: no worker rows after the header")

    errors = []
    workers = []
    first_row_of_address = {}
    for row_number, (line, values) in enumerate(rows, start=1):

        def error(field, problem, line=line, row_number=row_number):
            errors.append(f"{path}:{line}: row {row_number}, field '{field}': {problem}")

        if len(values) > len(header):
            error(header[-1], f"{len(values)} values for {len(header)} columns")
            continue
        value = dict.fromkeys(COLUMNS + OPTIONAL_COLUMNS, "")
        value.update(zip(header, (v.strip() for v in values), strict=False))
        if value["job"] not in JOBS:
            error("job", f"{value['job']!r} is not a job; valid jobs: {', '.join(JOBS)}")
        if not value["ip"]:
            error("ip", "empty; give the host's address or name")
        tf_port = _port(value["tf_port"])
        if tf_port is None:
            error("tf_port", f"{value['tf_port']!r} is not a port number (an integer in 1..65535)")
        if not _is_device_list(value["cuda_visible_devices"]):
            error(
                "cuda_visible_devices",
                f"{value['cuda_visible_devices']!r} is not a device list: leave it empty (no GPU) "
                "or give comma-separated GPU indices such as 0 or 0,1",
            )
        local = is_local(value["ip"], local_names)
        if tf_port is not None and value["ip"]:
            # Every name of this machine is one host: localhost:8001 and 127.0.0.1:8001 clash.
            address = ("this host" if local else value["ip"], tf_port)
            if address in first_row_of_address:
                other_row, other_line = first_row_of_address[address]
                error(
                    "tf_port",
                    f"{value['ip']}:{tf_port} is also used by row {other_row} (line {other_line})",
                )
            else:
                first_row_of_address[address] = (row_number, line)

        ssh_port, password, password_source = None, "", ""
        key_path = os.path.expanduser(value["ssh_key_path"]) if value["ssh_key_path"] else ""
        if not local:
            ssh_port = _port(value["ssh_port"])
            if ssh_port is None:
                error(
                    "ssh_port",
                    f"{value['ssh_port']!r} is not a port number (an integer in 1..65535); "
                    f"{value['ip']} is not this host, so the row needs its SSH port (usually 22)",
                )
            if not value["ssh_username"]:
                error("ssh_username", f"empty; {value['ip']} is not this host, so SSH needs a user")
            if value["ssh_password"].startswith(ENV_PREFIX):
                variable = value["ssh_password"][len(ENV_PREFIX) :]
                password_source = f"${variable}"
                password = environ.get(variable, "")
                if not password:
                    error("ssh_password", f"environment variable {variable!r} is not set or empty")
            elif value["ssh_password"]:
                password, password_source = value["ssh_password"], "the CSV"
            if key_path and not os.path.isfile(key_path):
                error("ssh_key_path", f"no such file: {key_path!r}")
            if not (password_source or key_path or environ.get("SSH_AUTH_SOCK")):
                error(
                    "ssh_password",
                    f"{value['ip']} is not this host and the row has no credential: give "
                    "ssh_password (or env:VARNAME), ssh_key_path, or run an ssh-agent",
                )
        workers.append(
            Worker(
                row=row_number,
                line=line,
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
        )
    if errors:
        raise CsvError("\n".join(errors))
    return workers


def split_worker_sets(workers):
    """Actor k (in CSV order) joins learner k % num_learners, as in the original frontend."""
    learners = [w for w in workers if w.job == "learner"]
    actors = [w for w in workers if w.job == "actor"]
    return [
        WorkerSet(index=i, learner=learner, actors=tuple(actors[i :: len(learners)]))
        for i, learner in enumerate(learners)
    ]


def load_worker_sets(path, local_names=None, environ=os.environ):
    """Reads, validates and groups the CSV at `path`; raises CsvError listing all problems."""
    workers = read_workers(path, local_names, environ)
    learners = [w for w in workers if w.job == "learner"]
    actors = [w for w in workers if w.job == "actor"]
    if not learners:
        first = actors[0]
        more = f" (nor do the {len(actors) - 1} other actors)" if len(actors) > 1 else ""
        raise CsvError(
            f"{path}:{first.line}: row {first.row}, field 'job': actor {first.host} has no "
            f"learner{more}: the file has no learner row"
        )
    errors = []
    for worker_set in split_worker_sets(workers):
        learner = worker_set.learner
        prefix = f"{path}:{learner.line}: row {learner.row}"
        if not worker_set.actors:
            errors.append(
                f"{prefix}, field 'job': learner {learner.host} gets no actor: actor k goes to "
                f"learner k % {len(learners)} and there are {len(actors)} actor(s); add actors "
                "or remove learners"
            )
        remote_rows = [a.row for a in worker_set.actors if not a.is_local]
        if remote_rows and _is_loopback(learner.ip):
            errors.append(
                f"{prefix}, field 'ip': learner {learner.host} is a loopback address, which its "
                f"remote actors (rows {remote_rows}) cannot reach; give an address of this host "
                "that they can reach"
            )
    if errors:
        raise CsvError("\n".join(errors))
    return split_worker_sets(workers)

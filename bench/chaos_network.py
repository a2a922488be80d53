"""bench/chaos.py's network cut: actor-1-0 runs in a network namespace the benchmark made, so
that taking its veth link down cuts it off from its learner, and nothing else.

The frontend starts a local worker in a tmux window of this host's network, where any two local
addresses talk over `lo`. So the run's --repo_dir is a directory of the benchmark's whose
experiment.py (bench/chaos_experiment.py) runs the checkout's, entering the namespace (`ip netns
exec`, which execs: the worker keeps the PID the frontend watches) for actor-1-0 alone, and
gives worker set 1 the namespace's address of actor-1-0. Learner 1 listens on this side's veth
address, which the namespace reaches through the link and the rest of the host locally. Needs
root (network_namespaces.py).
"""

import json
import pathlib
import shutil
import uuid

from tools import local_cluster, network_namespaces


class CutLink:
    """The namespace of actor-1-0, the --repo_dir that puts it there, and the cut itself."""

    def __init__(self, run_dir):
        reason = network_namespaces.skip_reason()
        if reason:
            raise RuntimeError(f"the network cut {reason}")
        tag = uuid.uuid4().hex[:6]
        self.namespace = network_namespaces.VethNamespace(
            f"chaos-{tag}", f"chv{tag}h", f"chv{tag}n"
        )
        try:
            self.repo_dir = self._repo_dir(pathlib.Path(run_dir, "repo"))
        except BaseException:
            self.close()
            raise

    def _repo_dir(self, path):
        """The run's --repo_dir: chaos_experiment.py as experiment.py, its settings beside."""
        path.mkdir(mode=0o755)
        shutil.copy(pathlib.Path(__file__).with_name("chaos_experiment.py"), path / "experiment.py")
        settings = {
            "namespace": self.namespace.name,
            "actor_ip": self.namespace.ip,
            "experiment": local_cluster.EXPERIMENT,
        }
        (path / "chaos.json").write_text(json.dumps(settings))
        return path

    @property
    def learner_ip(self):
        """Learner 1's address: this side of the veth."""
        return self.namespace.host_ip

    def cut(self):
        self._set_link("down")

    def restore(self):
        # The namespace reaches the learner on its link's own /24: no route to put back.
        self._set_link("up")

    def _set_link(self, state):
        ns = self.namespace
        network_namespaces.run("ip", "link", "set", ns.ns_iface, state, namespace=ns.name)

    def left(self):
        """Whether the namespace is still there."""
        return self.namespace.name in network_namespaces.run("ip", "netns", "list")

    def close(self):
        self.namespace.close()

"""Tools around the trainer: `python -m tools.curves` draws what a run wrote, and the helpers
that tests and benchmarks share (local_cluster, network_namespaces, summary_reader,
random_unrolls)."""

"""The frontend: from a workers CSV to a supervised run (run_experiment_mm_raw.py is its entry).

workers_csv      reads and checks the workers CSV, groups actors under learners
launcher         the launch plan: one command per worker, tmux windows, SSH, one mpirun
ssh_connections  the SSH connections to remote hosts, opened once per host
supervisor       watches the workers and restarts the ones that exit early
run_state        what a run started, on disk, so that --stop and --resume find it
console          what the frontend prints for a person
"""

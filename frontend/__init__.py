"""The frontend: from a workers CSV (or a Slurm job's shape) to a supervised run
(run_experiment_mm_raw.py is its entry).

options          the frontend's settings, read once from its flags
run              its commands: start a run (check, plan, start, follow) or --stop it
workers_csv      reads and checks the workers CSV, groups actors under learners
launcher         the launch plan: one command per worker, tmux windows, SSH, one mpirun
plan_report      the plan and the workers that failed to start, as a person reads them
startup          starts a planned run and checks that its workers still run
ssh_connections  the SSH connections to remote hosts, opened once per host
following        --follow: the learners' log printed while the run is supervised
supervisor       watches the workers and restarts the ones that exit early
stopping         stops what a run's state file records
run_state        what a run started, on disk: --stop finds it, a second run in its logdir is refused
preflight        what both launchers refuse to start over: a recorded run, missing commands
console          what the frontend prints for a person

--launcher=slurm, the run as one Slurm batch job:
slurm            its flags, the batch script, sbatch, squeue and scancel
slurm_run        its commands: submit (checked first), --watch, --stop
slurm_job        inside the job: plans the run, starts the learners' mpirun and the srun steps,
                 restarts failed steps
slurm_hosts      inside the job: each task's host and the TF ports, from Slurm's environment
"""

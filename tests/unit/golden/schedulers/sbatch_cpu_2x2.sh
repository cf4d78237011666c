#!/bin/bash
#SBATCH --job-name=ringtrain-digits
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --chdir=/w
#SBATCH --output=%x-%j.out
#SBATCH --signal=B:USR1@120
# Rendered by `ringtrain slurm render`. ringtrain launch reads the allocation from
# SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE and starts one rank per task with
# srun --mpi=pmix; scancel stops every rank.
# SIGUSR1 120 s before the end: rank 0 commits a checkpoint at once and the job ends.
set -eo pipefail
exec /venv/bin/python -m ringtrain launch /w/digits.py

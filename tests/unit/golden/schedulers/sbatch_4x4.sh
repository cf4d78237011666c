#!/bin/bash
#SBATCH --job-name=ringtrain-train
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --partition=gpu
#SBATCH --time=2:00:00
#SBATCH --account=proj42
#SBATCH --chdir=/work/job
#SBATCH --output=%x-%j.out
#SBATCH --signal=B:USR1@120
# Rendered by `ringtrain slurm render`. ringtrain launch reads the allocation from
# SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE and starts one rank per task with
# srun --mpi=pmix; scancel stops every rank.
# SIGUSR1 120 s before the end: rank 0 commits a checkpoint at once and the job ends.
set -eo pipefail
module load cuda/12.2
exec /opt/venv/bin/python -m ringtrain launch --max-restarts 2 --checkpoint s3://bucket/run1 /work/job/train.py --epochs 10 --note 'two words'

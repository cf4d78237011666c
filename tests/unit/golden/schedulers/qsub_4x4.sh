#!/bin/bash
#PBS -N ringtrain-train
#PBS -l select=4:ncpus=32:ngpus=4:mpiprocs=4
#PBS -l place=scatter
#PBS -l walltime=2:00:00
#PBS -q gpu
#PBS -A proj42
#PBS -j oe
# Rendered by `ringtrain pbs render`. ringtrain launch reads the allocation from
# $PBS_NODEFILE (one line per MPI process) and starts the ranks with mpirun over SSH;
# qdel stops every rank.
set -eo pipefail
cd /work/job
module load cuda/12.2
exec /opt/venv/bin/python -m ringtrain launch --max-restarts 2 --checkpoint s3://bucket/run1 /work/job/train.py --epochs 10 --note 'two words'

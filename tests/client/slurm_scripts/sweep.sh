#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --gpus=1
#SBATCH --array=0-3%2
#SBATCH --output=sweep_%A_%a.out
#SBATCH --time=0:05:00

# One learning rate per task, as a Slurm array script picks it.
rates=(0.1 0.03 0.01 0.003)
echo "task $SLURM_ARRAY_TASK_ID of array $SLURM_ARRAY_JOB_ID ($JPUSHARE_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT): lr ${rates[$SLURM_ARRAY_TASK_ID]}"

#!/bin/bash
#SBATCH --job-name=msweep
#SBATCH --gpus=1
#SBATCH --array=0-2
#SBATCH --output=msweep_%A_%a.out
#SBATCH --mail-type=BEGIN,END
#SBATCH --mail-user=alice@uni.example.edu

# One mail when the sweep starts and one when all of it is over (not one per task);
# task 1 fails with exit 2.
echo "task $SLURM_ARRAY_TASK_ID"
if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then exit 2; fi

#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gpus-per-node=4
srun python train.py

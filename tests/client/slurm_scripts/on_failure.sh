#!/bin/bash
#SBATCH -J alert
#SBATCH -G 1
#SBATCH --kill-on-invalid-dep=yes
#SBATCH -o alert.out
# Runs only if the step it depends on fails (afternotok); else it is cancelled.

echo "the step failed"

#!/bin/bash
#SBATCH -J nightly
#SBATCH -G 1
#SBATCH --dependency=singleton
#SBATCH -o nightly-%j.out

echo "nightly $JPUSHARE_JOB_NAME $JPUSHARE_JOB_ID"

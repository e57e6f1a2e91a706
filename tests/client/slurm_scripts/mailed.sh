#!/bin/bash
#SBATCH --job-name=mailed
#SBATCH --gpus=1
#SBATCH --time=00:05:00
#SBATCH --output=mailed-%j.out
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=alice@uni.example.edu

# Mail me when it ends, and say so if it failed: `sbatch mailed.sh 3` fails with exit 3.
echo "ran"
exit "${1:-0}"

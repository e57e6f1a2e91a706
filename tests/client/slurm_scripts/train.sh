#!/bin/bash
#SBATCH --gpus=2
#SBATCH --time=00:01:00
#SBATCH -J mytrain
#SBATCH --account=nlp          # ignored, with a warning: the lab is the account's
#SBATCH --output=train-%j.out
#JPU --mem-per-gpu=8G

echo "training with $# args: $*"
#SBATCH --gpus=8
exit 3

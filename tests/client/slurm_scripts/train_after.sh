#!/bin/bash
#SBATCH -J train
#SBATCH -G 1
#SBATCH -o train.out
# Submitted as `jpushare submit --dependency afterok:$PRE train_after.sh`, as with sbatch.

cat data.txt
echo "trained"

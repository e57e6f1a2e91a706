#!/usr/bin/env python3
# SBATCH --gres=gpu:rtx5090:1
# SBATCH -t 30
import sys

print("evaluating", sys.argv[1:])

#!/bin/bash
#SBATCH -J preprocess
#SBATCH -G 1
#SBATCH -o preprocess.out

echo "tokenized" > data.txt

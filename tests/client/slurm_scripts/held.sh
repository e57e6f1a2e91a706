#!/bin/bash
#SBATCH -J later
#SBATCH -G 1
#SBATCH --hold
#SBATCH -o later.out

echo "released and ran"

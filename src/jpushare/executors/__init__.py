"""Executors: the only code that starts, watches and stops jobs (local processes, Slurm)."""

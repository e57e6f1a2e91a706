"""JPU-Share: a fair-share multi-GPU scheduler with reservations, in front of Slurm."""

__version__ = "0.1.0"

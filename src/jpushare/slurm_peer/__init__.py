"""Slurm's own scheduler as the peer: a TRACE.csv submitted straight to a Slurm cluster.

`jpushare slurm-peer run` submits each trace job with `sbatch --gres=gpu:…` under its lab's
Slurm account at its scaled submit time, cancels it at its scaled `cancel_time`, waits,
reads what Slurm did from `sacct` and writes jobs.csv and summary.json in the simulator's
formats (`jpushare.sim.report`), times scaled back to trace seconds. The cluster is the
peer of `FAKE_SLURM_PEER=1 scripts/slurm/start-fake-cluster.sh` (multifactor fair-share,
backfill, slurmdbd), or any Slurm named by SLURM_CONF.

`sacct` parses sacct's output, `plan` turns trace jobs into sbatch requests and Slurm's
records into the simulator's result (both pure), `driver` runs the commands, `agreement`
compares two runs' jobs.csv job by job, and `cli` is the sub-command.
"""

"""Lazy usage accounting (SPEC §4): costs in TFLOP-seconds, charged to the lab at job end.

No I/O. While a reservation is held the lab's usage does not move; the job carries the
accrued cost and its whole bill reaches the lab in the transaction that ends the job.
"""

from __future__ import annotations


def gpu_cost(num_gpus: int, seconds: float, tflops: float) -> float:
    """GPUs x seconds x tier TFLOPS, in TFLOP-seconds (negative spans count as zero)."""
    return num_gpus * max(0.0, seconds) * tflops


def reservation_accrual(gpus: int, last_accrued_at: float, now: float, tflops: float) -> float:
    """Reservation cost since the last accrual (SPEC §4: absorbed GPUs count from then)."""
    return gpu_cost(gpus, now - last_accrued_at, tflops)


def run_cost(num_gpus: int, started_at: float, ended_at: float, tflops: float) -> float:
    """Run cost of one attempt, from the moment the executor started it."""
    return gpu_cost(num_gpus, ended_at - started_at, tflops)


def job_bill(run_costs: float, reservation_costs: float) -> float:
    """What reaches the lab when a job ends: every attempt's run cost plus every reservation.

    No discount (k = 1) and no cap: SPEC §4, design note 3.4 and 3.5.
    """
    return run_costs + reservation_costs

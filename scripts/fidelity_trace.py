"""Write the small synthetic trace of the fidelity test (tests/replay/fidelity-trace.csv).

Three labs on examples/slurm-cluster.yaml's 16 GPUs, offered load about 1: jobs of 1-4
GPUs (a few may only run on 5090s), some cancelled, a few that run out of memory on
4090s. Deterministic (seeded): `.venv/bin/python scripts/fidelity_trace.py [--jobs N]
[--span S] [--seed N] > trace.csv`.
"""

from __future__ import annotations

import argparse
import random
import sys


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=120)
    p.add_argument("--span", type=float, default=900.0, help="submissions over 0..span s")
    p.add_argument("--seed", type=int, default=12)
    a = p.parse_args()
    rng = random.Random(a.seed)
    labs = ("BCG", "KDG", "NLP")
    out = sys.stdout
    out.write("job_id,submit_time,duration,num_gpus,lab,min_tier,cancel_time,oom_on,time_limit\n")
    times = sorted(round(rng.uniform(0, a.span)) for _ in range(a.jobs))
    for i, t in enumerate(times, start=1):
        gpus = rng.choices((1, 2, 3, 4), weights=(60, 22, 4, 14))[0]
        duration = round(rng.uniform(30, 150) if gpus < 4 else rng.uniform(60, 240))
        min_tier = "rtx5090" if rng.random() < 0.08 else ""
        cancel = str(t + round(rng.uniform(10, 200))) if rng.random() < 0.06 else ""
        oom = "rtx3080ti;rtx4090" if gpus == 1 and not min_tier and rng.random() < 0.05 else ""
        limit = str(60 * -(-duration // 60))
        out.write(
            f"r{i:03d},{t},{duration},{gpus},{rng.choice(labs)},{min_tier},{cancel},{oom},{limit}\n"
        )


if __name__ == "__main__":
    main()

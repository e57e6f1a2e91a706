"""`jpushare replay`: a TRACE.csv driven through a running service, and its fidelity check.

The simulator predicts what the service does; this package measures what the service
really does with the same trace, at a chosen speed, and writes the result in the
simulator's own formats (jobs.csv, summary.json: docs/formats.md), so that the two are
compared with the same code (`jpushare replay compare`).

- `plan`: the pure part: when each submission and cancel happens in real time, each
  job's command (a sleep of the scaled duration; OOM on the trace's tiers), user names.
- `records`: the service's records of the replayed jobs -> the simulator's `SimResult`,
  times and costs scaled back to trace seconds.
- `runner`: the I/O: users and tokens through the admin API, submissions, cancels, the
  wait for the last job, Ctrl-C.
- `compare`: per-job agreement of a simulated and a replayed run.
- `cli`: the `replay` command.

It talks to the service over HTTP only (the client's `Client`), so it drives a service
with either executor, on any host that can reach it.
"""

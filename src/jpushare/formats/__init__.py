"""The two input files, read by the simulator and the service alike (docs/formats.md).

`cluster_file` reads CLUSTER.yaml (tiers, placements, labs, node events), `trace_file`
reads TRACE.csv (the jobs to replay); both raise a `FormatError` (`errors`) that names the
file and line. They depend only on the policy's types, so `jpushare init --cluster` and the
store load the same cluster file as `jpushare simulate` without importing the simulator.
`arguments` adds the command-line arguments that name the two files.
"""

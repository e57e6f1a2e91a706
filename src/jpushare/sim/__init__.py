"""The trace simulator: replays a job trace on a cluster through a policy (docs/formats.md).

`cluster_file` and `trace_file` read the two input formats, `engine` is the event-driven
replay (it calls `jpushare.policy.decide` itself for the `reservation` policy), `report` and
`plots` turn a `SimResult` into files, `cli` is `jpushare simulate`.
"""

from jpushare.sim.cluster_file import ClusterSpec, NodeEvent, load_cluster, parse_cluster
from jpushare.sim.engine import Attempt, SimResult, TraceJobResult, TraceJobState, simulate
from jpushare.sim.errors import ClusterFileError, FormatError, TraceFileError
from jpushare.sim.trace_file import TraceJob, check_tiers, load_trace, parse_trace

__all__ = [
    "Attempt",
    "ClusterFileError",
    "ClusterSpec",
    "FormatError",
    "NodeEvent",
    "SimResult",
    "TraceFileError",
    "TraceJob",
    "TraceJobResult",
    "TraceJobState",
    "check_tiers",
    "load_cluster",
    "load_trace",
    "parse_cluster",
    "parse_trace",
    "simulate",
]

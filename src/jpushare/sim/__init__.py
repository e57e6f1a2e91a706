"""The trace simulator: replays a job trace on a cluster through a policy (docs/formats.md).

`jpushare.formats` reads the two input files (re-exported here), `engine` is the event-driven
replay (it calls `jpushare.policy.decide` itself for the `reservation` policy), `report` and
`plots` turn a `SimResult` into files, `cli` is `jpushare simulate`.
"""

from jpushare.formats.cluster_file import ClusterSpec, NodeEvent, load_cluster, parse_cluster
from jpushare.formats.errors import ClusterFileError, FormatError, TraceFileError
from jpushare.formats.trace_file import TraceJob, check_tiers, load_trace, parse_trace
from jpushare.sim.engine import Attempt, SimResult, TraceJobResult, TraceJobState, simulate

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

"""The store's typed errors: what a caller (the API, the CLI, the dispatcher) can catch.

Each carries what a person needs to fix the request; the API maps them to HTTP codes.
"""

from __future__ import annotations

from jpushare.policy.fit import FitReport


class StoreError(Exception):
    """Base of every error the store raises on purpose."""


class NotFound(StoreError):
    """No such lab, user, token, tier, node or job."""

    def __init__(self, kind: str, key: object) -> None:
        super().__init__(f"no {kind} {key!r}")
        self.kind = kind
        self.key = key


class AlreadyExists(StoreError):
    """A lab, user or tier with that name exists already."""

    def __init__(self, kind: str, key: object) -> None:
        super().__init__(f"{kind} {key!r} exists already")
        self.kind = kind
        self.key = key


class InvalidRequest(StoreError):
    """A value outside what the schema allows (e.g. num_gpus outside 1-8, unknown tier)."""


class NoFitPlacement(StoreError):
    """SPEC §2: no placement can ever hold the job; nothing was stored."""

    def __init__(self, report: FitReport) -> None:
        super().__init__(report.message)
        self.report = report


class InvalidTransition(StoreError):
    """The job is not in a state that allows this (e.g. cancelling a completed job)."""

    def __init__(self, job_id: int, state: str, wanted: str) -> None:
        super().__init__(f"job {job_id} is {state}: cannot {wanted}")
        self.job_id = job_id
        self.state = state
        self.wanted = wanted


class ConcurrentUpdate(StoreError):
    """A guarded update did not match although its row was locked: roll back and retry.

    It cannot happen while every writer goes through the store; it is raised rather than
    half-applying a cycle's decisions.
    """

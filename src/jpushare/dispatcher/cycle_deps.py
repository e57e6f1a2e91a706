"""What a dispatcher cycle works with: `CycleDeps`, and the memo of its inventory syncs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.lock import Fence, LeaseLost, NoLock
from jpushare.executors.base import Executor, GpuGroup
from jpushare.llm_router import BackfillRouter, NoRouter
from jpushare.policy import PlacementOrder, decide
from jpushare.policy.peers import NamedPolicy
from jpushare.store.snapshot_and_decisions import QueueMemo

InventoryFacts = tuple[tuple[str, str, int, str], ...]


@dataclass(slots=True)
class InventoryMemo:
    """What the last inventory sync wrote, so an unchanged inventory is not rewritten.

    Syncing every node each cycle costs ~2 ms per node (200 ms for 100 nodes); the
    inventory's facts (GPU counts, node states) rarely change, so a cycle syncs only when
    they differ from the last sync, or `resync_s` after it (which also brings back what an
    admin removed while the executor still reports it, and refreshes `observed_at`).
    """

    resync_s: float = 60.0
    last: InventoryFacts | None = None
    at: float = 0.0

    @staticmethod
    def facts(groups: Iterable[GpuGroup]) -> InventoryFacts:
        return tuple(sorted((g.node, g.gpu_type, g.total, g.state.value) for g in groups))

    def needs_sync(self, facts: InventoryFacts, now_s: float) -> bool:
        return facts != self.last or now_s - self.at >= self.resync_s

    def synced(self, facts: InventoryFacts, now_s: float) -> None:
        """Call once the sync's transaction has committed."""
        self.last, self.at = facts, now_s


@dataclass(frozen=True, slots=True)
class CycleDeps:
    """What a cycle works with. The executor names GPUs by tier (a Slurm executor maps its
    GRES types itself). `policy` decides each cycle
    (step 3) with `placement_order`: SPEC §3's `decide`, or a peer of `POLICIES` that a
    site runs for comparison (`JPUSHARE_POLICY`)."""

    sessions: sessionmaker[Session]
    executor: Executor
    router: BackfillRouter = field(default_factory=NoRouter)
    clock: Callable[[], datetime] = store.utc_now
    inventory_memo: InventoryMemo = field(default_factory=lambda: InventoryMemo())
    queue_memo: QueueMemo = field(default_factory=lambda: QueueMemo())  # see load_snapshot
    placement_order: PlacementOrder = PlacementOrder.PACK  # SPEC §1 (JPUSHARE_PLACEMENT)
    fence: Fence = field(default_factory=NoLock)  # the Dispatcher sets its lease here
    policy: NamedPolicy = decide  # JPUSHARE_POLICY

    def begin(self) -> AbstractContextManager[Session]:
        """A writing transaction of the cycle: it commits only while this process leads."""
        return self.fence.transaction(self.sessions)

    def check_may_act(self) -> None:
        """Before a side effect: `LeaseLost` unless this process may still act."""
        if not self.fence.may_act():
            raise LeaseLost("the dispatcher lease ran out before this call to the executor")

"""The dispatcher: every cycle observe -> snapshot -> decide -> record -> act -> confirm.

- `observe`: the pure half of step 1 (busy GPUs, run transitions, stale runs);
- `cycle`: one cycle, the numbered steps and their transactions (`run_cycle`);
- `lock`: exactly one dispatcher per database (a lease renewed each cycle, and its fence);
- `loop`: `Dispatcher.run_forever(stop)`, a cycle every `cycle_s` while holding the lease;
- `crash_points`: the `JPUSHARE_CRASH_AT` test hook.
"""

from jpushare.dispatcher.cycle import CycleDeps, CycleReport, run_cycle
from jpushare.dispatcher.lock import DispatcherLock, lock_for
from jpushare.dispatcher.loop import Dispatcher

__all__ = ["CycleDeps", "CycleReport", "Dispatcher", "DispatcherLock", "lock_for", "run_cycle"]

"""The dispatcher: every cycle observe -> snapshot -> decide -> record -> act -> confirm.

- `cycle`: one cycle, the numbered steps and their transactions (`run_cycle`), with what
  it works with in `deps` (`CycleDeps`: the executor, the policy, the fence, ...);
- `observe`: step 1, read the executor and record what it says (the runs' transitions
  through `run_transitions`); `reconcile`: its pure half (busy GPUs, transitions, stale runs);
- `launch`: steps 5-6, submit what was recorded, then confirm or fail;
- `job_ids`: the one place a job id becomes the store's row id and back;
- `lock`: exactly one dispatcher per database (a lease renewed each cycle, and its fence);
- `loop`: `Dispatcher.run_forever(stop)`, a cycle every `cycle_s` while holding the lease;
- `crash_points`: the `JPUSHARE_CRASH_AT` test hook.
"""

from jpushare.dispatcher.cycle import CycleDeps, CycleReport, run_cycle
from jpushare.dispatcher.lock import DispatcherLock, lock_for
from jpushare.dispatcher.loop import Dispatcher

__all__ = ["CycleDeps", "CycleReport", "Dispatcher", "DispatcherLock", "lock_for", "run_cycle"]

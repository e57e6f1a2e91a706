"""One transition the database refuses must not stop the dispatcher (on either database):
texts from outside are cleaned of control characters at the store boundary, and the
observe step's batch of starts and ends, then each transition it could not apply, in its
own savepoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

import jpushare.dispatcher.run_transitions as run_transitions_module
from jpushare import store
from jpushare.executors.cuda_oom import CUDA_OOM_REASON
from jpushare.store import batched_runs
from jpushare.store.batched_runs import RunEnd
from jpushare.store.transitions import clean_text
from tests.cycle_rig import MemoryRig, wait_for


def test_clean_text_replaces_nul_and_control_characters_but_newline_and_tab() -> None:
    assert clean_text("a\x00b\x1bc\r\x7f\n\td") == "a\ufffdb\ufffdc\ufffd\x7f\n\td"
    assert clean_text("plain") == "plain"


def test_an_oom_line_with_a_nul_byte_requeues_with_a_fixed_reason_and_cycles_go_on(
    rig: MemoryRig,
) -> None:
    _, blocker = rig.start_held("bob", 2, "blocker")  # takes both rtx4090 GPUs
    oom_line = "torch.OutOfMemoryError: CUDA out of memory.\x00 Tried to allocate 2 GiB"
    oom = rig.submit("alice", 1, rig.oom_once(oom_line, then="fits now"))
    rig.cycle_until(
        lambda: rig.job(oom).attempts == 1 and rig.job(oom).state == "GLOBAL_QUEUE_WAIT",
        "the OOM attempt is requeued",
    )
    assert "\x00" in rig.executor.log(str(oom), 1)  # the log really holds the NUL
    reason = rig.job(oom).reason or ""
    # The public reason is the executors' fixed sentence: nothing of the job's output line.
    assert CUDA_OOM_REASON in reason
    assert "Tried to allocate" not in reason and "\x00" not in reason
    with rig.sessions() as s:
        details = [e.detail for e in store.job_history(s, oom) if e.kind == "oom_requeued"]
    assert len(details) == 1 and "\x00" not in str(details[0])
    # Later cycles still work: the blocker ends and the job's second attempt runs.
    blocker.release()
    rig.cycle_until(rig.state_is(oom, "COMPLETED"), "the second attempt completes")
    assert rig.job(oom).attempts == 2


def test_a_failing_transition_is_skipped_and_the_others_and_dispatch_go_on(
    rig: MemoryRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = rig.submit("alice", 1, "true")
    good = rig.submit("bob", 1, "true")
    assert set(rig.cycle().dispatched.started) == {bad, good}
    wait_for(  # no cycle meanwhile: their ends are recorded by the patched one below
        lambda: all(
            (run := rig.executor.find(str(j), 1)) is not None and run.state.ended
            for j in (bad, good)
        ),
        "both runs end",
    )
    waiting_hold = rig.hold("waiting")
    waiting = rig.submit("alice", 1, waiting_hold.command)

    real_end_job = store.end_job

    def end_job(session: Session, job_id: int, *args: Any, **kwargs: Any) -> Any:
        if job_id == bad:  # writes, then fails: its savepoint must undo the write
            session.execute(text("UPDATE jobs SET reason = 'half' WHERE id = :id"), {"id": bad})
            session.execute(text("SELECT * FROM no_such_table"))
        return real_end_job(session, job_id, *args, **kwargs)

    real_end_jobs = batched_runs.end_jobs

    def end_jobs(session: Session, ends: Sequence[RunEnd]) -> set[int]:
        # The batch fails too (after writing): it must leave nothing, and the cycle fall
        # back to ending the runs one by one, where only `bad`'s fails.
        if any(e.job_id == bad for e in ends):
            session.execute(text("UPDATE jobs SET reason = 'half' WHERE id = :id"), {"id": bad})
            session.execute(text("SELECT * FROM no_such_table"))
        return real_end_jobs(session, ends)

    monkeypatch.setattr(store, "end_job", end_job)
    monkeypatch.setattr(run_transitions_module, "end_jobs", end_jobs)
    report = rig.cycle()
    assert report.observed is not None
    assert rig.job(good).state == "COMPLETED"
    assert rig.job(bad).state in ("DISPATCHED", "RUNNING")
    assert rig.job(bad).reason != "half"
    assert waiting in report.dispatched.started
    monkeypatch.setattr(store, "end_job", real_end_job)
    monkeypatch.setattr(run_transitions_module, "end_jobs", real_end_jobs)
    rig.cycle_until(rig.state_is(bad, "COMPLETED"), "the skipped end is recorded next cycle")
    waiting_hold.release()

"""Event ids that become visible out of order hold the cursor back, for a while only."""

from __future__ import annotations

from jpushare.notify.gaps import GapWatch


def test_contiguous_ids_are_all_ready() -> None:
    assert GapWatch(10).ready(4, [5, 6, 7], now=0.0) == 3


def test_a_missing_id_holds_back_what_follows_until_it_commits() -> None:
    gaps = GapWatch(10)
    assert gaps.ready(4, [6, 7], now=0.0) == 0  # 5 is not visible yet
    assert gaps.ready(4, [6, 7], now=9.0) == 0
    assert gaps.ready(4, [5, 6, 7], now=9.5) == 3  # 5 committed: nothing was passed over


def test_a_missing_id_is_given_up_after_the_grace() -> None:
    gaps = GapWatch(10)
    assert gaps.ready(4, [5, 7, 8], now=0.0) == 1  # 5 now; 6 missing
    assert gaps.ready(5, [7, 8], now=5.0) == 0
    assert gaps.ready(5, [7, 8], now=10.0) == 2  # 6 rolled back: never coming


def test_each_gap_gets_its_own_grace() -> None:
    gaps = GapWatch(10)
    assert gaps.ready(0, [2, 4], now=0.0) == 0
    assert gaps.ready(0, [2, 4], now=10.0) == 1  # 1 given up; 3 first missed now
    assert gaps.ready(2, [4], now=15.0) == 0
    assert gaps.ready(2, [4], now=20.0) == 1

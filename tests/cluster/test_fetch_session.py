"""A follower's side of a fetch session (logcore/replication/fetch_session.py): which rounds are
full, what an incremental round names, and how an error or a lost round ends the session."""
from __future__ import annotations

from logcore.replication.fetch_session import FollowerSession

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def _fields(**offsets) -> dict:
    keys = {"a": A, "b": B, "c": C}
    return {keys[k]: (0, offset, 0, 0, 1 << 20) for k, offset in offsets.items()}


def _round(session: FollowerSession, fields: dict, answer_id: int | None):
    plan = session.next_round(fields)
    session.sent(fields)
    if answer_id is not None:
        session.answered(answer_id)
    return plan


def test_the_first_round_is_full_and_the_next_name_only_what_moved():
    s = FollowerSession()
    first = _round(s, _fields(a=5, b=7), 42)
    assert first.full and (first.session_id, first.epoch) == (0, 0) and first.changed == [A, B]
    idle = _round(s, _fields(a=5, b=7), 42)
    assert not idle.full and (idle.session_id, idle.epoch) == (42, 1) and idle.changed == [] and idle.forgotten == []
    moved = _round(s, _fields(a=9, b=7, c=0), 42)
    assert (moved.epoch, moved.changed, moved.forgotten) == (2, [A, C], [])
    dropped = _round(s, _fields(a=9), 42)
    assert (dropped.epoch, dropped.changed, dropped.forgotten) == (3, [], [B, C])
    assert s.next_round(_fields(a=9)).epoch == 4


def test_a_round_not_sent_changes_nothing():
    s = FollowerSession()
    _round(s, _fields(a=5), 42)
    s.next_round(_fields(a=6))                 # built, never sent (the write could not go out)
    again = s.next_round(_fields(a=6))
    assert again.changed == [A] and again.epoch == 1


def test_a_failure_ends_the_session_and_the_next_round_closes_it():
    s = FollowerSession()
    _round(s, _fields(a=5), 42)
    _round(s, _fields(a=6), 42)
    s.failed()
    full = s.next_round(_fields(a=6))
    assert full.full and (full.session_id, full.epoch) == (42, 0)       # epoch 0 with the old id ends it
    _round(s, _fields(a=6), 77)
    assert (s.session_id, s.epoch) == (77, 1)


def test_a_leader_without_a_session_for_us_gets_full_rounds():
    s = FollowerSession()
    for _ in range(3):
        plan = _round(s, _fields(a=5), 0)
        assert plan.full and plan.epoch == 0


def test_an_answer_counts_once():
    s = FollowerSession()
    _round(s, _fields(a=5), 42)
    s.answered(42)                              # no round in flight: ignored
    assert s.epoch == 1

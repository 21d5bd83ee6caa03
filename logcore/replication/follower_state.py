"""What a partition's leader knows of its followers, and the rules it applies with it: when a
follower is caught up, which followers leave or join the ISR, and where the high watermark may
go. Pure functions and plain state (no I/O), after Kafka's Replica.scala and
Partition.maybeIncrementLeaderHW; the replica manager applies them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FollowerState:
    """The leader's view of one follower (Kafka's Replica): its LEO as its last fetch said,
    when it last fetched, and when it was last caught up. Times are monotonic milliseconds."""
    log_end_offset: int = -1                 # -1: unknown until its first fetch in this tenure
    log_start_offset: int = -1
    last_fetch_leader_leo: int = -1
    last_fetch_ms: float = 0.0
    last_caught_up_ms: float = 0.0

    def on_fetch(self, fetch_offset: int, leader_leo: int, now_ms: float) -> None:
        """A non-diverging fetch at `fetch_offset` (the follower's LEO) when the leader's LEO
        was `leader_leo`. Caught up: it asked for the leader's end, or for at least what the
        leader had at its previous fetch (so a steady trickle of produces keeps it in)."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_leo = max(leader_leo, self.last_fetch_leader_leo)
        self.last_fetch_ms = now_ms
        self.log_end_offset = fetch_offset

    def caught_up(self, leader_leo: int, now_ms: float, lag_max_ms: float) -> bool:
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_ms <= lag_max_ms


def reset_followers(assignment, me: int, isr, previous: dict[int, FollowerState] | None,
                    now_ms: float) -> dict[int, FollowerState]:
    """Follower state at the start of a leader tenure (Kafka's makeLeader): ISR members get a
    grace period (caught up now), others none; a broker that was not leader before knows no
    follower's LEO, one that stays leader keeps what it knew."""
    out = {}
    for r in assignment:
        if r == me:
            continue
        state = FollowerState() if previous is None or r not in previous else previous[r]
        state.last_caught_up_ms = now_ms if r in isr else 0.0
        out[r] = state
    return out


def out_of_sync(isr, me: int, followers: dict[int, FollowerState], leader_leo: int, now_ms: float,
                lag_max_ms: float) -> list[int]:
    """ISR members (not the leader) that have not caught up within replica.lag.time.max.ms."""
    return [r for r in isr if r != me
            and not (r in followers and followers[r].caught_up(leader_leo, now_ms, lag_max_ms))]


def may_join(follower: FollowerState, high_watermark: int, epoch_start_offset: int) -> bool:
    """A follower outside the ISR joins once it holds everything the leader had committed and
    everything of the leader's own epoch start (so it has what the leader had when elected)."""
    return follower.log_end_offset >= high_watermark and follower.log_end_offset >= epoch_start_offset


def high_watermark_candidate(leader_leo: int, isr, me: int, followers: dict[int, FollowerState],
                             min_insync: int, replicas: int) -> int | None:
    """Where the leader's HW may go: the smallest LEO over the ISR (the leader's own
    included). None while the ISR is smaller than min(min.insync.replicas, replica count): the
    HW does not move then (KAFKA-15583), so whatever it covers is on that many replicas."""
    if len(isr) < min(min_insync, replicas):
        return None
    candidate = leader_leo
    for r in isr:
        if r == me:
            continue
        f = followers.get(r)
        leo = f.log_end_offset if f is not None else -1
        if leo < 0:
            return None                  # an ISR member not heard from in this tenure yet
        candidate = min(candidate, leo)
    return candidate

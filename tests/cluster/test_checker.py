"""The history checker (checker.py) on hand-built histories: each anomaly of the reference
note's section 6.4 must be flagged, and clean histories (including legitimate indeterminate
sends and HW dips across leader epochs) must pass."""
from __future__ import annotations

import json

import pytest

from checker import check, check_replicas, explain_duplicates, load_history, read_replica

T0 = 1_000_000_000


class H:
    """A small history builder: sends, polls, hw observations and a final read."""

    def __init__(self):
        self.events = []
        self.t = T0

    def _ev(self, **ev):
        self.t += 1_000_000
        ev["t"] = self.t
        self.events.append(ev)
        return ev

    def send(self, proc, key, value, offset=None, outcome="ok", error=None, epoch=0):
        self._ev(proc=proc, type="invoke", f="send", key=key, value=value)
        if outcome == "ok":
            self._ev(proc=proc, type="ok", f="send", key=key, value=value, offset=offset, leader_epoch=epoch)
        else:
            self._ev(proc=proc, type=outcome, f="send", key=key, value=value, error=error)

    def assign(self, proc, key, offset):
        self._ev(proc=proc, type="ok", f="assign", key=key, offset=offset)

    def poll(self, proc, key, offset, value, hw=None):
        self._ev(proc=proc, type="ok", f="poll", key=key, offset=offset, value=value, hw=hw)

    def hw(self, key, hw, epoch):
        self._ev(proc="hw", type="ok", f="hw", key=key, offset=hw, leader_epoch=epoch)

    def nemesis(self, what):
        self._ev(proc="nemesis", type="info", f="nemesis", value=what, phase="start")


def clean():
    """Two producers on keys 0 and 1, one indeterminate send that landed, one definite failure
    that did not, one consumer reading key 0 twice (re-assigned), HW watcher with a dip across
    a leader change."""
    h = H()
    h.send("p0", 0, 100, 0)
    h.send("p1", 0, 200, 1)
    h.send("p0", 0, 101, 2)
    h.send("p0", 1, 102, 0)
    h.hw(0, 3, 0)
    h.nemesis("kill 1")
    h.send("p1", 0, 201, outcome="info", error="REQUEST_TIMED_OUT")     # landed at 3 anyway
    h.send("p1", 0, 202, outcome="fail", error="NOT_ENOUGH_REPLICAS")   # never appended
    h.hw(0, 2, 1)                                                         # new leader lags a round
    h.send("p0", 0, 103, 4, epoch=1)
    h.hw(0, 5, 1)
    h.assign("c0", 0, 0)
    for o, v in enumerate([100, 200, 101, 201, 103]):
        h.poll("c0", 0, o, v, hw=5)
    h.assign("c0", 0, 2)
    h.poll("c0", 0, 2, 101, hw=5)
    final = {0: {"start": 0, "records": [[0, 100], [1, 200], [2, 101], [3, 201], [4, 103]]},
             1: {"start": 0, "records": [[0, 102]]}}
    return h, final


def kinds(res):
    return set(res.counts)


def test_clean_history_is_valid():
    h, final = clean()
    res = check(h.events, final)
    assert res.valid, res.summary()
    assert res.stats["sends_ok"] == 5 and res.stats["sends_fail"] == 1 and res.stats["sends_info"] == 1
    assert res.stats["info_sends_in_final"] == 1
    assert res.stats["hw_dips_across_epochs"] == 1
    assert res.stats["errors"] == {"send:NOT_ENOUGH_REPLICAS": 1, "send:REQUEST_TIMED_OUT": 1}
    live = res.stats["liveness"]
    assert live["faults"] == 1 and live["max_s_to_first_ok_send"] > 0


def test_lost_write():
    h, final = clean()
    final[0]["records"] = final[0]["records"][:4]          # offset 4 (value 103, acked) gone
    res = check(h.events, final)
    assert "lost" in kinds(res)
    assert res.anomalies["lost"][0]["value"] == 103


def test_lost_write_replaced_by_other_value():
    h, final = clean()
    final[0]["records"][2] = [2, 999]
    res = check(h.events, final)
    assert {"lost", "inconsistent-offsets"} <= kinds(res)


def test_acknowledged_without_offset_must_be_in_the_final_read():
    h, final = clean()
    h.send("p0", 1, 104, offset=None)
    h.send("p0", 1, 105, offset=None)
    final[1]["records"].append([1, 104])                 # 104 landed, 105 did not
    res = check(h.events, final)
    assert kinds(res) == {"lost"}
    assert [ex["value"] for ex in res.anomalies["lost"]] == [105]
    assert res.stats["sends_ok_without_offset"] == 2


def test_unseen_when_final_read_incomplete():
    h, final = clean()
    final[0]["records"] = final[0]["records"][:4]
    final[0]["complete"] = False
    res = check(h.events, final)
    assert kinds(res) == {"unseen"}
    assert res.stats["unseen"] == 1


def test_inconsistent_offsets_two_values_at_one_offset():
    h, final = clean()
    h.assign("c1", 1, 0)
    h.poll("c1", 1, 0, 777)                               # the send said 102 is at 0
    res = check(h.events, final)
    assert "inconsistent-offsets" in kinds(res)
    assert res.anomalies["inconsistent-offsets"][0]["values"] == [102, 777]


def test_polled_record_that_vanished():
    h, final = clean()
    h.send("p1", 0, 300, outcome="info", error="NOT_LEADER_OR_FOLLOWER")
    h.assign("c1", 0, 5)
    h.poll("c1", 0, 5, 300)                                # read, then truncated away
    res = check(h.events, final)
    assert "inconsistent-offsets" in kinds(res)
    assert "vanished" in res.anomalies["inconsistent-offsets"][0]["reason"]


def test_duplicate_value():
    h, final = clean()
    final[0]["records"].append([5, 101])                    # 101 is also at offset 2
    res = check(h.events, final)
    assert "duplicate" in kinds(res)
    assert res.anomalies["duplicate"][0]["at"] == [(0, 2), (0, 5)]


def test_duplicate_of_a_producer_without_idempotence_is_counted_not_failed():
    h, final = clean()
    h._ev(proc="q0", type="invoke", f="send", key=1, value=500, idempotent=False)
    h._ev(proc="q0", type="ok", f="send", key=1, value=500, offset=2)
    final[1]["records"] += [[1, 500], [2, 500]]
    res = check(h.events, final)
    assert res.valid, res.summary()
    assert res.stats["duplicates_without_idempotence"] == 1
    assert res.stats["duplicates_without_idempotence_examples"][0]["at"] == [(1, 1), (1, 2)]
    h._ev(proc="p0", type="invoke", f="send", key=1, value=501, idempotent=True)
    h._ev(proc="p0", type="ok", f="send", key=1, value=501, offset=3)
    final[1]["records"] += [[3, 501], [4, 501]]
    assert kinds(check(h.events, final)) == {"duplicate"}


def test_aborted_read_in_final():
    h, final = clean()
    final[0]["records"].append([5, 202])                    # 202's send definitely failed
    res = check(h.events, final)
    assert "aborted-read" in kinds(res)


def test_aborted_read_in_poll_only():
    h, final = clean()
    h.assign("c2", 1, 1)
    h.poll("c2", 1, 1, 202)
    res = check(h.events, final)
    assert "aborted-read" in kinds(res)


def test_poll_skip():
    h, final = clean()
    h.assign("c1", 0, 0)
    h.poll("c1", 0, 0, 100)
    h.poll("c1", 0, 2, 101)
    res = check(h.events, final)
    assert kinds(res) == {"poll-skip"}


def test_first_poll_after_assign_must_be_the_assigned_offset():
    h, final = clean()
    h.assign("c1", 0, 1)
    h.poll("c1", 0, 3, 201)
    assert kinds(check(h.events, final)) == {"poll-skip"}


def test_nonmonotonic_poll():
    h, final = clean()
    h.assign("c1", 0, 0)
    h.poll("c1", 0, 0, 100)
    h.poll("c1", 0, 1, 200)
    h.poll("c1", 0, 0, 100)
    res = check(h.events, final)
    assert kinds(res) == {"nonmonotonic-poll"}


def test_reassign_resets_poll_order():
    h, final = clean()
    h.assign("c1", 0, 3)
    h.poll("c1", 0, 3, 201)
    h.assign("c1", 0, 1)
    h.poll("c1", 0, 1, 200)
    assert check(h.events, final).valid


def test_poll_above_the_high_watermark():
    h, final = clean()
    h.assign("c1", 0, 4)
    h.poll("c1", 0, 4, 103, hw=4)
    assert kinds(check(h.events, final)) == {"poll-above-hw"}


def test_consumer_refused_with_offset_out_of_range():
    h, final = clean()
    h._ev(proc="c0", type="fail", f="poll", key=0, error="_AUTO_OFFSET_RESET",
          message="fetch failed due to requested offset not available on the broker")
    res = check(h.events, final)
    assert kinds(res) == {"offset-out-of-range"}
    assert res.stats["errors"]["poll:_AUTO_OFFSET_RESET"] == 1


def test_nonmonotonic_send():
    h, final = clean()
    # p0 sends 400 then 401; the later one lands at the lower offset
    h._ev(proc="p0", type="invoke", f="send", key=1, value=400)
    h._ev(proc="p0", type="invoke", f="send", key=1, value=401)
    h._ev(proc="p0", type="ok", f="send", key=1, value=401, offset=1)
    h._ev(proc="p0", type="ok", f="send", key=1, value=400, offset=2)
    final[1]["records"] += [[1, 401], [2, 400]]
    res = check(h.events, final)
    assert kinds(res) == {"nonmonotonic-send"}


def test_send_order_follows_invokes_not_completions():
    h, final = clean()
    h._ev(proc="p0", type="invoke", f="send", key=1, value=400)
    h._ev(proc="p0", type="invoke", f="send", key=1, value=401)
    h._ev(proc="p0", type="ok", f="send", key=1, value=401, offset=2)   # completion recorded first
    h._ev(proc="p0", type="ok", f="send", key=1, value=400, offset=1)
    final[1]["records"] += [[1, 400], [2, 401]]
    assert check(h.events, final).valid


def test_hw_regression_within_epoch():
    h, final = clean()
    h.hw(0, 4, 1)                                           # epoch 1 had reported 5
    res = check(h.events, final)
    assert kinds(res) == {"hw-regression"}


def _unclean_history(election: bool):
    """Key 0: p0's records 0..2 acknowledged by a leader alone in its ISR, 2 polled by c0; then
    (with `election`) a controller elects broker 2 outside that ISR, whose log ends at 1: p0's
    next record lands at 1 (its record there is replaced), 2 is gone and c0 is refused at 3.
    Key 1 untouched, but its final read has lost the acknowledged 11 at 1."""
    h = H()
    h.send("p0", 0, 100, 0)
    h.send("p0", 0, 101, 1)
    h.send("p0", 0, 102, 2)
    h.send("p1", 1, 10, 0)
    h.send("p1", 1, 11, 1)
    h.assign("c0", 0, 0)
    for o, v in enumerate([100, 101, 102]):
        h.poll("c0", 0, o, v, hw=3)
    if election:
        h._ev(proc="broker", type="info", f="unclean-election", key=0, leader=2, isr=[1], controller=3)
    h._ev(proc="c0", type="fail", f="poll", key=0, error="OFFSET_OUT_OF_RANGE")
    h.send("p0", 0, 103, 1, epoch=1)
    final = {0: {"start": 0, "records": [[0, 100], [1, 103]]}, 1: {"start": 0, "records": [[0, 10]]}}
    return h, final


def test_unclean_election_losses_are_counted_apart_on_its_key_only():
    h, final = _unclean_history(election=True)
    res = check(h.events, final, allowed_loss=True)
    # key 0's losses are what the unclean election does; key 1's loss has no such excuse
    assert res.counts == {"lost": 1}, res.summary()
    assert res.anomalies["lost"][0]["key"] == 1
    assert res.expected == {"lost-after-unclean-election": 2, "replaced-after-unclean-election": 1,
                            "out-of-range-after-unclean-election": 1,
                            "reused-offset-after-unclean-election": 1}, res.expected
    assert res.stats["unclean_elections"] == 1 and res.stats["unclean_keys"] == [0]
    assert "lost after unclean election: 2" in res.summary()
    # without key 1's loss the run is valid, the loss still reported
    final[1]["records"].append([1, 11])
    res = check(h.events, final, allowed_loss=True)
    assert res.valid and res.expected["lost-after-unclean-election"] == 2, res.summary()
    assert res.summary().startswith("valid") and "lost after unclean election: 2" in res.summary()


def test_loss_without_an_unclean_election_stays_an_anomaly():
    h, final = _unclean_history(election=False)
    final[1]["records"].append([1, 11])
    res = check(h.events, final, allowed_loss=True)          # the topic allowed it; none happened
    assert {"lost", "inconsistent-offsets", "offset-out-of-range", "nonmonotonic-send"} == kinds(res)
    assert res.counts["lost"] == 2 and not res.expected
    h, final = _unclean_history(election=True)               # one happened; the run did not allow it
    final[1]["records"].append([1, 11])
    res = check(h.events, final)
    assert res.counts["lost"] == 2 and not res.expected and res.stats["unclean_elections"] == 1


def test_unclean_election_does_not_excuse_a_value_twice_in_the_final_read():
    h, final = _unclean_history(election=True)
    final[1]["records"].append([1, 11])
    final[0]["records"].append([2, 100])                     # 100 at 0 and at 2
    res = check(h.events, final, allowed_loss=True)
    assert kinds(res) == {"duplicate"}, res.summary()


def test_history_file_round_trip(tmp_path):
    h, final = clean()
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in h.events))
    assert check(load_history(path), final).valid
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match="line"):
        load_history(path)


def test_final_read_with_a_gap_is_rejected():
    h, final = clean()
    final[0]["records"].pop(2)
    with pytest.raises(ValueError, match="not contiguous"):
        check(h.events, final)


# ------------------------------------------------------------------ point 8, replicas on disk

def _write_replica(root, topic, partition, batches, epochs, hw):
    """A broker's log.dirs with one partition: `batches` as (base_offset, epoch, [values])."""
    from logcore.log.checkpoint import LeaderEpochCheckpoint, OffsetCheckpoint
    from logcore.records.batch import build_batch

    pdir = root / f"{topic}-{partition}"
    pdir.mkdir(parents=True)
    data = b"".join(build_batch([(None, str(v).encode(), (), 1_700_000_000_000) for v in values],
                                base_offset=base, partition_leader_epoch=epoch)
                    for base, epoch, values in batches)
    (pdir / "00000000000000000000.log").write_bytes(data)
    (pdir / "leader-epoch-checkpoint").write_bytes(LeaderEpochCheckpoint.encode(epochs))
    (root / "replication-offset-checkpoint").write_bytes(OffsetCheckpoint.encode({(topic, partition): hw}))


def test_replicas_identical_up_to_hw(tmp_path):
    common = [(0, 0, [1, 2]), (2, 1, [3])]
    _write_replica(tmp_path / "b1", "t", 0, common + [(3, 1, [4])], [(0, 0), (1, 2)], 3)
    _write_replica(tmp_path / "b2", "t", 0, common, [(0, 0), (1, 2)], 3)
    _write_replica(tmp_path / "b3", "t", 0, common, [(0, 0), (1, 2)], 3)
    reps = {0: {b: read_replica(tmp_path / f"b{b}", "t", 0) for b in (1, 2, 3)}}
    assert reps[0][1].log_end_offset == 4 and reps[0][2].log_end_offset == 3
    assert reps[0][1].batches[1][:3] == (2, 2, 1)
    res = check_replicas(reps, {0: 3})
    assert res.valid, res.summary()
    assert res.stats["replica_pairs_compared"] == 2


def test_replica_divergence_flagged(tmp_path):
    _write_replica(tmp_path / "b1", "t", 0, [(0, 0, [1, 2]), (2, 1, [3])], [(0, 0), (1, 2)], 3)
    _write_replica(tmp_path / "b2", "t", 0, [(0, 0, [1, 2]), (2, 2, [9])], [(0, 0), (2, 2)], 3)
    reps = {0: {b: read_replica(tmp_path / f"b{b}", "t", 0) for b in (1, 2)}}
    res = check_replicas(reps, {0: 3})
    assert {"replica-divergence", "epoch-cache-divergence"} <= kinds(res)
    assert res.anomalies["replica-divergence"][0]["batch_index"] == 1


def test_replica_behind_hw_missing_and_checkpoint_beyond_leo(tmp_path):
    _write_replica(tmp_path / "b1", "t", 0, [(0, 0, [1, 2]), (2, 0, [3])], [(0, 0)], 3)
    _write_replica(tmp_path / "b2", "t", 0, [(0, 0, [1, 2])], [(0, 0)], 3)     # LEO 2 < checkpoint 3
    reps = {0: {1: read_replica(tmp_path / "b1", "t", 0), 2: read_replica(tmp_path / "b2", "t", 0),
                3: read_replica(tmp_path / "b3", "t", 0)}}
    res = check_replicas(reps, {0: 3})
    assert {"replica-behind-hw", "checkpoint-beyond-leo", "replica-missing", "replica-divergence"} == kinds(res)


def _write_producer_batches(root, topic, partition, batches):
    """(base_offset, producer_id, producer_epoch, base_sequence, value) single-record batches."""
    from logcore.records.batch import build_batch
    pdir = root / f"{topic}-{partition}"
    pdir.mkdir(parents=True)
    (pdir / "00000000000000000000.log").write_bytes(b"".join(
        build_batch([(None, str(v).encode(), (), 1_700_000_000_000)], base_offset=o, producer_id=pid,
                    producer_epoch=pe, base_sequence=seq, partition_leader_epoch=0)
        for o, pid, pe, seq, v in batches))


@pytest.mark.parametrize("second, cause", [
    ((2, 7, 1, 0, 50), "client re-sent after a producer epoch bump"),
    ((2, 7, 0, 45, 50), "broker appended a retried batch twice"),
])
def test_duplicates_explained_from_batch_headers(tmp_path, second, cause):
    _write_producer_batches(tmp_path, "t", 0, [(0, 7, 0, 45, 50), (1, 7, 0, 46, 51), second])
    h = H()
    h.send("p0", 0, 50, 2)
    h.send("p0", 0, 51, 1)
    res = check(h.events, {0: {"start": 0, "records": [[0, 50], [1, 51], [2, 50]]}})
    assert "duplicate" in kinds(res)
    explain_duplicates(res, lambda key: tmp_path, "t")
    ex = res.anomalies["duplicate"][0]
    assert [b["base_offset"] for b in ex["batches"]] == [0, 2]
    assert ex["cause"].startswith(cause)

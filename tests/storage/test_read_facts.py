"""ReadFacts (logcore/storage/read_facts.py): a recording reader always asks the store, a
replaying one answers what it knows, a settled one keeps only immutable segment objects' facts,
and the facts handed to one partition's task hold that partition and the root's files only."""
from __future__ import annotations

import pickle
import uuid

from logcore.storage import open_storage
from logcore.storage.read_facts import FOLDER_BUDGET, MAX_KEPT_BYTES, RECORD, REPLAY, ReadFacts


def _storage(facts=None):
    url = f"memory://facts-{uuid.uuid4().hex[:8]}/root"
    writer = open_storage(url)
    reader = open_storage(url, read_only=True)
    if facts is not None:
        reader.remember_reads(facts)
    return writer, reader


def test_recording_asks_the_store_once_per_round():
    facts = ReadFacts(RECORD)
    writer, reader = _storage(facts)
    writer.write_atomic("t-0/partition-state.json", b"one")
    assert reader.read("t-0/partition-state.json") == b"one"
    assert reader.list_dir("t-0") == ["partition-state.json"]
    writer.write_atomic("t-0/partition-state.json", b"two")
    writer.write_atomic("t-0/00000000000000000000.log", b"x" * 10)
    # the same planning call: read once
    assert reader.read("t-0/partition-state.json") == b"one"
    assert reader.list_dir("t-0") == ["partition-state.json"]
    facts.new_round()
    assert reader.read("t-0/partition-state.json") == b"two"
    assert reader.list_dir("t-0") == ["00000000000000000000.log", "partition-state.json"]


def test_replaying_answers_what_it_knows_until_settled():
    writer, reader = _storage(ReadFacts(REPLAY))
    writer.write_atomic("t-0/partition-state.json", b"one")
    writer.write_atomic("t-0/00000000000000000000.log", b"x" * 10)
    assert reader.list_dir("t-0") == ["00000000000000000000.log", "partition-state.json"]
    assert reader.read("t-0/partition-state.json") == b"one"
    writer.write_atomic("t-0/partition-state.json", b"two")
    writer.write_atomic("t-0/00000000000000000100.log", b"y")
    # within one open: asked once
    assert reader.read("t-0/partition-state.json") == b"one"
    assert reader.list_dir("t-0") == ["00000000000000000000.log", "partition-state.json"]
    assert reader.size("t-0/00000000000000000000.log") == 10         # from the listing
    assert not reader.exists("t-0/00000000000000000100.log")
    reader.settle_reads()
    # the open is done: listings and mutable files are asked again; segment sizes stay
    assert reader.read("t-0/partition-state.json") == b"two"
    assert reader.exists("t-0/00000000000000000100.log")
    writer.delete("t-0/00000000000000000000.log")
    assert reader.size("t-0/00000000000000000000.log") == 10
    assert not reader.exists("t-0/00000000000000000000.log")


def test_a_partitions_facts_hold_it_and_the_root_files_within_a_budget():
    facts = ReadFacts(RECORD)
    writer, reader = _storage(facts)
    writer.write_atomic("seglog-topics.json", b"{}")
    for p in range(2):
        writer.write_atomic(f"t-{p}/partition-state.json", b"s%d" % p)
        writer.write_atomic(f"t-{p}/00000000000000000000.index", b"i" * MAX_KEPT_BYTES)
        writer.write_atomic(f"t-{p}/00000000000000000000.log", b"l" * (2 * MAX_KEPT_BYTES))
        reader.list_dir(f"t-{p}")
        reader.read(f"t-{p}/partition-state.json")
        reader.read(f"t-{p}/00000000000000000000.index")
        reader.read(f"t-{p}/00000000000000000000.log")                      # too big to keep
        reader.read(f"t-{p}/00000000000000000000.log", 100, 200)
    reader.list_dir("")
    reader.read("seglog-topics.json")
    mine = pickle.loads(pickle.dumps(facts.for_folder("t-1")))
    assert mine.policy == REPLAY
    _writer, task = _storage(mine)
    writer.delete("t-1/partition-state.json")             # the facts answer, not the store
    task_url_reads = [task.read_facts.read_range("t-1/00000000000000000000.log", 100, 200, _fail),
                      task.read_facts.whole("t-1/partition-state.json", _fail)[0],
                      task.read_facts.whole("seglog-topics.json", _fail)[0]]
    assert task_url_reads == [b"l" * 100, b"s1", b"{}"]
    assert task.read_facts.listing("t-1", _fail) == ["00000000000000000000.index",
                                                     "00000000000000000000.log", "partition-state.json"]
    assert task.read_facts.whole("t-0/partition-state.json", lambda: None) is None      # not t-0's
    assert len(pickle.dumps(mine)) < FOLDER_BUDGET + 64 * 1024


def _fail():
    raise AssertionError("asked the store")

"""Change notices against a real ZooKeeper: a znode replaced with its notice in one transaction,
the watch handling each later notice once and in order, and notices older than the expiration
deleted (Kafka's ZkNodeChangeNotificationListener)."""
from __future__ import annotations

import threading
import time

import pytest

from logcore.cluster.change_notices import CHANGE_EXPIRATION_MS, UNCHANGED, ChangeNotices, config_changes
from logcore.errors import ZkVersionConflictError
from test_zookeeper_store import wait_for


def test_replace_creates_sets_deletes_and_announces(zk_client):
    notices = ChangeNotices(zk_client, "/changes", "change_")
    notices.ensure()

    def to(value):
        return lambda raw: ((raw, value), value)
    assert notices.replace("/things/a", to(b"1"), b"n1") == (None, b"1")    # parent made
    assert notices.replace("/things/a", to(b"2"), b"n2") == (b"1", b"2")
    assert notices.replace("/things/a", lambda raw: ("same", UNCHANGED), b"n-") == "same"
    assert zk_client.get("/things/a")[0] == b"2"
    assert notices.replace("/things/a", to(None), b"n3") == (b"2", None)
    assert zk_client.exists("/things/a") is None
    assert notices.replace("/things/a", to(None), b"n4") == (None, None)    # absent stays so
    children = sorted(zk_client.get_children("/changes"))
    assert children == [f"change_{i:010d}" for i in range(3)]
    assert [zk_client.get(f"/changes/{c}")[0] for c in children] == [b"n1", b"n2", b"n3"]
    assert config_changes(zk_client).folder == "/config/changes"
    assert CHANGE_EXPIRATION_MS == 15 * 60_000


def test_replace_retries_a_lost_race_then_gives_up(zk_client):
    notices = ChangeNotices(zk_client, "/changes", "change_")
    notices.ensure()
    zk_client.create("/x", b"0")
    calls = []

    def racing(raw):        # another writer gets in between the first read and its write
        calls.append(raw)
        if len(calls) == 1:
            zk_client.set("/x", b"other")
        return None, raw + b"+"
    notices.replace("/x", racing, b"n")
    assert calls == [b"0", b"other"] and zk_client.get("/x")[0] == b"other+"

    def always_racing(raw):
        zk_client.set("/x", b"again")
        return None, b"mine"
    with pytest.raises(ZkVersionConflictError, match="/x"):
        notices.replace("/x", always_racing, b"n")
    assert len(zk_client.get_children("/changes")) == 1          # no notice for a write not made


def test_watch_handles_each_later_notice_once_in_order_and_purges_expired(zk_client):
    writer = ChangeNotices(zk_client, "/changes", "change_")
    writer.ensure()
    for data in (b"before-1", b"before-2"):
        zk_client.create("/changes/change_", data, sequence=True)
    zk_client.create("/changes/not-a-notice", b"")
    seen, lock = [], threading.Lock()

    def on_notice(name, raw):
        with lock:
            seen.append((name, raw))
    reader = ChangeNotices(zk_client, "/changes", "change_", expiration_ms=1500)
    reader.mark_handled()           # the two so far are in what a caller loads
    reader.watch(on_notice)
    for data in (b"a", b"b", b"c"):
        t = zk_client.transaction()
        writer.add(t, data)
        t.commit()
    wait_for(lambda: len(seen) == 3, what="three notices")
    names = sorted(c for c in zk_client.get_children("/changes") if c.startswith("change_"))
    assert seen == list(zip(names[2:], (b"a", b"b", b"c")))
    # past the expiration, the next notice's event deletes every older one (and only notices)
    time.sleep(1.6)
    last = zk_client.create("/changes/change_", b"d", sequence=True).rpartition("/")[2]
    wait_for(lambda: sorted(zk_client.get_children("/changes")) == [last, "not-a-notice"],
             what="expired notices purged")
    assert seen[-1] == (last, b"d") and len(seen) == 4
    with pytest.raises(ValueError, match="expiration"):
        ChangeNotices(zk_client, "/changes", "change_", expiration_ms=-1)
